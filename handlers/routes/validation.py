"""Flynn's route and app rules as pure functions (spec §3-§5, §10), in Flynn's order.

Nothing here touches storage: callers pass the live routes and used TCP ports they read inside
their own transaction, so the same code serves the local repository and the controller API.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Collection, Iterable, Sequence

from . import errors as E
from .model import (DEFAULT_DEPLOY_TIMEOUT, DEFAULT_META, DEFAULT_STRATEGY, HTTP, ROUTE_TYPES, STRATEGIES, TCP, App,
                    Certificate, DecodeError, Route)

APP_NAME_PATTERN = r"^[a-z\d]+(-[a-z\d]+)*$"
APP_NAME_RE = re.compile(APP_NAME_PATTERN)
APP_NAME_MAX = 100
PATH_RE = re.compile(r"^/(.*/)?$", re.DOTALL)
RESERVED_TCP_PORTS = (80, 443)
TCP_PORT_RANGE = range(3000, 3501)


# --- app ---------------------------------------------------------------------------------------

def validate_app_name(name: str) -> None:
    """Schema rules of ``controller/app.json`` with the cupcake/jsonschema message texts."""
    if len(name) > APP_NAME_MAX:
        raise E.field_error("name", f"String length must be shorter than {APP_NAME_MAX} characters.")
    if not APP_NAME_RE.fullmatch(name):
        raise E.field_error("name", f'String must match the pattern: "{APP_NAME_PATTERN}".')


def validate_meta(meta: Any) -> dict[str, str]:
    """``meta`` is a string map or null (null means empty); anything else names the field."""
    if meta is None:
        return {}
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise E.field_error("meta", "is invalid", hint="Meta must map strings to strings")
    return dict(meta)


def _enum_error(field: str, values: Sequence[str]) -> E.FlynnError:
    """cupcake/jsonschema's enum text (Go prints the list as ``[a b]``)."""
    return E.field_error(field, f"Enum error. The data must be equal to one of these values [{' '.join(values)}].")


def _type_error(field: str, wanted: str, value: Any) -> E.FlynnError:
    """cupcake/jsonschema's type text, with its JSON type names."""
    return E.field_error(field, f"Value must be one of these types: [{wanted}]. Got {_json_type(value)}")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "array" if isinstance(value, list) else "object"


def validate_strategy(strategy: Any) -> None:
    """``schema/controller/common.json`` ``strategy``: a string, one of Flynn's strategies."""
    if not isinstance(strategy, str):
        raise _type_error("strategy", "string", strategy)
    if strategy not in STRATEGIES:
        raise _enum_error("strategy", STRATEGIES)


def new_app(body: Any) -> App:
    """``POST /apps``: decode as Go decodes ``ct.App`` (a wrong type, non-string meta included, is
    ``syntax_error``), then run the schema (name, strategy). Defaults are the repository's
    (``AppRepo.Add``), so the provider's apps get them too; an empty name is generated there."""
    try:
        app = App.from_json({} if body is None else body)
    except DecodeError as exc:
        raise E.FlynnError("syntax_error", E.SYNTAX, hint=str(exc)) from None
    if app.name:
        validate_app_name(app.name)
    if app.strategy:
        validate_strategy(app.strategy)
    return app


def app_id(given: str) -> str:
    """A client-chosen app id must be a UUID (Flynn's column type; any form Postgres reads), kept in
    Postgres' canonical form. Flynn answers a bad one with a 500; here it is a 400 naming ``id``."""
    try:
        return str(uuid.UUID(given.strip("{}")))
    except ValueError:
        raise E.field_error("id", "is invalid", hint="Id must be a UUID") from None


def fill_app_defaults(app: App) -> App:
    """``AppRepo.Add``'s defaults: strategy, deploy timeout and the slug-GC meta key."""
    app.strategy = app.strategy or DEFAULT_STRATEGY
    app.deploy_timeout = app.deploy_timeout or DEFAULT_DEPLOY_TIMEOUT
    app.meta = {**DEFAULT_META, **app.meta}
    return app


