"""Flynn-style apps and HTTP/TCP routes: validation, storage, a local router and a controller API.

Import submodules directly (``handlers.routes.provider``, ``handlers.routes.proxy`` ...); this
package module stays empty so a cold start pays only for what it uses.
"""
