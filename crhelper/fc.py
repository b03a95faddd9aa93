"""Function Compute entry that imports the provider lazily, so an import error is answered FAILED.

Deploy with handler `index.handler` and an `index.py` of:  `from crhelper.fc import handler`
and the environment variable `CRHELPER_PROVIDER=mypackage.module:provider`.
Or bind a spec in code: `handler = crhelper.fc.lazy_handler("mypackage.module:provider")`.
"""

from __future__ import annotations

import importlib
import os
import time
import traceback
from typing import Any, Callable

from .config import ConfigError, Settings
from .logs import configure, get_logger
from .runtime import Outcome, send_failed
from .transports.fc import answer_invocation

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
    """An FC handler that imports the provider on first use and answers FAILED on every request if that fails.

    The invocation's clock starts before the import, so a slow import still leaves time to answer."""
    state: dict[str, Any] = {}

    def handler(event: Any, context: Any = None) -> str:
        started = time.monotonic()
        if "provider" not in state and "error" not in state:
            target = spec or os.environ.get("CRHELPER_PROVIDER", "")
            try:
                if not target:
                    raise ProviderSpecError("CRHELPER_PROVIDER is not set; set it to 'package.module:provider'")
                state["provider"] = load_provider(target)
                # Decided once: a Provider-like object whose fc_handler takes no `started` still works.
                state["takes_started"] = _accepts_keyword(state["provider"].fc_handler, "started")
            except BaseException as exc:  # SyntaxError, ImportError, anything the module raises at import
                state["error"] = f"provider failed to initialise: {type(exc).__name__}: {exc}"
                configure()
                _log.error("provider import failed", extra={"fields": {"traceback": traceback.format_exc()}})
        if "error" in state:
            return answer_without_provider(event, state["error"])
        provider = state["provider"]
        if state["takes_started"]:
            return str(provider.fc_handler(event, context, started=started))
        return str(provider.fc_handler(event, context))

    return handler


def _accepts_keyword(func: Callable[..., Any], name: str) -> bool:
    import inspect

    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def answer_without_provider(event: Any, reason: str) -> str:
    """Answer every request in the invocation (direct or in MNS envelopes) FAILED with `reason`."""
    configure()
    try:
        settings = Settings.from_env()
    except ConfigError as exc:  # a second problem must not silence the first: answer with defaults
        _log.error("configuration invalid as well", extra={"fields": {"error": str(exc)}})
        settings = Settings()

    def fail(body: Any) -> Outcome:
        outcome = send_failed(body, reason, settings)
        if outcome.body is None:  # nothing could be sent: the summary still says why
            return Outcome({"Status": "FAILED", "Reason": reason}, False, outcome.error)
        return outcome

    return answer_invocation(event, fail)


handler = lazy_handler()
