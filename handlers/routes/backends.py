"""Where routes live: the embedded ``local`` store or a real Flynn controller, one interface.

The choice comes from :class:`RouterConfig` (environment variables by default), so the same
template works against the local router and a Flynn cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol

from crhelper.config import env_choice, env_port

from .model import TCP, App, Route

BACKENDS = ("local", "flynn")


class RouteBackend(Protocol):
    """The operations the provider needs; both the repository and the Flynn client satisfy it."""

    def create_app(self, name: str | None, meta: Any = None) -> App: ...
    def get_app(self, ref: str) -> App: ...
    def update_app_meta(self, ref: str, meta: Any) -> App: ...
    def delete_app(self, ref: str) -> Any: ...
    def create_route(self, app: str, route: Route) -> Route: ...
    def get_route(self, app: str, route_type: str, route_id: str) -> Route: ...
    def update_route(self, app: str, route_type: str, route_id: str, route: Route) -> Route: ...
    def delete_route(self, app: str, route_type: str, route_id: str) -> Any: ...


@dataclass(frozen=True)
class RouterConfig:
    """Provider configuration. ``flynn_key`` is secret and excluded from ``repr``."""

    backend: str = "local"
    db_path: str | None = None
    default_domain: str | None = None
    flynn_url: str = ""
    flynn_key: str = ""
    public_host: str = "127.0.0.1"
    http_port: int = 8080
    https_port: int = 4433

    def __repr__(self) -> str:
        return (f"RouterConfig(backend={self.backend!r}, db_path={self.db_path!r}, "
                f"default_domain={self.default_domain!r}, flynn_url={self.flynn_url!r}, "
                f"public_host={self.public_host!r}, http_port={self.http_port}, https_port={self.https_port})")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "RouterConfig":
        """``CRHELPER_ROUTER_BACKEND`` (local|flynn), ``CRHELPER_ROUTER_DB``,
        ``CRHELPER_ROUTER_DEFAULT_DOMAIN``, ``CRHELPER_FLYNN_URL``, ``CRHELPER_FLYNN_KEY``,
        ``CRHELPER_ROUTER_PUBLIC_HOST``, ``CRHELPER_ROUTER_HTTP_PORT``, ``CRHELPER_ROUTER_HTTPS_PORT``.
        A bad value raises :class:`crhelper.config.ConfigError` (a ValueError) naming the variable."""
        env = os.environ if env is None else env
        return cls(
            backend=env_choice(env, "CRHELPER_ROUTER_BACKEND", "local", BACKENDS),
            db_path=env.get("CRHELPER_ROUTER_DB") or None,
            default_domain=env.get("CRHELPER_ROUTER_DEFAULT_DOMAIN") or None,
            flynn_url=env.get("CRHELPER_FLYNN_URL", ""),
            flynn_key=env.get("CRHELPER_FLYNN_KEY", ""),
            public_host=env.get("CRHELPER_ROUTER_PUBLIC_HOST", "127.0.0.1") or "127.0.0.1",
            http_port=env_port(env, "CRHELPER_ROUTER_HTTP_PORT", 8080),
            https_port=env_port(env, "CRHELPER_ROUTER_HTTPS_PORT", 4433),
        )


def make_backend(config: RouterConfig) -> RouteBackend:
    """Build the configured backend (imports only what that backend needs)."""
    if config.backend == "flynn":
        from .flynn_client import FlynnClient

        return FlynnClient(config.flynn_url, config.flynn_key)
    from .repository import RouteRepository

    return RouteRepository(Path(config.db_path) if config.db_path else None, default_domain=config.default_domain)


def route_url(route: Route, config: RouterConfig) -> str:
    """A URL a client can use: ``http(s)://<domain>[:port]<path>`` or ``tcp://<host>:<port>``;
    HTTPS when the route carries a certificate."""
    if route.type == TCP:
        return f"tcp://{config.public_host}:{route.port}"
    if route.certificate is not None:
        port = "" if config.https_port == 443 else f":{config.https_port}"
        return f"https://{route.domain}{port}{route.path or '/'}"
    port = "" if config.http_port == 80 else f":{config.http_port}"
    return f"http://{route.domain}{port}{route.path or '/'}"
