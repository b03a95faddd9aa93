"""Function Compute entry that imports the provider lazily, so an import error is answered FAILED.

Deploy with handler `index.handler` and an `index.py` of:  `from crhelper.fc import handler`
and the environment variable `CRHELPER_PROVIDER=mypackage.module:provider`.
Or bind a spec in code: `handler = crhelper.fc.lazy_handler("mypackage.module:provider")`.
The loader itself lives in `crhelper.loading`; this module is its public, light face.
"""

from __future__ import annotations

from .loading import LazyHandler, ProviderSpecError, answer_without_provider, lazy_handler, load_provider

__all__ = ["LazyHandler", "ProviderSpecError", "answer_without_provider", "handler", "lazy_handler", "load_provider"]

handler = lazy_handler()
