"""Settings from the environment, read when a request is handled (not at import), so tests and FC agree.

The `env_*` parsers are the one way every module (framework, local endpoints, providers) reads a
variable: an unset or empty variable means the default; anything else follows the rule or raises
a ConfigError "<NAME>: <rule>, got <value>".
"""

from __future__ import annotations

import base64
import binascii
import math
import os
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any, Mapping, overload

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class ConfigError(ValueError):
    """A setting has a value we cannot use; the message names the variable and the rule."""


# Values are shown with repr (control characters escaped), so a log line or a FAILED Reason stays
# one line. Secrets go through env_base64, which never echoes what it read.


def _raw(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name)
    return None if raw is None or raw == "" else raw


def env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    """true/false, yes/no, on/off, 1/0 in any case."""
    raw = _raw(env, name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}: expected true or false, got {raw!r}")


@overload
def env_float(env: Mapping[str, str], name: str, default: float, minimum: float = ...,
              maximum: float | None = ...) -> float: ...
@overload
def env_float(env: Mapping[str, str], name: str, default: None, minimum: float = ...,
              maximum: float | None = ...) -> float | None: ...
def env_float(env: Mapping[str, str], name: str, default: float | None, minimum: float = 0.0,
              maximum: float | None = None) -> float | None:
    """A finite number (of seconds, usually) between `minimum` and `maximum`."""
    raw = _raw(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a number of seconds, got {raw!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{name}: expected a finite number, got {raw!r}")
    if value < minimum:
        raise ConfigError(f"{name}: must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}: must be at most {maximum}, got {value}")
    return value


def env_int(env: Mapping[str, str], name: str, default: int, minimum: int | None = None,
            maximum: int | None = None) -> int:
    """A whole number in decimal digits, optionally signed, between `minimum` and `maximum`."""
    raw = _raw(env, name)
    if raw is None:
        return default
    text = raw.strip()
    unsigned = text[1:] if text[:1] in ("+", "-") else text
    if not (unsigned.isascii() and unsigned.isdigit()):
        raise ConfigError(f"{name}: expected a whole number, got {raw!r}")
    value = int(text)
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}: must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}: must be at most {maximum}, got {value}")
    return value


def env_port(env: Mapping[str, str], name: str, default: int, *, allow_any: bool = False) -> int:
    """A TCP port 1-65535; with `allow_any`, 0 too (the system picks a free one)."""
    lowest = 0 if allow_any else 1
    raw = _raw(env, name)
    if raw is None:
        return default
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or not lowest <= int(text) <= 65535:
        raise ConfigError(f"{name}: must be a port number {lowest}-65535, got {raw!r}")
    return int(text)


