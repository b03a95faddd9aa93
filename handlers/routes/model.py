"""Route, certificate, app and event records with Flynn's JSON names and omit-when-empty rules.

Decoding follows Go's ``encoding/json`` as Flynn's controller uses it: unknown keys are dropped,
keys match case-insensitively, ``null`` leaves the zero value, and a wrong JSON type is a syntax
error (the caller maps :class:`DecodeError` to ``syntax_error``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

HTTP = "http"
TCP = "tcp"
ROUTE_TYPES = (HTTP, TCP)
PARENT_REF_PREFIX = "controller/apps/"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class DecodeError(ValueError):
    """A JSON value does not fit the Go field type it decodes into."""


def now_rfc3339() -> str:
    """Current UTC time as RFC 3339 with microseconds, the shape Flynn's examples show."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _go_string(value: Any, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DecodeError(f"{name}: expected a JSON string")
    return value


def _go_bool(value: Any, name: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise DecodeError(f"{name}: expected a JSON boolean")
    return value


def _go_int32(value: Any, name: str) -> int:
    if value is None:
        return 0
    # A float here came from a JSON number with a fraction or exponent (``3001.0``, ``3e3``),
    # which Go's strconv.ParseInt refuses for an int32 field.
    if isinstance(value, bool) or not isinstance(value, int):
        raise DecodeError(f"{name}: expected a JSON integer")
    if not INT32_MIN <= value <= INT32_MAX:
        raise DecodeError(f"{name}: integer out of int32 range")
    return value


def _fold_keys(body: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """Pick Go-struct fields from a JSON object: exact key first, then a case-insensitive match."""
    out: dict[str, Any] = {}
    lowered: dict[str, str] = {}
    for key in body:
        lowered.setdefault(key.lower(), key)
    for name in names:
        if name in body:
            out[name] = body[name]
        elif name.lower() in lowered:
            out[name] = body[lowered[name.lower()]]
    return out


@dataclass
class Certificate:
    """A TLS pair attached to HTTP routes; ``key`` is secret and is redacted outside the API."""

    cert: str = ""
    key: str = ""
    id: str = ""
    routes: list[str] = field(default_factory=list)
    created_at: str = ""
    updated_at: str = ""

    FIELDS = ("id", "routes", "cert", "key", "created_at", "updated_at")

    @classmethod
    def from_json(cls, body: Any) -> "Certificate | None":
        if body is None:
            return None
        if not isinstance(body, dict):
            raise DecodeError("certificate: expected a JSON object")
        raw = _fold_keys(body, cls.FIELDS)
        routes = raw.get("routes") or []
        if not isinstance(routes, list) or not all(isinstance(r, str) for r in routes):
            raise DecodeError("certificate.routes: expected an array of strings")
        return cls(
            cert=_go_string(raw.get("cert"), "certificate.cert"),
            key=_go_string(raw.get("key"), "certificate.key"),
            id=_go_string(raw.get("id"), "certificate.id"),
            routes=list(routes),
            created_at=_go_string(raw.get("created_at"), "certificate.created_at"),
            updated_at=_go_string(raw.get("updated_at"), "certificate.updated_at"),
        )

    def to_json(self, *, include_key: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.id:
            out["id"] = self.id
        if self.routes:
            out["routes"] = list(self.routes)
        if self.cert:
            out["cert"] = self.cert
        if self.key and include_key:
            out["key"] = self.key
        if self.created_at:
            out["created_at"] = self.created_at
        if self.updated_at:
            out["updated_at"] = self.updated_at
        return out


@dataclass
class Route:
    """Flynn's ``router/types.Route``: one record for HTTP and TCP routes."""

    type: str = ""
    service: str = ""
    id: str = ""
    parent_ref: str = ""
    port: int = 0
    leader: bool = False
    drain_backends: bool = False
    created_at: str = ""
    updated_at: str = ""
    domain: str = ""
    path: str = ""
    sticky: bool = False
    disable_keep_alives: bool = False
    certificate: Certificate | None = None
    tls_cert: str = ""
    tls_key: str = ""

    FIELDS = (
        "type", "id", "parent_ref", "service", "port", "leader", "drain_backends", "created_at",
        "updated_at", "domain", "path", "sticky", "disable_keep_alives", "certificate",
        "tls_cert", "tls_key",
    )

    @property
    def formatted_id(self) -> str:
        """Flynn's route identity, ``<type>/<id>``."""
        return f"{self.type}/{self.id}"

    @property
    def app_id(self) -> str:
        """The app UUID behind ``parent_ref`` (empty when the ref is foreign)."""
        if self.parent_ref.startswith(PARENT_REF_PREFIX):
            return self.parent_ref[len(PARENT_REF_PREFIX):]
        return ""

    def effective_certificate(self) -> Certificate | None:
        """The pair to validate and store: deprecated ``tls_cert``/``tls_key`` win when set."""
        if self.tls_cert or self.tls_key:
            return Certificate(cert=self.tls_cert, key=self.tls_key)
        return self.certificate

    def copy(self, **changes: Any) -> "Route":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_json(cls, body: Any) -> "Route":
        """Decode like Go's ``json.Unmarshal`` into ``router.Route``; raises :class:`DecodeError`."""
        if not isinstance(body, dict):
            raise DecodeError("route: expected a JSON object")
        raw = _fold_keys(body, cls.FIELDS)

        def string(name: str) -> str:
            return _go_string(raw.get(name), name)

        def boolean(name: str) -> bool:
            return _go_bool(raw.get(name), name)

        # Decode in the same field order as before so the first bad field is the one reported.
        type_, id_, parent_ref, service = string("type"), string("id"), string("parent_ref"), string("service")
        created_at, updated_at = string("created_at"), string("updated_at")
        domain, path, tls_cert, tls_key = string("domain"), string("path"), string("tls_cert"), string("tls_key")
        leader, drain_backends = boolean("leader"), boolean("drain_backends")
        sticky, disable_keep_alives = boolean("sticky"), boolean("disable_keep_alives")
        return cls(
            port=_go_int32(raw.get("port"), "port"),
            certificate=Certificate.from_json(raw.get("certificate")),
            type=type_,
            id=id_,
            parent_ref=parent_ref,
            service=service,
            created_at=created_at,
            updated_at=updated_at,
            domain=domain,
            path=path,
            tls_cert=tls_cert,
            tls_key=tls_key,
            leader=leader,
            drain_backends=drain_backends,
            sticky=sticky,
            disable_keep_alives=disable_keep_alives,
        )

    def to_json(self, *, include_key: bool = True) -> dict[str, Any]:
        """Serialise with Flynn's rules: ``type``, ``service`` and ``leader`` always present."""
        out: dict[str, Any] = {"type": self.type}
        if self.id:
            out["id"] = self.id
        if self.parent_ref:
            out["parent_ref"] = self.parent_ref
        out["service"] = self.service
        if self.port:
            out["port"] = self.port
        out["leader"] = self.leader
        if self.drain_backends:
            out["drain_backends"] = True
        if self.created_at:
            out["created_at"] = self.created_at
        if self.updated_at:
            out["updated_at"] = self.updated_at
        if self.type == HTTP:
            if self.domain:
                out["domain"] = self.domain
            if self.path:
                out["path"] = self.path
            if self.sticky:
                out["sticky"] = True
            if self.disable_keep_alives:
                out["disable_keep_alives"] = True
            if self.certificate is not None:
                out["certificate"] = self.certificate.to_json(include_key=include_key)
        return out


#: Flynn's deployment strategies (``schema/controller/common.json`` ``strategy``) and defaults
#: (``controller/data/app.go``: ``all-at-once``, ``ct.DefaultDeployTimeout`` = 120 s, and one meta key).
STRATEGIES = ("all-at-once", "one-by-one", "sirenia", "discoverd-meta", "one-down-one-up", "in-batches")
DEFAULT_STRATEGY = "all-at-once"
DEFAULT_DEPLOY_TIMEOUT = 120
DEFAULT_META = {"gc.max_inactive_slug_releases": "10"}


@dataclass
class App:
    """A Flynn app: the namespace routes belong to."""

    id: str
    name: str
    meta: dict[str, str] = field(default_factory=dict)
    created_at: str = ""
    updated_at: str = ""
    strategy: str = ""
    deploy_timeout: int = 0

    def to_json(self) -> dict[str, Any]:
        """``ct.App``: ``meta`` always present; the rest omitted when empty (Go ``omitempty``)."""
        out: dict[str, Any] = {"id": self.id, "name": self.name, "meta": dict(self.meta)}
        if self.strategy:
            out["strategy"] = self.strategy
        if self.deploy_timeout:
            out["deploy_timeout"] = self.deploy_timeout
        if self.created_at:
            out["created_at"] = self.created_at
        if self.updated_at:
            out["updated_at"] = self.updated_at
        return out

    @classmethod
    def from_json(cls, body: Any) -> "App":
        """Decode like Go's ``json.Unmarshal`` into ``ct.App`` (a wrong type is a :class:`DecodeError`)."""
        if not isinstance(body, dict):
            raise DecodeError("app: expected a JSON object")
        raw = _fold_keys(body, ("id", "name", "meta", "strategy", "deploy_timeout", "created_at", "updated_at"))
        meta = raw.get("meta")
        if meta is not None and (not isinstance(meta, dict)
                                 or not all(isinstance(v, str) for v in meta.values())):
            raise DecodeError("meta: expected an object of strings")
        return cls(
            id=_go_string(raw.get("id"), "id"),
            name=_go_string(raw.get("name"), "name"),
            meta=dict(meta) if meta is not None else {},
            strategy=_go_string(raw.get("strategy"), "strategy"),
            deploy_timeout=_go_int32(raw.get("deploy_timeout"), "deploy_timeout"),
            created_at=_go_string(raw.get("created_at"), "created_at"),
            updated_at=_go_string(raw.get("updated_at"), "updated_at"),
        )


@dataclass
class Event:
    """A controller event (``route``, ``route_deletion``, ``app``, ``app_deletion``)."""

    id: int
    app: str
    object_type: str
    object_id: str
    data: dict[str, Any]
    created_at: str

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        for name in ("app", "object_type", "object_id"):
            value = getattr(self, name)
            if value:
                out[name] = value
        if self.data:
            out["data"] = self.data
        if self.created_at:
            out["created_at"] = self.created_at
        return out