APP_UPDATE_FIELDS = ("id", "name", "protected", "meta", "strategy", "release", "deploy_timeout",
                     "created_at", "updated_at")


def app_update(body: Any) -> dict[str, Any]:
    """``POST /apps/:id``: the body is a JSON object checked against the app schema (Flynn's
    ``UpdateApp``); ``meta: null`` is dropped. Returns the fields that change: meta, strategy,
    deploy_timeout (the others are accepted and ignored, as Flynn ignores them)."""
    if body is None:
        return {}  # Go decodes ``null`` into a nil map: nothing changes
    if not isinstance(body, dict):
        raise E.FlynnError("syntax_error", E.SYNTAX, hint="the body must be a JSON object")
    if body.get("meta", 0) is None:
        body = {k: v for k, v in body.items() if k != "meta"}
    for key in body:
        if key not in APP_UPDATE_FIELDS:
            raise E.FlynnError("validation_error",
                               f'Additional properties aren\'t allowed, found "{key}" as one of its keys')
    changes: dict[str, Any] = {}
    if "meta" in body:
        meta = body["meta"]
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise E.field_error("meta", "Validation failed for each schema in 'anyOf'.",
                                hint="Meta must map strings to strings")
        changes["meta"] = dict(meta)
    if "strategy" in body:
        validate_strategy(body["strategy"])
        changes["strategy"] = body["strategy"]
    if "deploy_timeout" in body:
        timeout = body["deploy_timeout"]
        if _json_type(timeout) != "integer":
            raise _type_error("deploy_timeout", "integer", timeout)
        changes["deploy_timeout"] = int(timeout)
    if "name" in body:
        if not isinstance(body["name"], str):
            raise _type_error("name", "string", body["name"])
        validate_app_name(body["name"])
    return changes


def check_app_unique(name: str, existing: Iterable[App]) -> None:
    if any(app.name == name for app in existing):
        raise E.FlynnError("object_exists", f'application "{name}" already exists')


# --- decoding (steps 1-2) ----------------------------------------------------------------------

def decode_route(body: bytes | str, content_type: str | None) -> Route:
    """Steps 1-2: Content-Type must mention application/json, then Go-style decoding."""
    if "application/json" not in (content_type or ""):
        raise E.FlynnError("validation_error", E.CONTENT_TYPE)
    try:
        decoded = json.loads(body)
        return Route() if decoded is None else Route.from_json(decoded)  # Go: null leaves zero values
    except (ValueError, DecodeError) as exc:
        hint = str(exc) if isinstance(exc, DecodeError) else "body is not valid JSON"
        raise E.FlynnError("syntax_error", E.SYNTAX, hint=hint) from None


# --- the create pipeline (steps 3-11) ---------------------------------------------------------

def normalize_path(path: str) -> str:
    """Trigger ``check_http_route_update``: empty means ``/``; a trailing ``/`` is appended."""
    if not path:
        return "/"
    return path if path.endswith("/") else path + "/"


def same_domain(a: str, b: str) -> bool:
    """Domains compare case-insensitively (spec §10), as the router lower-cases hosts."""
    return a.lower() == b.lower()


def _invalid(route: Route, hint: str) -> E.FlynnError:
    return E.FlynnError("validation_error", E.INVALID_ROUTE, detail=route.to_json(include_key=False), hint=hint)


def check_type(route: Route) -> None:
    """Step 3: the only schema rule that can fail on a decoded route."""
    if route.type not in ROUTE_TYPES:
        raise E.FlynnError("validation_error", E.TYPE_ENUM, detail={"field": "type"})


def check_ports(route: Route) -> None:
    """Steps 4-5: no port on HTTP routes; TCP 80/443 are reserved."""
    if route.type == HTTP and route.port > 0:
        raise _invalid(route, "Port: HTTP routes take no port")
    if route.type == TCP and route.port in RESERVED_TCP_PORTS:
        raise E.FlynnError("conflict", E.PORT_RESERVED, detail=route.to_json(include_key=False),
                           hint="Port: 80 and 443 are reserved")


