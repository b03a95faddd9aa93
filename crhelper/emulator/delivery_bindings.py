"""Which local provider answers which ServiceToken, and how requests reach it (pure, no I/O but reading text).

A bindings file (YAML or JSON) looks like::

    bindings:
      acs:fc:cn-hangzhou:123456789:services/demo/functions/greeting: ../samples/greeting.py:provider
      acs:mns:cn-hangzhou:123456789:queues/routes: handlers.routes.provider:provider
    mode: endpoints        # endpoints (default: local FC / MNS servers) or inprocess
    environment:           # optional: variables of the emulated FC functions (as a deployed function's)
      CRHELPER_STORE: sqlite:///tmp/shared.sqlite
    faults:                # optional fault injection, see `Faults`
      duplicate: true
      response_fail_first: 2

A provider is `package.module:attr` or `path/to/file.py:attr`; a relative file path is resolved
against the bindings file's directory (in a `-s TOKEN=SPEC` flag: against the current directory)
and kept absolute, so a stack's remembered bindings work from any directory later. `-s` flags add
to (and override) the file.
Tokens are matched in canonical form, so `acs:mns:...:/queues/q` and `...:queues/q` are the same.
Emulated FC functions get what a deployed function gets: a store shared by all their instances
(`CRHELPER_STORE`, by default the local store under `$CRHELPER_HOME`) and the endpoint to
re-invoke themselves through; `environment` (or the emulator's own `CRHELPER_STORE`) overrides it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..servicetoken import ServiceTokenError, WebToken, parse_service_token

MODES = ("endpoints", "inprocess")
BINDINGS_SUFFIX = ".bindings.yaml"
_FILE_KEYS = frozenset({"bindings", "mode", "faults", "environment"})


class BindingError(ValueError):
    """A bindings file or `-s` flag is unusable; the message names the key and the rule."""


@dataclass(frozen=True)
class Faults:
    """Faults injected into every delivery of an operation, to test a provider's robustness.

    duplicate: each request is delivered a second time (same RequestId and ResponseURL) right after
        the first delivery was handed over, as ROS or FC may do; a second, different answer fails it.
    response_fail_first / response_fail_status: the ResponseURL answers the first N POSTs with this status.
    response_delay: the ResponseURL waits this many seconds before answering each POST.
    kill_provider: FC 2.0 tokens on the local FC endpoint only (other routes are delivered normally):
        the worker process is SIGKILLed on the first attempt of each request, so FC's async retry must
        deliver the request again.
    kill_provider_after: with kill_provider, the kill comes this many seconds into the handler (a crash
        mid-request, after side effects may have happened) instead of as it is entered; a handler that
        answers sooner is not killed.
    """

    duplicate: bool = False
    response_fail_first: int = 0
    response_fail_status: int = 500
    response_delay: float = 0.0
    kill_provider: bool = False
    kill_provider_after: float = 0.0

    def __post_init__(self) -> None:
        problems = []
        if self.response_fail_first < 0:
            problems.append("faults.response_fail_first: must be 0 or more")
        if not 400 <= self.response_fail_status < 600:
            problems.append("faults.response_fail_status: must be an HTTP error status 400-599")
        if not 0 <= self.response_delay <= 60:
            problems.append("faults.response_delay: must be 0-60 seconds")
        if not 0 <= self.kill_provider_after <= 3600:
            problems.append("faults.kill_provider_after: must be 0-3600 seconds")
        if problems:
            raise BindingError("; ".join(problems))

    def merged(self, **overrides: Any) -> "Faults":
        """A copy with the non-default values of `overrides` (CLI flags win over the file)."""
        defaults = Faults()
        changes = {k: v for k, v in overrides.items() if v is not None and v != getattr(defaults, k)}
        return dataclasses.replace(self, **changes) if changes else self


@dataclass(frozen=True)
class Bindings:
    """Canonical ServiceToken -> provider spec, the delivery mode and the faults to inject."""

    providers: dict[str, str] = field(default_factory=dict)
    mode: str = "endpoints"
    faults: Faults = field(default_factory=Faults)
    #: Environment variables of every emulated FC function (over the emulator's defaults).
    environment: dict[str, str] = field(default_factory=dict)

    def provider_for(self, token: str) -> str | None:
        """The bound provider spec, or None (also for tokens that are not valid)."""
        try:
            return self.providers.get(canonical_token(token))
        except BindingError:
            return None

    def unbound(self, tokens: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
        """The FC and MNS tokens among `tokens` (token -> resources) that no provider is bound to;
        `web:` tokens need none (they are POSTed to their URL)."""
        return {token: list(names) for token, names in tokens.items()
                if token.startswith("acs:") and self.provider_for(token) is None}

    def with_flags(self, flags: Iterable[str], base: Path | None = None) -> "Bindings":
        """Add `TOKEN=MODULE:provider` flags (the token itself holds ':' so split at the last '=');
        relative file specs are made absolute against `base` (default: the current directory)."""
        base = Path.cwd() if base is None else base
        providers = dict(self.providers)
        for flag in flags:
            token, sep, spec = flag.rpartition("=")
            if not sep or not token or not spec:
                raise BindingError(f"-s {flag!r}: expected TOKEN=MODULE:provider, e.g. "
                                   "-s 'acs:fc:cn-hangzhou:123456789:services/s/functions/f=mypkg.mod:provider'")
            providers[_bindable(token, f"-s {token}")] = _resolve_spec(_check_spec(spec, f"-s {token}"), base)
        return dataclasses.replace(self, providers=providers)


def canonical_token(token: str, where: str = "ServiceToken") -> str:
    """The token in canonical form; BindingError naming `where` if it is not a valid ServiceToken."""
    try:
        parsed = parse_service_token(token)
    except ServiceTokenError as exc:
        raise BindingError(f"{where}: {exc.problem}") from None
    return token if isinstance(parsed, WebToken) else parsed.format()


def _bindable(token: str, where: str) -> str:
    """A canonical FC or MNS token; web tokens are always POSTed to their URL, never bound."""
    canonical = canonical_token(token, where)
    if canonical.startswith("web"):
        raise BindingError(f"{where}: web tokens are POSTed to their URL for real and cannot be bound; "
                           "serve the provider there with `crhelper serve MODULE:provider --port N`")
    return canonical


def _check_spec(spec: Any, where: str) -> str:
    if not isinstance(spec, str) or ":" not in spec or spec.startswith(":") or spec.endswith(":"):
        raise BindingError(f"{where}: the provider must be 'package.module:provider' or 'path/to/file.py:provider'")
    return spec


def _resolve_spec(spec: str, base: Path) -> str:
    """File specs made absolute against `base`; module specs unchanged."""
    location, _, attribute = spec.rpartition(":")
    if location.endswith(".py") and not Path(location).is_absolute():
        return f"{(base / location).resolve()}:{attribute}"
    return spec


def parse_bindings(document: Any, base: Path, where: str = "bindings file") -> Bindings:
    """Bindings from a parsed document; `base` is the directory relative file specs start from."""
    if document is None:
        return Bindings()
    if not isinstance(document, Mapping):
        raise BindingError(f"{where}: must be a map with a 'bindings' key")
    unknown = sorted(set(document) - _FILE_KEYS)
    if unknown:
        raise BindingError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; allowed: {', '.join(sorted(_FILE_KEYS))}")
    raw = document.get("bindings") or {}
    if not isinstance(raw, Mapping):
        raise BindingError(f"{where}: 'bindings' must map ServiceToken to 'module:provider'")
    providers = {}
    for token, spec in raw.items():
        path = f"{where}: bindings.{token}"
        providers[_bindable(str(token), path)] = _resolve_spec(_check_spec(spec, path), base)
    mode = document.get("mode", "endpoints")
    if mode not in MODES:
        raise BindingError(f"{where}: mode must be one of {', '.join(MODES)}, got {mode!r}")
    faults_raw = document.get("faults") or {}
    if not isinstance(faults_raw, Mapping):
        raise BindingError(f"{where}: faults must be a map")
    names = {f.name for f in dataclasses.fields(Faults)}
    bad = sorted(set(faults_raw) - names)
    if bad:
        raise BindingError(f"{where}: unknown fault(s) {', '.join(map(str, bad))}; allowed: {', '.join(sorted(names))}")
    try:
        faults = Faults(**{str(k): v for k, v in faults_raw.items()})
    except TypeError as exc:
        raise BindingError(f"{where}: faults: {exc}") from None
    return Bindings(providers, mode, faults, _environment(document.get("environment"), where))


def _environment(raw: Any, where: str) -> dict[str, str]:
    """`environment`: NAME -> scalar value, as a function's environment variables are."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise BindingError(f"{where}: environment must map variable names to values")
    environment = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise BindingError(f"{where}: environment.{name}: a variable name must be a non-empty string without '='")
        if isinstance(value, (Mapping, list)) or value is None:
            raise BindingError(f"{where}: environment.{name}: the value must be a string, number or boolean")
        environment[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return environment


def load_bindings(path: str | Path) -> Bindings:
    """Read a bindings file; BindingError (never a traceback) on a bad file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BindingError(f"bindings file {path}: cannot be read ({exc.strerror})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BindingError(f"bindings file {path}: not valid YAML or JSON ({exc})") from None
    return parse_bindings(document, path.resolve().parent, where=f"bindings file {path}")


def default_bindings_path(template: str | Path) -> Path | None:
    """`<dir>/<stem>.bindings.yaml` next to the template, if it exists (picked up without --bindings)."""
    template = Path(template)
    candidate = template.with_name(template.stem + BINDINGS_SUFFIX)
    return candidate if candidate.is_file() else None


REMEMBERED_FILE = "stack-bindings.json"


def remember_bindings(home: Path, stack: str, bindings: Bindings) -> None:
    """Keep a stack's bindings (not its faults) so later update/delete runs need no flags."""
    path = Path(home) / REMEMBERED_FILE
    try:
        known = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        known = {}
    known[stack] = {"bindings": bindings.providers, "mode": bindings.mode}
    if bindings.environment:  # a later delete must reach the store the resources' operations used
        known[stack]["environment"] = bindings.environment
    path.write_text(json.dumps(known, indent=2, sort_keys=True), encoding="utf-8")


def remembered_bindings(home: Path, stack: str) -> Bindings:
    """The bindings last used for `stack` (empty when none were recorded)."""
    path = Path(home) / REMEMBERED_FILE
    try:
        entry = json.loads(path.read_text(encoding="utf-8")).get(stack) if path.is_file() else None
    except (OSError, ValueError):
        entry = None
    if not isinstance(entry, dict):
        return Bindings()
    return parse_bindings(entry, Path(home), where=f"remembered bindings of stack {stack}")
