"""ROS ResourceProperties of ``Custom::App`` / ``Custom::Route`` -> Flynn request values.

Pure: unknown properties are refused (route.json's ``additionalProperties: false``), values keep
their JSON types with numeric/boolean strings accepted (ROS habit), and a value of the wrong type
is Flynn's ``syntax_error`` with a hint naming the property. The Certificate key is never put in
a message.
"""

from __future__ import annotations

from typing import Any, Mapping

from . import errors as E
from .backends import RouterConfig, route_url
from .model import App, Certificate, Route

#: Set by ROS tooling habits inside ResourceProperties; not ours, so ignored.
IGNORED = frozenset({"ServiceToken"})
APP_PROPERTIES = ("Name", "Meta")
ROUTE_PROPERTIES = (
    "App", "Type", "Service", "Domain", "Path", "Port", "Sticky", "Leader", "DrainBackends",
    "DisableKeepAlives", "Certificate",
)
CERT_PROPERTIES = ("Cert", "Key")


def _syntax(prop: str, rule: str) -> E.FlynnError:
    return E.FlynnError("syntax_error", E.SYNTAX, hint=f"{prop}: {rule}")


def check_known(props: Mapping[str, Any], allowed: tuple[str, ...], where: str = "") -> None:
    for name in props:
        if name not in allowed and name not in IGNORED:
            raise E.field_error(f"{where}{name}", "is not a known property",
                                hint=f"allowed: {', '.join(allowed)}")


def _string(props: Mapping[str, Any], prop: str) -> str:
    value = props.get(prop)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _syntax(prop, "must be a string")
    return value


def _bool(props: Mapping[str, Any], prop: str) -> bool:
    value = props.get(prop)
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise _syntax(prop, "must be a boolean (true or false)")


def _int(props: Mapping[str, Any], prop: str) -> int:
    value = props.get(prop)
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        raise _syntax(prop, "must be an integer")
    if isinstance(value, str):
        text = value.strip()
        if not text.lstrip("-").isdigit():
            raise _syntax(prop, "must be an integer")
        value = int(text)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or not -(2**31) <= value < 2**31:
        raise _syntax(prop, "must be a 32-bit integer")
    return value


def app_from_props(props: Mapping[str, Any]) -> tuple[str | None, dict[str, str] | None]:
    """(name, meta) for the controller; an empty Name lets the backend generate one."""
    check_known(props, APP_PROPERTIES)
    meta = props.get("Meta")
    if meta is not None and not isinstance(meta, dict):
        raise E.field_error("meta", "is invalid", hint="Meta must map strings to strings")
    return _string(props, "Name") or None, meta


def _certificate(props: Mapping[str, Any]) -> Certificate | None:
    value = props.get("Certificate")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _syntax("Certificate", "must be an object with Cert and Key")
    check_known(value, CERT_PROPERTIES, "Certificate.")
    return Certificate(cert=_string(value, "Cert"), key=_string(value, "Key"))


def route_from_props(props: Mapping[str, Any]) -> tuple[str, Route]:
    """(app reference, route body) ready for ``create_route`` / ``update_route``."""
    check_known(props, ROUTE_PROPERTIES)
    app = _string(props, "App")
    if not app:
        raise E.field_error("app", "is invalid", hint="App: the app name or id is required")
    route = Route(
        type=_string(props, "Type"),
        service=_string(props, "Service"),
        domain=_string(props, "Domain"),
        path=_string(props, "Path"),
        port=_int(props, "Port"),
        sticky=_bool(props, "Sticky"),
        leader=_bool(props, "Leader"),
        drain_backends=_bool(props, "DrainBackends"),
        disable_keep_alives=_bool(props, "DisableKeepAlives"),
        certificate=_certificate(props),
    )
    return app, route


def app_data(app: App) -> dict[str, Any]:
    """``Custom::App`` Data."""
    return {"AppId": app.id, "Name": app.name}


def route_data(app: App, route: Route, config: RouterConfig) -> dict[str, Any]:
    """``Custom::Route`` Data; nothing from the certificate but its id."""
    data: dict[str, Any] = {
        "RouteId": route.formatted_id,
        "Type": route.type,
        "AppId": app.id,
        "AppName": app.name,
        "Service": route.service,
        "Domain": route.domain if route.type == "http" else "",
        "Path": route.path if route.type == "http" else "",
        "Port": route.port,
        "Url": route_url(route, config),
    }
    if route.certificate is not None and route.certificate.id:
        data["CertificateId"] = route.certificate.id
    return data