def check_drain(route: Route, others: Sequence[Route]) -> None:
    """Step 6: drain_backends must agree with every live HTTP route of the service (TCP too)."""
    for other in others:
        if other.type == HTTP and other.service == route.service and other.drain_backends != route.drain_backends:
            raise _invalid(
                route,
                f"DrainBackends: must be {str(other.drain_backends).lower()} like the other HTTP "
                f"routes of service {route.service}",
            )


def check_path(route: Route, others: Sequence[Route]) -> Route:
    """Steps 7-8: normalise, match ``^/(.*/)?$``, and require a live ``/`` route for sub-paths."""
    path = normalize_path(route.path)
    if not PATH_RE.fullmatch(path):
        raise _invalid(route, "Path: must start with / (pattern ^/(.*/)?$)")
    if path != "/" and not any(
        o.type == HTTP and o.path == "/" and same_domain(o.domain, route.domain) for o in others
    ):
        raise _invalid(route, "Path: a sub-path needs a / route for the same domain first")
    return route.copy(path=path)


def assign_tcp_port(route: Route, used_ports: Collection[int]) -> Route:
    """Trigger ``set_tcp_route_port``: port 0 takes the first 3000-3500 port never used."""
    if route.type != TCP or route.port != 0:
        return route
    for port in TCP_PORT_RANGE:
        if port not in used_ports:
            return route.copy(port=port)
    raise E.unknown_error(hint="Port: no free TCP port in 3000-3500")


def check_constraints(route: Route) -> None:
    """Step 9 with the §10 choice: 400 ``<field> is invalid`` instead of Flynn's 500."""
    if route.type == HTTP and route.domain == "":
        raise E.field_error("domain", "is invalid", hint="Domain: required for HTTP routes")
    if route.service == "":
        raise E.field_error("service", "is invalid", hint="Service: required")
    if route.type == TCP and not 0 < route.port < 65535:
        raise E.field_error("port", "is invalid", hint="Port: must be between 1 and 65534")
    if route.type == HTTP and not -1 < route.port < 65535:
        raise E.field_error("port", "is invalid", hint="Port: must be between 0 and 65534")


def check_duplicate(route: Route, others: Sequence[Route]) -> None:
    """Step 10: unique (domain, port, path) among live HTTP routes, unique port among TCP ones."""
    for o in others:
        if o.type != route.type:
            continue
        clash = (
            route.type == HTTP and same_domain(o.domain, route.domain)
            and o.port == route.port and o.path == route.path
        ) or (route.type == TCP and o.port == route.port)
        if clash:
            raise E.FlynnError("conflict", E.DUPLICATE_ROUTE, detail=route.to_json(include_key=False),
                               hint="Domain and Path" if route.type == HTTP else "Port")


def validate_route(route: Route, others: Sequence[Route], used_tcp_ports: Collection[int]) -> Route:
    """Steps 3-11 in Flynn's order; returns the normalised route (path, port, trimmed cert).

    ``others`` are the live routes excluding the one being updated; ``used_tcp_ports`` includes
    soft-deleted TCP routes so auto-assignment never reuses a port.
    """
    check_type(route)
    check_ports(route)
    check_drain(route, others)
    if route.type == HTTP:
        route = check_path(route, others)
    else:
        route = assign_tcp_port(route, used_tcp_ports)
    check_constraints(route)
    check_duplicate(route, others)
    pair = route.effective_certificate()
    if route.type == HTTP and pair is not None:
        cert, key = check_certificate(pair.cert, pair.key)
        route = route.copy(certificate=Certificate(cert=cert, key=key), tls_cert="", tls_key="")
    else:
        route = route.copy(certificate=None, tls_cert="", tls_key="")
    return route


def check_delete(route: Route, live: Sequence[Route]) -> None:
    """A ``/`` route cannot go while other paths of its domain are live."""
    if route.type == HTTP and route.path == "/" and any(
        o.type == HTTP and o.id != route.id and o.path != "/" and same_domain(o.domain, route.domain)
        for o in live
    ):
        raise E.FlynnError("validation_error", E.DEPENDENT_ROUTES,
                           hint="delete the sub-path routes of this domain first")


