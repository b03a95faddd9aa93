"""The ROS console at `/` of the local ROS server: pages people use in the ROS console, locally.

`handle_console` is the server's hook (crhelper/ros/server.py sends it every request that is
not an API call). It answers the page and its static assets (vanilla JS and CSS in `static/`, no
build step) and the JSON the page polls under /console/api/ (`views`), all backed by `LocalStacks`
only. Every request passes `guard` first: a loopback Host and the console token.
"""

from __future__ import annotations

import json
import uuid
from importlib import resources
from typing import TYPE_CHECKING, Any, Mapping

from ...logs import get_logger
from ...servers import ApiResponse
from ..stacks import RosError
from . import guard
from .views import API_PREFIX, find_route, parse_body

if TYPE_CHECKING:
    from ..stacks import LocalStacks

__all__ = ["handle_console"]

_log = get_logger("ros.console")

_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

_assets: dict[str, tuple[str, bytes]] | None = None


def _static() -> dict[str, tuple[str, bytes]]:
    """The package's static files by name, read once (a fixed set: no path ever reaches the disk)."""
    global _assets
    if _assets is None:
        found: dict[str, tuple[str, bytes]] = {}
        for entry in resources.files(__name__).joinpath("static").iterdir():
            suffix = "." + entry.name.rpartition(".")[2]
            if entry.is_file() and suffix in _CONTENT_TYPES:
                found[entry.name] = (_CONTENT_TYPES[suffix], entry.read_bytes())
        _assets = found
    return _assets


def _json(status: int, payload: Any, extra: Mapping[str, str] | None = None) -> ApiResponse:
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return ApiResponse(status, {**guard.SECURITY_HEADERS, "Content-Type": "application/json; charset=utf-8",
                                **(extra or {})}, body)


def _error(code: str, message: str, status: int) -> ApiResponse:
    """ROS's error shape (RequestId, Code, Message), which the page shows as 'Code: Message'."""
    return _json(status, {"RequestId": str(uuid.uuid4()).upper(), "Code": code, "Message": message})


def _page_refused(status: int, message: str) -> ApiResponse:
    body = ("<!doctype html><meta charset=utf-8><title>crhelper ROS console</title>"
            f"<p>{message}</p>").encode("utf-8")
    return ApiResponse(status, {**guard.SECURITY_HEADERS, "Content-Type": "text/html; charset=utf-8"}, body)


_NO_TOKEN = ("The console needs its token: open the URL <code>crhelper ros serve</code> printed "
             "(<code>http://127.0.0.1:PORT/?token=...</code>).")


def handle_console(method: str, path: str, query: dict[str, list[str]], headers: Mapping[str, str],
                   body: bytes, stacks: LocalStacks, console_token: str) -> ApiResponse:
    """Answer one console request (exactly one answer, whatever happens)."""
    path = path.partition("?")[0] or "/"
    host = guard.header(headers, "host")
    is_api = path.startswith(API_PREFIX)
    if not guard.is_loopback_host(host):
        message = f"Host {host!r} is not a loopback name; open the console at http://127.0.0.1:PORT/"
        return _error("Forbidden.Host", message, 403) if is_api else _page_refused(403, message)
    if method not in ("GET", "HEAD", "POST"):
        return _error("MethodNotAllowed", f"{method} is not used by the console (GET and POST only)", 405)
    try:
        if is_api:
            return _api(method, path, query, headers, body, stacks, console_token, host)
        return _page(method, path, query, headers, console_token, host)
    except Exception:
        _log.error("console: unexpected error answering %s %s", method, path, exc_info=True)
        return _error("InternalError", "the console hit an unexpected error; the server's log has the details", 500)


def _page(method: str, path: str, query: dict[str, list[str]], headers: Mapping[str, str],
          token: str, host: str | None) -> ApiResponse:
    if method == "POST":
        return _page_refused(405, "Pages are read with GET; the console changes stacks through /console/api/ only.")
    offered = (query.get("token") or [""])[-1]
    extra: dict[str, str] = {}
    if guard.token_matches(offered, token):
        extra["Set-Cookie"] = guard.set_cookie(host, token)
    elif not guard.token_matches(guard.cookie_token(headers, host), token):
        return _page_refused(401, _NO_TOKEN)
    assets = _static()
    if path in ("/", "/index.html"):
        name = "index.html"
    elif path.startswith("/static/") and path[len("/static/"):] in assets:
        name = path[len("/static/"):]
    else:
        return _page_refused(404, f"No console page at {path}; the console starts at /.")
    content_type, content = assets[name]
    return ApiResponse(200, {**guard.SECURITY_HEADERS, "Content-Type": content_type, **extra}, content)


def _api(method: str, path: str, query: dict[str, list[str]], headers: Mapping[str, str], body: bytes,
         stacks: LocalStacks, token: str, host: str | None) -> ApiResponse:
    if path == API_PREFIX + "session":
        # A new tab has the cookie but not the token its script sends: the cookie (sent only by
        # same-site pages, never cross-site) buys the token once.
        if method not in ("GET", "HEAD"):
            return _error("MethodNotAllowed", f"{path} accepts GET only", 405)
        if not guard.token_matches(guard.cookie_token(headers, host), token):
            return _error("InvalidConsoleToken", "no console cookie; open the URL the server printed (?token=...)", 401)
        return _json(200, {"Token": token})
    if not guard.token_matches(guard.header(headers, guard.TOKEN_HEADER), token):
        return _error("InvalidConsoleToken", "missing or wrong X-Console-Token header; open the console "
                      "with the URL the server printed (?token=...)", 401)
    try:
        route, args = find_route(method, path)
        data: dict[str, Any] = {}
        if route.mutates:
            _check_mutation(headers, host)
            data = parse_body(body)
        return _json(200, route.view(stacks, args, query, data))
    except RosError as error:
        return _error(error.code, error.message, error.status)


def _check_mutation(headers: Mapping[str, str], host: str | None) -> None:
    """A change comes from the console's own page: a JSON body, and no foreign Origin (RosError otherwise)."""
    content_type = (guard.header(headers, "content-type") or "").partition(";")[0].strip().lower()
    if content_type != "application/json":
        raise RosError("UnsupportedMediaType", "Content-Type: must be application/json", 415)
    origin = guard.header(headers, "origin")
    if origin is not None and origin != f"http://{host}":
        raise RosError("Forbidden.Origin", f"Origin {origin!r} is not this console (http://{host})", 403)
    if (guard.header(headers, "sec-fetch-site") or "same-origin") not in ("same-origin", "none"):
        raise RosError("Forbidden.Origin", "a cross-site request cannot change stacks", 403)
