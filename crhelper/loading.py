"""Finding a provider by name, in one place: the Function Compute entry, the CLI, the emulator, deploy.

A spec is `package.module:attr`, `package.module.attr` or `path/to/file.py[:attr]` (the attribute
defaults to `provider`: `file.py` means `file.py:provider`, for every command). Whether the current directory is importable is the caller's decision
(`cwd_importable`, which the command line sets): on Function Compute the code folder is already on
`sys.path`, and a handler must not depend on where the runtime was started.

The lazy entry (`lazy_handler`) starts the invocation's clock before it imports the provider, and
a provider that fails to import is answered FAILED on every request, in every envelope, with
"provider failed to initialise: <Type>: <message>" (its traceback goes to the log).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import sysconfig
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from .config import ConfigError, Settings
from .errors import ExplainedError
from .logs import configure, get_logger
from .runtime import Outcome, send_failed
from .transports.fc import answer_invocation

if TYPE_CHECKING:
    from .provider import Provider

PROVIDER_ENV = "CRHELPER_PROVIDER"
DEFAULT_ATTRIBUTE = "provider"
SPEC_FORMS = "'package.module:provider', 'package.module.provider' or 'path/to/file.py[:provider]'"
IMPORT_HINT = ("check the module is importable from the current directory, or give a file path: "
               "crhelper invoke path/to/file.py:provider")
#: Prefix of the module name a provider file is imported under.
FILE_MODULE_PREFIX = "crhelper_user_"

_log = get_logger("fc")


class ProviderSpecError(ExplainedError, ValueError):
    """A provider spec that names nothing loadable: `problem` says what, `next_step` what to do."""


def import_from_cwd() -> None:
    """Make the current directory importable, as users expect from a command line."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def _module_name_is_valid(name: str) -> bool:
    return bool(name) and all(part.isidentifier() for part in name.split("."))


def parse_spec(spec: str) -> tuple[str, str, bool]:
    """(module name or file path, attribute, whether it is a file) for a spec; ProviderSpecError if malformed."""
    text = spec.strip()
    if text.endswith(".py"):
        return text, DEFAULT_ATTRIBUTE, True
    location, sep, attribute = text.rpartition(":")
    if sep and location.endswith(".py"):
        return location, attribute or DEFAULT_ATTRIBUTE, True
    if ":" in text:
        module, _, attribute = text.partition(":")
    else:
        module, _, attribute = text.rpartition(".")
    if not _module_name_is_valid(module) or not attribute.isidentifier():
        raise ProviderSpecError(f"provider spec {spec!r} is not {SPEC_FORMS}",
                                "name the module and the Provider object in it, e.g. samples.greeting:provider")
    return module, attribute, False


def _import_file(location: str) -> ModuleType:
    path = Path(location)
    if not path.is_file():
        raise ProviderSpecError(f"no such file: {location}",
                                "check the path (relative to the current directory), e.g. samples/greeting.py:provider")
    module_name = FILE_MODULE_PREFIX + path.stem
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ProviderSpecError(f"cannot import {location}", "give a Python source file ending in .py")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # Only the named module (or its package) missing is a spec problem; a missing dependency
        # of a module that exists is the module's own import error and keeps its type.
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise ProviderSpecError(f"no module named {exc.name!r}", IMPORT_HINT) from None
        raise


def load_provider(spec: str, *, cwd_importable: bool = False) -> "Provider":
    """Import the object a spec names and check it is a provider (it has Provider's `handle`).

    Errors: ProviderSpecError for a spec that names nothing usable; whatever the module raises
    while it is imported (SyntaxError, ImportError of a dependency, ...) as it was raised."""
    if cwd_importable:
        import_from_cwd()
    location, attribute, is_file = parse_spec(spec)
    module = _import_file(location) if is_file else _import_module(location)
    where = location if is_file else f"module {location!r}"
    try:
        provider = getattr(module, attribute)
    except AttributeError:
        raise ProviderSpecError(f"{where} has no attribute {attribute!r}",
                                f"name the Provider object it defines, e.g. {location}:provider") from None
    if not hasattr(provider, "handle"):
        raise ProviderSpecError(f"{spec!r} is a {type(provider).__name__}, not a crhelper Provider",
                                "point the spec at a crhelper.Provider instance (provider = Provider())")
    return provider  # type: ignore[no-any-return]


