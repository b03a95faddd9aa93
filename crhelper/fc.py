"""Function Compute entry that imports the provider lazily, so an import error is answered FAILED.

Deploy with handler `index.handler` and an `index.py` of:  `from crhelper.fc import handler`
and the environment variable `CRHELPER_PROVIDER=mypackage.module:provider`.
Or bind a spec in code: `handler = crhelper.fc.lazy_handler("mypackage.module:provider")`.
"""

from __future__ import annotations

import importlib
import json
import os
import traceback
from typing import Any, Callable

from .config import Settings
from .logs import configure, get_logger
from .runtime import answer_failure

_log = get_logger("fc")


class ProviderSpecError(ValueError):
    pass


def load_provider(spec: str) -> Any:
    """Import `module:attribute` (or `module.attribute`) and return the provider object."""
    if ":" in spec:
        module_name, _, attribute = spec.partition(":")
    else:
        module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise ProviderSpecError(f"provider spec must look like 'package.module:provider', got {spec!r}")
    module = importlib.import_module(module_name)
    try:
        provider = getattr(module, attribute)
    except AttributeError:
        raise ProviderSpecError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if not hasattr(provider, "handle"):
        raise ProviderSpecError(f"{spec!r} is a {type(provider).__name__}, not a crhelper Provider")
    return provider


def lazy_handler(spec: str | None = None) -> Callable[[Any, Any], str]:
    """An FC handler that imports the provider on first use and answers FAILED on every request if that fails."""
    state: dict[str, Any] = {}

    def handler(event: Any, context: Any = None) -> str:
        if "provider" not in state and "error" not in state:
            target = spec or os.environ.get("CRHELPER_PROVIDER", "")
            try:
                if not target:
                    raise ProviderSpecError("CRHELPER_PROVIDER is not set; set it to 'package.module:provider'")
                state["provider"] = load_provider(target)
            except BaseException as exc:  # SyntaxError, ImportError, anything the module raises at import
                state["error"] = f"provider failed to initialise: {type(exc).__name__}: {exc}"
                configure()
                _log.error("provider import failed", extra={"fields": {"traceback": traceback.format_exc()}})
        if "error" in state:
            configure()
            result, _ = answer_failure(event, state["error"], Settings.from_env())
            return json.dumps(result.body or {"Status": "FAILED", "Reason": state["error"]})
        return state["provider"].fc_handler(event, context)

    return handler


handler = lazy_handler()
