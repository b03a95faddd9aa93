"""A client of a Flynn controller's app and route API (Basic auth: empty user, controller key).

Error bodies become :class:`errors.FlynnError` with the controller's code and message; bare 401
and 404 get descriptive texts. The key is never put in an exception or log line. Timeouts, the
call's time budget, retries and redirects follow the shared outbound policy
(`crhelper.cloud.http`): idempotent calls (GET, PUT, DELETE) are tried again after connection
trouble, 429 or 5xx, with jittered back-off; a POST is sent once; redirects are refused.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import quote

from crhelper.cloud.http import IDEMPOTENT_METHODS, OutboundPolicy, RetrySchedule
from crhelper.logs import get_logger, redact_url

from . import errors as E
from .model import App, Route

if TYPE_CHECKING:
    import requests

log = get_logger("routes.flynn")


class FlynnClient:
    """Thin synchronous client; ``requests`` is imported lazily to keep cold starts light.

    ``timeout`` bounds the connection and each read; ``policy`` overrides all of the outbound policy."""

    def __init__(self, url: str, key: str, *, timeout: float = 10.0, verify: bool | str = True,
                 policy: OutboundPolicy | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        import requests

        if not url:
            raise ValueError("flynn backend: the controller URL is required (CRHELPER_FLYNN_URL)")
        if not key:
            raise ValueError("flynn backend: the controller key is required (CRHELPER_FLYNN_KEY)")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.policy = policy or OutboundPolicy(connect_timeout=timeout, read_timeout=timeout)
        self._sleep = sleep
        self._session = requests.Session()
        self._session.auth = ("", key)
        self._session.verify = verify

    def close(self) -> None:
        self._session.close()

    def _send(self, method: str, path: str, body: Any) -> "requests.Response":
        """One call under the policy: the final `requests.Response`, or FlynnError when none came."""
        import requests

        policy = self.policy
        schedule = policy.schedule(sleep=self._sleep)
        again = method.upper() in IDEMPOTENT_METHODS
        while True:
            budget = schedule.begin()
            if budget <= 0:
                raise E.unknown_error(hint=f"controller unreachable: no answer within {policy.total_budget:g} s")
            try:
                resp = self._session.request(
                    method, self.url + path, json=body, allow_redirects=policy.follow_redirects,
                    timeout=(min(policy.connect_timeout, budget), min(policy.read_timeout, budget)))
            except requests.RequestException as exc:
                if again and self._wait_to_retry(schedule, method, path, type(exc).__name__, None):
                    continue
                raise E.unknown_error(hint=f"controller unreachable: {type(exc).__name__}") from None
            if again and policy.retryable_status(resp.status_code) and self._wait_to_retry(
                    schedule, method, path, f"HTTP {resp.status_code}", policy.retry_after(resp.headers.get("Retry-After"))):
                resp.close()
                continue
            return resp

    def _wait_to_retry(self, schedule: RetrySchedule, method: str, path: str, problem: str,
                       retry_after: float | None) -> bool:
        """Wait for the next attempt if the policy allows one in time; the URL is logged redacted."""
        if schedule.exhausted or not schedule.wait_for_retry(retry_after):
            return False
        log.warning("controller call failed; trying again", extra={"fields": {
            "method": method, "url": redact_url(self.url + path), "attempt": schedule.attempts, "error": problem}})
        return True

    def _request(self, method: str, path: str, body: Any = None, *, hint: str = "") -> Any:
        resp = self._send(method, path, body)
        refused = self.policy.refused_redirect(resp.status_code, resp.headers.get("Location"), self.url + path)
        if refused:
            raise E.unknown_error(hint=f"controller answered {refused}")
        if resp.status_code >= 400:
            try:
                payload = resp.json() if resp.content else None
            except ValueError:
                payload = None
            raise E.FlynnError.from_json(resp.status_code, payload, hint=hint)
        if not resp.content:
            return None
        return resp.json()

    @staticmethod
    def _seg(value: str) -> str:
        return quote(value, safe="")

    # --- apps --------------------------------------------------------------------------------

    def create_app(self, name: str | None, meta: dict[str, str] | None = None) -> App:
        body: dict[str, Any] = {"meta": meta}
        if name:
            body["name"] = name
        data = self._request("POST", "/apps", body)
        return _app(data)

    def get_app(self, ref: str) -> App:
        data = self._request("GET", f"/apps/{self._seg(ref)}", hint=f"App: no app {ref}")
        return _app(data)

    def update_app_meta(self, ref: str, meta: dict[str, str]) -> App:
        data = self._request("POST", f"/apps/{self._seg(ref)}", {"meta": meta}, hint=f"App: no app {ref}")
        return _app(data)

    def delete_app(self, ref: str) -> None:
        self._request("DELETE", f"/apps/{self._seg(ref)}", hint=f"App: no app {ref}")

    # --- routes ------------------------------------------------------------------------------

    def create_route(self, app: str, route: Route) -> Route:
        data = self._request("POST", f"/apps/{self._seg(app)}/routes", route.to_json(), hint=f"App: no app {app}")
        return Route.from_json(data)

    def get_route(self, app: str, route_type: str, route_id: str) -> Route:
        path = f"/apps/{self._seg(app)}/routes/{self._seg(route_type)}/{self._seg(route_id)}"
        return Route.from_json(self._request("GET", path, hint=f"Route: no {route_type}/{route_id} in app {app}"))

    def update_route(self, app: str, route_type: str, route_id: str, route: Route) -> Route:
        """Flynn's PUT writes ``parent_ref`` and ``port`` exactly as sent and checks no ownership,
        so read the stored route first (a bare 404 if it is not this app's) and keep its
        ``parent_ref``, and its port when a TCP update names none (it was auto-assigned)."""
        stored = self.get_route(app, route_type, route_id)
        body = route.copy(parent_ref=stored.parent_ref)
        if route_type == "tcp" and not route.port:
            body = body.copy(port=stored.port)
        path = f"/apps/{self._seg(app)}/routes/{self._seg(route_type)}/{self._seg(route_id)}"
        hint = f"Route: no {route_type}/{route_id} in app {app}, or its Domain changed"
        return Route.from_json(self._request("PUT", path, body.to_json(), hint=hint))

    def delete_route(self, app: str, route_type: str, route_id: str) -> None:
        path = f"/apps/{self._seg(app)}/routes/{self._seg(route_type)}/{self._seg(route_id)}"
        self._request("DELETE", path, hint=f"Route: no {route_type}/{route_id} in app {app}")

    def list_routes(self, app: str | None = None) -> list[Route]:
        path = f"/apps/{self._seg(app)}/routes" if app else "/routes"
        return [Route.from_json(r) for r in self._request("GET", path) or []]


def _app(data: Any) -> App:
    """A controller's app JSON (``ct.App``) as our record."""
    return App(data["id"], data["name"], data.get("meta") or {}, data.get("created_at", ""), data.get("updated_at", ""),
               strategy=data.get("strategy", ""), deploy_timeout=data.get("deploy_timeout", 0))