def _library_dirs() -> tuple[str, ...]:
    """Where frames that are not the user's code live: the standard library, installed packages, crhelper."""
    paths = sysconfig.get_paths()
    found = {os.path.dirname(os.path.abspath(__file__))}
    found.update(os.path.abspath(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths)
    return tuple(sorted(folder + os.sep for folder in found))


def _shown_path(filename: str) -> str:
    """A file as the user would type it: relative to the current directory when inside it."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if relative.startswith("..") else relative


def _where_raised(exc: BaseException) -> tuple[str, int | None] | None:
    """(file, line) of the user's code that raised at import: the deepest frame outside the
    standard library, installed packages and crhelper (else the deepest frame at all)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return exc.filename, exc.lineno
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    if not frames:
        return None
    libraries = _library_dirs()
    own = [f for f in frames if not os.path.abspath(f.filename).startswith(libraries)]
    frame = (own or frames)[-1]
    return frame.filename, frame.lineno


def describe_load_failure(spec: str, exc: BaseException) -> tuple[str, str]:
    """(problem, next step) in one line each for anything `load_provider` raised: a spec error as
    it is; an import-time failure as `file:line: Type: message` (its first line), so a command line
    shows the cause instead of a traceback through the loader."""
    if isinstance(exc, ProviderSpecError):
        return exc.problem, exc.next_step
    message = ((exc.msg or "") if isinstance(exc, SyntaxError) else str(exc)).strip()
    first, _, rest = message.partition("\n")
    error = f"{type(exc).__name__}: {first}{' ...' if rest.strip() else ''}" if first else type(exc).__name__
    where = _where_raised(exc)
    problem = error
    if where is not None:
        filename, line = where
        problem = f"{_shown_path(filename)}{f':{line}' if line else ''}: {error}"
    if isinstance(exc, SyntaxError):
        return problem, "fix the syntax at that line, then run again"
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return problem, f"install the package that provides {exc.name!r} (or fix the import), then run again"
    try:
        location, _, is_file = parse_spec(spec)
        show = f" (`python {location}` shows the traceback)" if is_file else f" (`python -c 'import {location}'` shows the traceback)"
    except ProviderSpecError:
        show = ""
    return problem, f"the provider's module raised while being imported; fix it and run again{show}"


def _accepts_keyword(func: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class LazyHandler:
    """An FC handler that imports its provider on first use; see `lazy_handler`."""

    def __init__(self, spec: str | None = None, *, cwd_importable: bool = False) -> None:
        self.spec = spec
        self.cwd_importable = cwd_importable
        self._provider: Any = None
        self._error: str | None = None
        self._takes_started = False

    def _load(self) -> None:
        target = self.spec or os.environ.get(PROVIDER_ENV, "")
        try:
            if not target:
                raise ProviderSpecError(f"{PROVIDER_ENV} is not set",
                                        f"set {PROVIDER_ENV} to 'package.module:provider' in the function's environment")
            provider = load_provider(target, cwd_importable=self.cwd_importable)
            # Decided once: a Provider-like object whose fc_handler takes no `started` still works.
            self._takes_started = _accepts_keyword(provider.fc_handler, "started")
            self._provider = provider
        except BaseException as exc:  # SyntaxError, ImportError, anything the module raises at import
            self._error = f"provider failed to initialise: {type(exc).__name__}: {exc}"
            configure()
            _log.error("provider import failed", extra={"fields": {"traceback": traceback.format_exc()}})

    def __call__(self, event: Any, context: Any = None) -> str:
        started = time.monotonic()
        if self._provider is None and self._error is None:
            self._load()
        if self._error is not None:
            return answer_without_provider(event, self._error)
        if self._takes_started:
            return str(self._provider.fc_handler(event, context, started=started))
        return str(self._provider.fc_handler(event, context))


def lazy_handler(spec: str | None = None, *, cwd_importable: bool = False) -> LazyHandler:
    """An FC handler for `spec` (default: $CRHELPER_PROVIDER, read on first use) that answers FAILED
    on every request if the import fails. The invocation's clock starts before the import, so a
    slow import still leaves time to answer."""
    return LazyHandler(spec, cwd_importable=cwd_importable)


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
