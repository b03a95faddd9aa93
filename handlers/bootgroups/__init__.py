"""Instance Boot Groups (CloudStack's feature, issue 12): tiered, readiness-gated start, stop and reboot.

Pure domain modules at the bottom: ``model`` (properties and the normalised plan), ``validation``,
``settings``, ``readiness`` (§2.3-§2.5), ``engine`` (§4, a resumable step over JSON state),
``events``; ``backends`` is the Protocol the engine calls. Import submodules directly; this package
module stays empty so a cold start pays only for what it uses.
"""
