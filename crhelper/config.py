"""Settings from the environment, read when a request is handled (not at import), so tests and FC agree."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class ConfigError(ValueError):
    """A setting has a value we cannot use; the message names the variable and the rule."""


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}: expected true or false, got {raw!r}")


def _float(env: Mapping[str, str], name: str, default: float | None, minimum: float = 0.0) -> float | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a number of seconds, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name}: must be at least {minimum}, got {value}")
    return value


def _choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    value = (env.get(name) or default).strip()
    normalised = value.upper() if choices[0].isupper() else value.lower()
    if normalised not in choices:
        raise ConfigError(f"{name}: must be one of {', '.join(choices)}, got {value!r}")
    return normalised


@dataclass(frozen=True)
class DeliverySettings:
    """How responses travel to the ResponseURL."""

    method: str = "POST"
    url_mode: str = "auto"  # public | intranet | auto (intranet first when running on Function Compute)
    connect_timeout: float = 5.0
    read_timeout: float = 15.0
    max_attempts: int = 6
    backoff_base: float = 0.5
    backoff_cap: float = 8.0
    allowed_hosts: tuple[str, ...] = ()
    ca_bundle: str | None = None
    verify_tls: bool = True


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
        env = os.environ if env is None else env
        hosts = tuple(h.strip().lower() for h in (env.get("CRHELPER_RESPONSE_HOSTS") or "").split(",") if h.strip())
        attempts = _float(env, "CRHELPER_RESPONSE_ATTEMPTS", 6, minimum=1)
        delivery = DeliverySettings(
            method=_choice(env, "CRHELPER_RESPONSE_METHOD", "POST", ("POST", "PUT")),
            url_mode=_choice(env, "CRHELPER_RESPONSE_URL", "auto", ("auto", "public", "intranet")),
            connect_timeout=_float(env, "CRHELPER_CONNECT_TIMEOUT", 5.0, minimum=0.1) or 5.0,
            read_timeout=_float(env, "CRHELPER_READ_TIMEOUT", 15.0, minimum=0.1) or 15.0,
            max_attempts=int(attempts or 6),
            backoff_base=_float(env, "CRHELPER_BACKOFF_BASE", 0.5) or 0.0,
            backoff_cap=_float(env, "CRHELPER_BACKOFF_CAP", 8.0) or 0.0,
            allowed_hosts=hosts,
            ca_bundle=env.get("CRHELPER_CA_BUNDLE") or None,
            verify_tls=_bool(env, "CRHELPER_TLS_VERIFY", True),
        )
        return cls(
            delivery=delivery,
            default_type=env.get("CRHELPER_DEFAULT_TYPE") or None,
            timeout_margin=_float(env, "CRHELPER_TIMEOUT_MARGIN", None),
            on_function_compute=bool(env.get("FC_FUNCTION_NAME") or env.get("FC_FUNC_CODE_PATH")),
            store_url=env.get("CRHELPER_STORE") or None,
            step_lease=_float(env, "CRHELPER_STEP_LEASE", None, minimum=0.1),
            record_ttl=_float(env, "CRHELPER_RECORD_TTL", 86_400.0, minimum=1.0) or 86_400.0,
            reentry=_choice(env, "CRHELPER_REENTRY", "auto", ("auto", "local", "fc", "mns", "none")),
        )