def merge_update(stored: Route, body: Route) -> Route:
    """Apply an update body: only Flynn's updatable fields change; drain_backends never does."""
    if stored.type == HTTP:
        return stored.copy(
            service=body.service, port=body.port, leader=body.leader, sticky=body.sticky,
            path=body.path, disable_keep_alives=body.disable_keep_alives,
            certificate=body.certificate if body.effective_certificate() else stored.certificate,
            tls_cert=body.tls_cert, tls_key=body.tls_key,
        )
    return stored.copy(service=body.service, port=body.port or stored.port, leader=body.leader)


# --- certificates (step 11) --------------------------------------------------------------------

_PEM_RE = re.compile(
    r"-----BEGIN ([^-\r\n]*)-----\r?\n(.*?)-----END \1-----", re.DOTALL
)


def _pem_blocks(text: str) -> list[tuple[str, bytes]]:
    import base64
    import binascii

    blocks: list[tuple[str, bytes]] = []
    for match in _PEM_RE.finditer(text):
        body = "".join(line for line in match.group(2).splitlines() if ":" not in line)
        try:
            blocks.append((match.group(1), base64.b64decode(body, validate=False)))
        except (binascii.Error, ValueError):
            continue
    return blocks


def _cert_error(detail: str) -> E.FlynnError:
    return E.FlynnError("validation_error", f"Certificate invalid: {detail}",
                        hint="Certificate: Cert and Key must form a valid X.509 key pair")


def check_certificate(cert: str, key: str) -> tuple[str, str]:
    """Trim spaces/newlines, then check the pair as Go's ``tls.X509KeyPair`` does, with its texts."""
    cert, key = cert.strip(" \n"), key.strip(" \n")
    cert_blocks = _pem_blocks(cert)
    certs = [der for kind, der in cert_blocks if kind == "CERTIFICATE"]
    if not certs:
        if not cert_blocks:
            raise _cert_error("tls: failed to find any PEM data in certificate input")
        skipped = " ".join(kind for kind, _ in cert_blocks)
        raise _cert_error(
            'tls: failed to find "CERTIFICATE" PEM block in certificate input after skipping '
            f"PEM blocks of the following types: [{skipped}]"
        )
    key_blocks = _pem_blocks(key)
    key_der = next((der for kind, der in key_blocks if kind == "PRIVATE KEY" or kind.endswith(" PRIVATE KEY")), None)
    if key_der is None:
        if not key_blocks:
            raise _cert_error("tls: failed to find any PEM data in key input")
        kinds = [kind for kind, _ in key_blocks]
        if kinds == ["CERTIFICATE"]:
            raise _cert_error("tls: found a certificate rather than a key in the PEM for the private key")
        raise _cert_error(
            'tls: failed to find PEM block with type ending in "PRIVATE KEY" in key input after '
            f"skipping PEM blocks of the following types: [{' '.join(kinds)}]"
        )
    _check_pair(certs[0], key_der)
    return cert, key


def _check_pair(cert_der: bytes, key_der: bytes) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    try:
        public = x509.load_der_x509_certificate(cert_der).public_key()
    except ValueError:
        raise _cert_error("x509: malformed certificate") from None
    try:
        private = serialization.load_der_private_key(key_der, password=None)
    except (ValueError, TypeError):
        raise _cert_error("tls: failed to parse private key") from None
    for kind in (rsa.RSAPublicKey, ec.EllipticCurvePublicKey, ed25519.Ed25519PublicKey):
        if isinstance(public, kind):
            break
    else:
        raise _cert_error("tls: unknown public key algorithm")
    raw = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    expected = {
        rsa.RSAPublicKey: rsa.RSAPrivateKey,
        ec.EllipticCurvePublicKey: ec.EllipticCurvePrivateKey,
        ed25519.Ed25519PublicKey: ed25519.Ed25519PrivateKey,
    }[kind]
    if not isinstance(private, expected):
        raise _cert_error("tls: private key type does not match public key type")
    if private.public_key().public_bytes(der, raw) != public.public_bytes(der, raw):
        raise _cert_error("tls: private key does not match public key")
