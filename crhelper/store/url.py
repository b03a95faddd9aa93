"""Parse the one store setting (`CRHELPER_STORE` or code) into typed settings, without I/O.

Error messages name the setting and the rule but never echo the query string, which may carry
endpoints users consider private.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping
from urllib.parse import parse_qs, urlsplit

from ..config import Value
from ..paths import home
from .base import StoreError

SETTING = "CRHELPER_STORE"
MEMORY = ":memory:"

ADDRESSING_STYLES = ("virtual", "path")
DIALECTS = ("oss", "s3")
SIGNATURES = ("s3v4", "s3")
_S3_PARAMS = frozenset({"endpoint", "region", "addressing", "dialect", "signature"})


class StoreConfigError(StoreError, ValueError):
    """The store URL is malformed; the message names the setting and the rule."""


class SqliteSettings(Value):
    """`sqlite:///relative.db`, `sqlite:////absolute/path.db` or `sqlite://:memory:`."""

    __slots__ = ("path",)
    path: str

    def __init__(self, path: str) -> None:
        self._init(path=path)


class MemorySettings:
    """`memory://`: a store private to this process (crhelper.store.memory); no fields, so a plain
    class (a dataclass would only add methods to compile on every cold start)."""

    __slots__ = ()


@dataclass(frozen=True)
class S3Settings:
    """`s3://bucket/prefix?endpoint=...&region=...&addressing=...&dialect=...&signature=...`."""

    bucket: str
    prefix: str
    endpoint: str | None
    region: str | None
    addressing: str
    dialect: str
    signature: str


def default_url(env: Mapping[str, str] | None = None) -> str:
    """The URL used when neither code nor CRHELPER_STORE names one: `$CRHELPER_HOME/state.sqlite`."""
    return "sqlite:///" + str(home(env).resolve() / "state.sqlite")


def _parse_sqlite(url: str) -> SqliteSettings:
    rest = url[len("sqlite://") :]
    if rest in (MEMORY, "/" + MEMORY):
        return SqliteSettings(MEMORY)
    if not rest.startswith("/") or len(rest) < 2:
        raise StoreConfigError(
            f"{SETTING}: a sqlite URL must be sqlite:///<path> or sqlite://:memory:"
        )
    if "?" in rest or "#" in rest:
        raise StoreConfigError(f"{SETTING}: a sqlite URL takes no query or fragment")
    return SqliteSettings(rest[1:])


def _one(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise StoreConfigError(f"{SETTING}: s3 parameter '{name}' is given more than once")
    return values[0]


def _choice(params: dict[str, list[str]], name: str, allowed: tuple[str, ...]) -> str:
    value = _one(params, name) or allowed[0]
    if value not in allowed:
        raise StoreConfigError(
            f"{SETTING}: s3 parameter '{name}' must be one of {', '.join(allowed)}"
        )
    return value


def _parse_s3(url: str) -> S3Settings:
    parts = urlsplit(url)
    bucket = parts.netloc
    if not bucket or "@" in bucket or ":" in bucket:
        raise StoreConfigError(f"{SETTING}: an s3 URL must be s3://<bucket>/<prefix>?...")
    try:
        params = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise StoreConfigError(f"{SETTING}: the s3 URL query is not name=value pairs") from None
    unknown = sorted(set(params) - _S3_PARAMS)
    if unknown:
        raise StoreConfigError(
            f"{SETTING}: unknown s3 parameter(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(_S3_PARAMS))}"
        )
    endpoint = _one(params, "endpoint") or None
    if endpoint is not None:
        scheme = urlsplit(endpoint).scheme
        if scheme not in ("http", "https") or not urlsplit(endpoint).netloc:
            raise StoreConfigError(
                f"{SETTING}: s3 parameter 'endpoint' must be an http:// or https:// URL"
            )
    prefix = parts.path.strip("/")
    return S3Settings(
        bucket=bucket,
        prefix=prefix + "/" if prefix else "",
        endpoint=endpoint,
        region=_one(params, "region") or None,
        addressing=_choice(params, "addressing", ADDRESSING_STYLES),
        dialect=_choice(params, "dialect", DIALECTS),
        signature=_choice(params, "signature", SIGNATURES),
    )


def parse_store_url(url: str) -> SqliteSettings | S3Settings | MemorySettings:
    """Map a store URL to settings; raises StoreConfigError naming CRHELPER_STORE and the rule."""
    if not isinstance(url, str) or not url.strip():
        raise StoreConfigError(f"{SETTING}: the store URL is empty")
    url = url.strip()
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "sqlite":
        return _parse_sqlite(url)
    if scheme == "s3":
        return _parse_s3(url)
    if scheme == "memory":
        if url.lower() != "memory://":
            raise StoreConfigError(f"{SETTING}: a memory URL is just memory:// (no path, query or fragment)")
        return MemorySettings()
    if not scheme:
        raise StoreConfigError(
            f"{SETTING}: the store URL has no scheme; use sqlite:///<path>, s3://<bucket>/... or memory://"
        )
    shown = scheme if scheme.isalnum() and len(scheme) <= 16 else "?"
    raise StoreConfigError(
        f"{SETTING}: unknown store scheme '{shown}://'; use sqlite:///<path>, "
        "s3://<bucket>/<prefix>?endpoint=... or memory://"
    )
