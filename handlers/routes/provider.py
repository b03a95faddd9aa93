"""``Custom::App`` and ``Custom::Route`` on the crhelper framework.

Properties are raw dicts checked by :mod:`properties`; the configured backend (local store or a
Flynn controller) runs Flynn's validation, and any :class:`errors.FlynnError` becomes a FAILED
Reason ``<code>: <message>`` (plus a hint naming the property). Physical ids: the app UUID, and
Flynn's ``<type>/<id>`` for routes; updates keep them.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from crhelper import Failure, Provider, Request, Result

from . import errors as E
from .backends import RouteBackend, RouterConfig, make_backend
from .properties import app_data, app_from_props, route_data, route_from_props
from .repository import UUID_RE

APP_TYPE = "Custom::App"
ROUTE_TYPE = "Custom::Route"
F = TypeVar("F", bound=Callable[..., Any])


def _flynn_failures(func: F) -> F:
    """Turn Flynn errors into ``Failure`` with Flynn's code and message."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except E.FlynnError as exc:
            raise Failure(exc.reason()) from None

    return wrapper  # type: ignore[return-value]


def _split_route_id(physical_id: str | None) -> tuple[str, str] | None:
    route_type, _, route_id = (physical_id or "").partition("/")
    return (route_type, route_id) if route_type in ("http", "tcp") and route_id else None


def build_provider(
    config: RouterConfig | None = None,
    backend: RouteBackend | None = None,
    provider: Provider | None = None,
) -> Provider:
    """Register both resource types on ``provider`` (a new one by default).

    The backend is built from ``config`` (``RouterConfig.from_env()`` when omitted) on first use,
    so importing this module costs no I/O.
    """
    provider = provider or Provider()
    state: dict[str, Any] = {"config": config, "backend": backend}

    def cfg() -> RouterConfig:
        if state["config"] is None:
            state["config"] = RouterConfig.from_env()
        return state["config"]

    def be() -> RouteBackend:
        if state["backend"] is None:
            state["backend"] = make_backend(cfg())
        return state["backend"]

    @provider.create(APP_TYPE)
    @_flynn_failures
    def create_app(props: dict, request: Request) -> Result:
        name, meta = app_from_props(props)
        app = be().create_app(name, meta)
        return Result(physical_id=app.id, data=app_data(app))

    @provider.update(APP_TYPE)
    @_flynn_failures
    def update_app(props: dict, old: dict, request: Request) -> Result:
        name, meta = app_from_props(props)
        current = be().get_app(request.physical_resource_id or "")
        if name is not None and name != current.name:
            raise Failure("validation_error: name is invalid (Name: an app cannot be renamed; "
                          "create a new Custom::App instead)")
        app = be().update_app_meta(current.id, meta or {})
        return Result(data=app_data(app))

    @provider.delete(APP_TYPE)
    @_flynn_failures
    def delete_app(props: dict, request: Request) -> None:
        app_id = request.physical_resource_id or ""
        if not UUID_RE.match(app_id):
            return
        try:
            be().delete_app(app_id)
        except E.FlynnError as exc:
            if exc.status != 404:
                raise

    @provider.create(ROUTE_TYPE)
    @_flynn_failures
    def create_route(props: dict, request: Request) -> Result:
        app_ref, route = route_from_props(props)
        app = be().get_app(app_ref)
        created = be().create_route(app.id, route)
        return Result(physical_id=created.formatted_id, data=route_data(app, created, cfg()))

    @provider.update(ROUTE_TYPE)
    @_flynn_failures
    def update_route(props: dict, old: dict, request: Request) -> Result:
        app_ref, route = route_from_props(props)
        ref = _split_route_id(request.physical_resource_id)
        if ref is None:
            raise Failure("not_found: Not found (PhysicalResourceId: not a <type>/<id> route id)")
        if route.type != ref[0]:
            raise Failure(f"validation_error: Invalid route (Type: a route cannot change from {ref[0]} "
                          f"to another type; create a new Custom::Route instead)")
        app = be().get_app(app_ref)
        old_app = (old or {}).get("App")
        if old_app and old_app not in (app.id, app.name):
            raise Failure("validation_error: Invalid route (App: a route cannot move to another app)")
        updated = be().update_route(app.id, ref[0], ref[1], route)
        return Result(data=route_data(app, updated, cfg()))

    @provider.delete(ROUTE_TYPE)
    @_flynn_failures
    def delete_route(props: dict, request: Request) -> None:
        ref = _split_route_id(request.physical_resource_id)
        app_ref = props.get("App") if isinstance(props, dict) else None
        if ref is None or not isinstance(app_ref, str) or not app_ref:
            return
        try:
            be().delete_route(app_ref, ref[0], ref[1])
        except E.FlynnError as exc:
            if exc.status != 404:
                raise

    return provider


#: The module-level provider; ``handler`` is the Function Compute entry point.
provider = build_provider()
handler = provider.fc_handler
