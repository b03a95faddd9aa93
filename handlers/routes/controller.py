"""A local Flynn controller: the app, route and event endpoints of spec §2/§8 over the repository.

It runs the same validation code as the provider, answers with Flynn's error JSON and bare
401/404s, and checks the Basic-auth key in constant time (spec §7). The ``flynn`` backend is
tested against it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
from typing import Any, Awaitable, Callable, Sequence

from aiohttp import web

from crhelper.servers import LoopThread, site_port

from . import errors as E
from .model import ROUTE_TYPES, Event
from .repository import RouteRepository
from .validation import app_update, decode_route, new_app

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_BODY = 10 * 1024 * 1024


def parse_keys(auth_key: str, key_ids: str = "") -> list[tuple[str, str]]:
    """``AUTH_KEY`` split on commas, paired with ``AUTH_KEY_IDS`` when the counts match."""
    keys = [k for k in auth_key.split(",") if k]
    ids = [i for i in key_ids.split(",") if i] if key_ids else []
    if len(ids) != len(keys):
        ids = [""] * len(keys)
    return list(zip(keys, ids))


def check_auth(header: str | None, keys: Sequence[tuple[str, str]]) -> tuple[bool, str]:
    """Basic auth with the key as password (any username but ``Bearer``); compares every key.

    Bearer tokens (Flynn's signed access tokens) are not issued locally, so they never pass.
    """
    if not header or not header.startswith("Basic "):
        return False, ""
    try:
        user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return False, ""
    if user == "Bearer" or not password:
        return False, ""
    matched, key_id = False, ""
    for key, kid in keys:
        if hmac.compare_digest(password.encode(), key.encode()):
            matched, key_id = True, kid
    return matched, key_id


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(body).encode(), content_type="application/json")


def error_response(exc: E.FlynnError) -> web.Response:
    if exc.bare:
        return web.Response(status=exc.status)
    return _json(exc.to_json(), exc.status)


class Controller:
    """The aiohttp application; ``keys`` are ``(key, id)`` pairs from :func:`parse_keys`."""

    def __init__(self, repo: RouteRepository, keys: Sequence[tuple[str, str]], *, poll_interval: float = 0.2) -> None:
        if not keys:
            raise ValueError("controller: at least one auth key is required")
        self.repo, self.keys = repo, list(keys)
        self.poll_interval = poll_interval
        self._closing = False

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=MAX_BODY)
        app.on_shutdown.append(self._on_shutdown)
        r = app.router
        r.add_get("/ping", self.ping)
        r.add_get("/apps", self.list_apps)
        r.add_post("/apps", self.create_app)
        r.add_get("/apps/{app}", self.get_app)
        r.add_post("/apps/{app}", self.update_app)
        r.add_delete("/apps/{app}", self.delete_app)
        r.add_get("/routes", self.list_all_routes)
        r.add_get("/apps/{app}/routes", self.list_routes)
        r.add_post("/apps/{app}/routes", self.create_route)
        r.add_get("/apps/{app}/routes/{type}/{id}", self.get_route)
        r.add_put("/apps/{app}/routes/{type}/{id}", self.update_route)
        r.add_delete("/apps/{app}/routes/{type}/{id}", self.delete_route)
        r.add_get("/events", self.list_events)
        r.add_get("/events/{id}", self.get_event)
        return app

    async def _on_shutdown(self, app: web.Application) -> None:
        """Let open event streams end so shutdown does not wait for them."""
        self._closing = True

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != "/ping":
            ok, _key_id = check_auth(request.headers.get("Authorization"), self.keys)
            if not ok:
                return web.Response(status=401)
        try:
            return await handler(request)
        except E.FlynnError as exc:
            return error_response(exc)
        except web.HTTPRequestEntityTooLarge:
            return error_response(E.FlynnError("request_body_too_big", E.BODY_TOO_BIG))
        except web.HTTPNotFound:
            # httprouter's NotFound (Go's http.NotFound): a text body, unlike the API's bare 404s.
            return web.Response(status=404, text="404 page not found\n")
        except web.HTTPMethodNotAllowed as exc:
            return web.Response(status=405, text="Method Not Allowed\n",
                                headers={"Allow": ", ".join(sorted(exc.allowed_methods))})

    @staticmethod
    async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _json_body(self, request: web.Request) -> Any:
        if "application/json" not in request.headers.get("Content-Type", ""):
            raise E.FlynnError("validation_error", E.CONTENT_TYPE)
        try:
            return json.loads(await request.read())
        except ValueError:
            raise E.FlynnError("syntax_error", E.SYNTAX) from None

    # --- handlers ----------------------------------------------------------------------------

    async def ping(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def list_apps(self, request: web.Request) -> web.Response:
        return _json([a.to_json() for a in await self._call(self.repo.list_apps)])

    async def create_app(self, request: web.Request) -> web.Response:
        wanted = new_app(await self._json_body(request))
        app = await self._call(self.repo.create_app, wanted.name or None, wanted.meta, app_id=wanted.id,
                               strategy=wanted.strategy, deploy_timeout=wanted.deploy_timeout)
        return _json(app.to_json())

    async def get_app(self, request: web.Request) -> web.Response:
        return _json((await self._call(self.repo.get_app, request.match_info["app"])).to_json())

    async def update_app(self, request: web.Request) -> web.Response:
        changes = app_update(await self._json_body(request))
        app = await self._call(self.repo.update_app, request.match_info["app"], changes)
        return _json(app.to_json())

    async def delete_app(self, request: web.Request) -> web.Response:
        await self._call(self.repo.delete_app, request.match_info["app"])
        return web.Response(status=200)

    async def list_all_routes(self, request: web.Request) -> web.Response:
        return _json([r.to_json() for r in await self._call(self.repo.list_routes)])

    async def list_routes(self, request: web.Request) -> web.Response:
        routes = await self._call(self.repo.list_routes, request.match_info["app"])
        return _json([r.to_json() for r in routes])

    async def create_route(self, request: web.Request) -> web.Response:
        await self._call(self.repo.get_app, request.match_info["app"])
        route = decode_route(await request.read(), request.headers.get("Content-Type"))
        created = await self._call(self.repo.create_route, request.match_info["app"], route)
        return _json(created.to_json())

    def _route_ref(self, request: web.Request) -> tuple[str, str, str]:
        info = request.match_info
        if info["type"] not in ROUTE_TYPES:
            raise E.not_found()
        return info["app"], info["type"], info["id"]

    async def get_route(self, request: web.Request) -> web.Response:
        route = await self._call(self.repo.get_route, *self._route_ref(request))
        return _json(route.to_json())

    async def update_route(self, request: web.Request) -> web.Response:
        ref = self._route_ref(request)
        body = decode_route(await request.read(), request.headers.get("Content-Type"))
        return _json((await self._call(self.repo.update_route, *ref, body)).to_json())

    async def delete_route(self, request: web.Request) -> web.Response:
        await self._call(self.repo.delete_route, *self._route_ref(request))
        return web.Response(status=200)

    async def get_event(self, request: web.Request) -> web.Response:
        """``GET /events/:id``; an id that is not a number is a 400 (Flynn: a 500), an unknown one a bare 404."""
        event_id = _go_int(request.match_info["id"])
        if event_id is None:
            raise E.field_error("id", "is invalid")
        return _json((await self._call(self.repo.get_event, event_id)).to_json())

    async def list_events(self, request: web.Request) -> web.StreamResponse:
        """Flynn's ``Events``: ``app_id`` (a name or id; unknown: a bare 404) first; the list only for
        ``Accept: application/json`` exactly, else the SSE stream."""
        q = request.query
        app_id = None
        if q.get("app_id"):
            app_id = (await self._call(self.repo.get_app, q["app_id"])).id
        types = [t for t in q.get("object_types", "").split(",") if t] if q.get("object_types") else []
        filters: dict[str, Any] = dict(app_id=app_id, object_types=types, object_id=q.get("object_id") or None)
        if request.headers.get("Accept") == "application/json":
            for name in ("before_id", "since_id", "count"):
                filters[name] = _number_param(q.get(name), name)
            events = await self._call(self.repo.list_events, **filters)
            return _json([e.to_json() for e in events])
        last = request.headers.get("Last-Event-Id")
        last_id = _number_param(last, "Last-Event-Id") or 0
        count = _number_param(q.get("count"), "count")
        return await self._stream_events(request, filters, last_id, count, replay=q.get("past") == "true" or last_id > 0)

    async def _stream_events(self, request: web.Request, filters: dict[str, Any], last_id: int, count: int | None,
                             *, replay: bool) -> web.StreamResponse:
        """SSE: with ``past=true`` or a ``Last-Event-Id``, replay the last ``count`` (all when unset)
        events after it in ascending order, then follow."""
        response = web.StreamResponse(headers={"Content-Type": SSE_CONTENT_TYPE, "Cache-Control": "no-cache"})
        await response.prepare(request)
        if replay:
            # Newest first, limited to ``count``: the replay is the last ``count`` events, oldest first.
            past = await self._call(self.repo.list_events, since_id=last_id, count=count, **filters)
            for event in reversed(past):
                await response.write(_sse_frame(event))
            since = past[0].id if past else last_id
        else:
            latest = await self._call(self.repo.list_events, count=1)
            since = latest[0].id if latest else 0
        follow = {**filters, "since_id": since}
        while not self._closing and not _client_gone(request):
            await asyncio.sleep(self.poll_interval)
            for event in await self._call(self.repo.list_events, ascending=True, **follow):
                await response.write(_sse_frame(event))
                follow["since_id"] = event.id
        return response


SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"  # pkg/sse


def _sse_frame(event: Event) -> bytes:
    return f"id: {event.id}\ndata: {json.dumps(event.to_json())}\n\n".encode()


def _go_int(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``: optional sign, decimal digits only, int64 range."""
    digits = text[1:] if text[:1] in "+-" else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _number_param(text: str | None, name: str) -> int | None:
    """An optional number parameter; a bad one is Flynn's ``<name> is invalid`` (400)."""
    if not text:
        return None
    value = _go_int(text)
    if value is None:
        raise E.field_error(name, "is invalid")
    return value


def _client_gone(request: web.Request) -> bool:
    """aiohttp does not cancel a handler when its client leaves; a quiet stream must notice."""
    transport = request.transport
    return transport is None or transport.is_closing()


class ControllerThread(LoopThread):
    """Serve a :class:`Controller` on 127.0.0.1 from a background thread (tests, CLI)."""

    def __init__(self, controller: Controller, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__("crhelper-controller")
        self.controller, self.host, self.port = controller, host, port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def startup(self) -> None:
        self._runner = web.AppRunner(self.controller.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site_port(site) or self.port

    async def cleanup(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