def env_choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of `choices`, case-insensitive (normalised to the case the choices are written in)."""
    value = (_raw(env, name) or default).strip()
    normalised = value.upper() if choices[0].isupper() else value.lower()
    if normalised not in choices:
        raise ConfigError(f"{name}: must be one of {', '.join(choices)}, got {value!r}")
    return normalised


def env_base64(env: Mapping[str, str], name: str, length: int | None = None) -> bytes | None:
    """Base64 bytes (a key), of exactly `length` bytes when given; None when unset.
    The error never shows the value: a key that is nearly right is still a key."""
    raw = _raw(env, name)
    if raw is None:
        return None
    rule = f"must be Base64 of {length} bytes" if length is not None else "must be Base64"
    try:
        value = base64.b64decode(raw.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{name}: {rule}, got something that is not Base64") from None
    if length is not None and len(value) != length:
        raise ConfigError(f"{name}: {rule}, got {len(value)} bytes")
    return value


class ReadOnly:
    """Read-only records for the runtime's import path, without generated methods: `@dataclass`
    compiles its methods at import, ~1 ms of every cold start (issue 18). A subclass lists its
    fields in `__slots__` and sets them once in `__init__` through `_init`; equality is identity
    (see `Value` for compared ones). A public record users treat as a dataclass is declared
    `@dataclass(init=False, repr=False, eq=False)` on `Value` with its own `__init__` and `_names`
    (`Result`): `dataclasses.fields`, `replace` and `asdict` work on it with nothing generated.
    Assignment raises `FrozenInstanceError` (an AttributeError), as on a frozen dataclass."""

    __slots__ = ()
    #: The fields, in order: a subclass's own `__slots__` unless it names them itself.
    _names: tuple[str, ...] = ()
    _hidden: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        slots = cls.__dict__.get("__slots__")
        if slots and "_names" not in cls.__dict__:
            cls._names = (slots,) if isinstance(slots, str) else tuple(slots)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"{type(self).__name__} is read-only: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"{type(self).__name__} is read-only: cannot delete {name!r}")

    def _init(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._names}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """pickle and copy restore fields here: plain setattr is refused."""
        self._init(**state)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._names if name not in self._hidden)
        return f"{type(self).__name__}({shown})"


class Value(ReadOnly):
    """A `ReadOnly` record compared and hashed by its fields, like a frozen dataclass."""

    __slots__ = ()

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._names)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())


class DeliverySettings(Value):
    """How responses travel to the ResponseURL."""

    __slots__ = ("method", "url_mode", "connect_timeout", "read_timeout", "max_attempts", "backoff_base",
                 "backoff_cap", "allowed_hosts", "ca_bundle", "verify_tls", "keep_alive")
    method: str
    url_mode: str  # public | intranet | auto (intranet first when running on Function Compute)
    connect_timeout: float
    read_timeout: float
    max_attempts: int
    backoff_base: float
    backoff_cap: float
    allowed_hosts: tuple[str, ...]
    ca_bundle: str | None
    verify_tls: bool
    #: Seconds a connection the peer kept alive waits, idle, for the next answer to the same peer (0: never kept)
    keep_alive: float

    def __init__(self, method: str = "POST", url_mode: str = "auto", connect_timeout: float = 5.0,
                 read_timeout: float = 15.0, max_attempts: int = 6, backoff_base: float = 0.5,
                 backoff_cap: float = 8.0, allowed_hosts: tuple[str, ...] = (), ca_bundle: str | None = None,
                 verify_tls: bool = True, keep_alive: float = 15.0) -> None:
        self._init(method=method, url_mode=url_mode, connect_timeout=connect_timeout, read_timeout=read_timeout,
                   max_attempts=max_attempts, backoff_base=backoff_base, backoff_cap=backoff_cap,
                   allowed_hosts=allowed_hosts, ca_bundle=ca_bundle, verify_tls=verify_tls, keep_alive=keep_alive)


@dataclass(frozen=True)
class Settings:
    delivery: DeliverySettings = field(default_factory=DeliverySettings)
    default_type: str | None = None
    #: Seconds before the function deadline at which a still-running handler is answered FAILED.
    timeout_margin: float | None = None
    on_function_compute: bool = False
    #: CRHELPER_STORE: a store URL, "none" to turn idempotency and long-running support off, None for the default
    store_url: str | None = None
    #: How long one handler call may hold an operation before another process may take it over (s)
    step_lease: float | None = None
    #: Seconds an idempotency record is kept (duplicates within it are absorbed)
    record_ttl: float = 86_400.0
    #: auto | local | fc | mns | none
    reentry: str = "auto"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """The settings `env` (default: this process's environment) gives; ConfigError names a bad one.
        From the process's environment they are parsed again only when one of their variables changed:
        a queue worker asks several times per message (~40 us a time, issue 18)."""
        global _from_environ
        if env is None:
            key = _environment_key()
            cached = _from_environ
            if cached is not None and cached[0] == key:
                return cached[1]
            settings = cls._parse(os.environ)
            _from_environ = (key, settings)
            return settings
        return cls._parse(env)

    @classmethod
    def _parse(cls, env: Mapping[str, str]) -> "Settings":
        hosts = tuple(h.strip().lower() for h in (env.get("CRHELPER_RESPONSE_HOSTS") or "").split(",") if h.strip())
        delivery = DeliverySettings(
            method=env_choice(env, "CRHELPER_RESPONSE_METHOD", "POST", ("POST", "PUT")),
            url_mode=env_choice(env, "CRHELPER_RESPONSE_URL", "auto", ("auto", "public", "intranet")),
            connect_timeout=env_float(env, "CRHELPER_CONNECT_TIMEOUT", 5.0, minimum=0.1),
            read_timeout=env_float(env, "CRHELPER_READ_TIMEOUT", 15.0, minimum=0.1),
            max_attempts=int(env_float(env, "CRHELPER_RESPONSE_ATTEMPTS", 6, minimum=1)),
            backoff_base=env_float(env, "CRHELPER_BACKOFF_BASE", 0.5),
            backoff_cap=env_float(env, "CRHELPER_BACKOFF_CAP", 8.0),
            allowed_hosts=hosts,
            ca_bundle=env.get("CRHELPER_CA_BUNDLE") or None,
            verify_tls=env_bool(env, "CRHELPER_TLS_VERIFY", True),
            keep_alive=env_float(env, "CRHELPER_RESPONSE_KEEPALIVE", 15.0, maximum=3600.0),
        )
        return cls(
            delivery=delivery,
            default_type=env.get("CRHELPER_DEFAULT_TYPE") or None,
            timeout_margin=env_float(env, "CRHELPER_TIMEOUT_MARGIN", None),
            on_function_compute=bool(env.get("FC_FUNCTION_NAME") or env.get("FC_FUNC_CODE_PATH")),
            store_url=env.get("CRHELPER_STORE") or None,
            step_lease=env_float(env, "CRHELPER_STEP_LEASE", None, minimum=0.1),
            record_ttl=env_float(env, "CRHELPER_RECORD_TTL", 86_400.0, minimum=1.0),
            reentry=env_choice(env, "CRHELPER_REENTRY", "auto", ("auto", "local", "fc", "mns", "none")),
        )


#: The variables `Settings.from_env` reads: its cache of the process's settings is keyed on their values.
_SETTINGS_VARIABLES = (
    "CRHELPER_RESPONSE_HOSTS", "CRHELPER_RESPONSE_METHOD", "CRHELPER_RESPONSE_URL", "CRHELPER_CONNECT_TIMEOUT",
    "CRHELPER_READ_TIMEOUT", "CRHELPER_RESPONSE_ATTEMPTS", "CRHELPER_BACKOFF_BASE", "CRHELPER_BACKOFF_CAP",
    "CRHELPER_CA_BUNDLE", "CRHELPER_TLS_VERIFY", "CRHELPER_RESPONSE_KEEPALIVE", "CRHELPER_DEFAULT_TYPE",
    "CRHELPER_TIMEOUT_MARGIN", "FC_FUNCTION_NAME", "FC_FUNC_CODE_PATH", "CRHELPER_STORE", "CRHELPER_STEP_LEASE",
    "CRHELPER_RECORD_TTL", "CRHELPER_REENTRY",
)
_from_environ: "tuple[tuple[Any, ...], Settings] | None" = None
#: `_SETTINGS_VARIABLES` as os.environ's own dict stores them (encoded once: ~5 us a call otherwise).
_encoded_variables: "tuple[Any, ...] | None" = None


def _environment_key() -> tuple[Any, ...]:
    """The raw values of `_SETTINGS_VARIABLES` in os.environ. CPython keeps them encoded in a dict
    (`_data`): reading it spares a decode per variable; any other mapping is read the public way."""
    global _encoded_variables
    data = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    if isinstance(data, dict) and encode is not None:
        if _encoded_variables is None:
            _encoded_variables = tuple(encode(name) for name in _SETTINGS_VARIABLES)
        return tuple([data.get(k) for k in _encoded_variables])
    return tuple([os.environ.get(name) for name in _SETTINGS_VARIABLES])


#: Seconds between "still running" lines while a long operation runs (`crhelper invoke`, the stack
#: event table); the parsers' help repeats the name and the default.
HEARTBEAT_SETTING = "CRHELPER_HEARTBEAT_INTERVAL"
DEFAULT_HEARTBEAT = 10.0


def heartbeat_interval(env: Mapping[str, str] | None = None) -> float:
    """CRHELPER_HEARTBEAT_INTERVAL: seconds between "still running" lines (ConfigError names the rule)."""
    return env_float(os.environ if env is None else env, HEARTBEAT_SETTING, DEFAULT_HEARTBEAT, minimum=0.05)
