"""The routing provider as `crhelper providers`, `crhelper contract routes` and deploy see it.

Standard library only (no import of the provider): the values are checked against the provider's
own constants by `tests/core/test_core_cli_shape.py`.
"""

from __future__ import annotations

from crhelper.manifest import EnvVar, ProviderManifest

manifest = ProviderManifest(
    name="routes",
    summary="Flynn-style apps and HTTP/TCP routes, served by the local router or a Flynn controller",
    resource_types=("Custom::App", "Custom::Route"),
    handler="handlers.routes.provider:provider",
    extras=("router",),
    environment=(
        EnvVar("CRHELPER_ROUTER_BACKEND", "where routes live: local (the embedded store) or flynn (a controller)", "local"),
        EnvVar("CRHELPER_ROUTER_DB", "the local backend's SQLite file", "$CRHELPER_HOME/router/routes.db"),
        EnvVar("CRHELPER_ROUTER_DEFAULT_DOMAIN", "a new app gets an HTTP route <app>.<domain> (none when unset)"),
        EnvVar("CRHELPER_ROUTER_PUBLIC_HOST", "the host in the Url of TCP routes", "127.0.0.1"),
        EnvVar("CRHELPER_ROUTER_HTTP_PORT", "the router's HTTP port, in route Urls and for `crhelper router serve`", "8080"),
        EnvVar("CRHELPER_ROUTER_HTTPS_PORT", "the router's HTTPS port, in route Urls and for `crhelper router serve`", "4433"),
        EnvVar("CRHELPER_FLYNN_URL", "the Flynn controller's URL (flynn backend)"),
        EnvVar("CRHELPER_FLYNN_KEY", "the Flynn controller's key (flynn backend, `crhelper router controller`)", secret=True),
        EnvVar("CRHELPER_FLYNN_KEY_IDS", "ids paired with the comma-separated keys (`crhelper router controller`)"),
        EnvVar("CRHELPER_ROUTER_SERVICES", "the service registry file of `crhelper router serve`",
               "$CRHELPER_HOME/router/services.json"),
        EnvVar("CRHELPER_ROUTER_COOKIE_KEY", "Base64 of the 32-byte sticky-session key (else a key file in the state folder)",
               secret=True),
    ),
    state_dir="router",
    commands=("router",),
)
