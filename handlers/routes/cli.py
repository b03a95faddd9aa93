"""``crhelper router ...``: serve the local router or controller, list routes, list/follow events,
and edit the service registry.

Registered through the ``crhelper.commands`` entry point. Importing this module costs only the
standard library (``crhelper --help`` builds every command's parser); the bodies are in
``handlers.routes.commands``, imported when a sub-command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from crhelper.cli.parsers import RAW, Body

DESCRIPTION = """\
The routing provider's local side: the router that carries traffic to the routes your stacks
create (an aiohttp reverse proxy matching as Flynn's router does: exact host, then wildcards
most specific first, longest path prefix), a local Flynn controller API, the routes and route
events, and the service registry that maps a route's service name to backend addresses.

State lives in $CRHELPER_HOME/router (routes.db, services.json, cookie.key);
CRHELPER_ROUTER_BACKEND=flynn sends the provider's routes to a real controller instead
(CRHELPER_FLYNN_URL, CRHELPER_FLYNN_KEY). Each sub-command has its own --help."""

EPILOG = """\
examples:
  crhelper router services register ros-web 127.0.0.1:9911   # a backend for service ros-web
  crhelper router serve                      # HTTP on :8080, HTTPS on :4433
  curl -H 'Host: ros.demo.apps.localhost' http://127.0.0.1:8080/
  crhelper router routes --app demo-ros
  crhelper router events --follow
  crhelper router services                   # lists the registry
  CRHELPER_FLYNN_KEY=k crhelper router controller --port 8081
"""

SERVE_DESCRIPTION = """\
Run the local router: HTTP routes on --port, HTTPS routes on --https-port (the certificate of
each route chosen by SNI), and a listener per TCP route on its own port. Requests go to the
backends registered for the route's service (`crhelper router services`); sticky routes keep a
client on one backend with a sealed cookie. Route and registry changes are picked up while it
runs. Stop it with Ctrl-C.

Two engines, the same routing: `builtin` (the default; an aiohttp proxy, nothing to install)
and `haproxy`, a real HAProxy (2.5 or later on PATH, e.g. Debian's package) for production
traffic. With --engine haproxy the command writes HAProxy's configuration from the same route
store, runs it in master-worker mode (it ends with the command) and applies changes live: HTTP
routes and backends through HAProxy's runtime API and maps, without a reload, so open
connections stay; a new TCP port or certificate through a seamless reload (the HTTPS listener
opens with the first route that has a certificate). Sticky routes then
carry HAProxy's own `_backend` cookie (a hash of the backend address under a key derived from
the router's cookie key) instead of the built-in engine's sealed one.

The built-in engine runs $CRHELPER_ROUTER_WORKERS processes (default: the CPU count) sharing the
ports with SO_REUSEPORT. A route without its own certificate, or a client sending no server name,
gets the default certificate: the PEM files named by $CRHELPER_ROUTER_TLS_CERT and
$CRHELPER_ROUTER_TLS_KEY (set both or neither), else a generated self-signed one."""
SERVE_EPILOG = """\
examples:
  crhelper router serve
  crhelper router serve --port 0 --no-https          # any free port, printed on start
  crhelper router serve --host 0.0.0.0 --port 9080 --https-port 9443
  crhelper router serve --engine haproxy             # the same routes through HAProxy
  CRHELPER_ROUTER_WORKERS=1 crhelper router serve    # one router process
  crhelper router serve --engine haproxy --haproxy /usr/local/sbin/haproxy --port 80 --https-port 443
"""

CONTROLLER_DESCRIPTION = """\
Serve the Flynn controller's app, route and event API over the local route store, with Flynn's
validation and error JSON, for clients of a real controller (and the provider's flynn backend)
to talk to. Requests authenticate with HTTP Basic auth, the key as password: the keys are
CRHELPER_FLYNN_KEY (comma-separated; CRHELPER_FLYNN_KEY_IDS names them)."""
CONTROLLER_EPILOG = """\
examples:
  CRHELPER_FLYNN_KEY=k crhelper router controller --port 8081
  curl -u :k http://127.0.0.1:8081/apps
"""

ROUTES_DESCRIPTION = """\
List the live routes, newest first: HTTP routes as `http/<id>  <domain><path>  -> <service>`
(with sticky / leader flags), TCP routes as `tcp/<id>  :<port>  -> <service>`."""
ROUTES_EPILOG = """\
examples:
  crhelper router routes
  crhelper router routes --app demo-ros --json
"""

EVENTS_DESCRIPTION = """\
List the latest route events (`route` when a route is created or changed, `route_deletion` when
it goes), oldest first; --follow keeps printing new ones until Ctrl-C or the reader goes away."""
EVENTS_EPILOG = """\
examples:
  crhelper router events
  crhelper router events --count 5 --follow
  crhelper router events --count 0 --follow --json | head -1   # wait for the next event
"""

SERVICES_DESCRIPTION = """\
Show or edit the service registry: which backend addresses (host:port) serve each service name
that routes point at. With no action, list it. The router re-reads it when it changes. File:
$CRHELPER_ROUTER_SERVICES or $CRHELPER_HOME/router/services.json."""
SERVICES_EPILOG = """\
examples:
  crhelper router services
  crhelper router services register ros-web 127.0.0.1:9911
  crhelper router services register ros-web 127.0.0.1:9912 --leader
  crhelper router services unregister ros-web 127.0.0.1:9911
"""


def _sub(sub: "argparse._SubParsersAction[Any]", name: str, summary: str, description: str,
         epilog: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=summary, description=description, epilog=epilog, formatter_class=RAW)


def register(subparsers: "argparse._SubParsersAction[Any]") -> None:
    """Add the ``router`` command and its sub-commands."""
    router = subparsers.add_parser("router", help="the local Flynn-style router, its routes, events and service registry",
                                   description=DESCRIPTION, epilog=EPILOG, formatter_class=RAW)
    router.set_defaults(func=lambda args: (router.print_help(), 2)[1])
    sub = router.add_subparsers(dest="router_command", title="sub-commands", metavar="<sub-command>")

    serve = _sub(sub, "serve", "run the reverse proxy (HTTP, HTTPS and TCP routes)", SERVE_DESCRIPTION, SERVE_EPILOG)
    serve.add_argument("--host", default="127.0.0.1", help="HTTP and HTTPS listen address (default 127.0.0.1)")
    # Env defaults are read when serving, so a bad variable cannot break every other command.
    serve.add_argument("--port", type=int, default=None,
                       help="HTTP listen port, 0 for any free one (default $CRHELPER_ROUTER_HTTP_PORT or 8080)")
    serve.add_argument("--https-port", type=int, default=None,
                       help="HTTPS listen port, certificates chosen by SNI (default $CRHELPER_ROUTER_HTTPS_PORT or 4433)")
    serve.add_argument("--no-https", action="store_true", help="do not open the HTTPS listener")
    serve.add_argument("--tcp-host", default="127.0.0.1", help="listen address of TCP routes (default 127.0.0.1)")
    serve.add_argument("--poll", type=float, default=0.2, metavar="SECONDS",
                       help="seconds between checks for route and registry changes (default 0.2)")
    serve.add_argument("--engine", choices=("builtin", "haproxy"), default="builtin",
                       help="the data plane: builtin (aiohttp, the default) or haproxy (a real HAProxy, "
                            "programmed live from the same routes)")
    serve.add_argument("--haproxy", default="haproxy", metavar="PATH",
                       help="with --engine haproxy: the HAProxy executable (default: haproxy on PATH)")
    serve.set_defaults(func=Body("handlers.routes.commands:serve", extra="router"))

    controller = _sub(sub, "controller", "serve the Flynn controller route API locally", CONTROLLER_DESCRIPTION,
                      CONTROLLER_EPILOG)
    controller.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    controller.add_argument("--port", type=int, default=8081, help="listen port (default 8081)")
    controller.set_defaults(func=Body("handlers.routes.commands:controller", extra="router"))

    routes = _sub(sub, "routes", "list live routes, newest first", ROUTES_DESCRIPTION, ROUTES_EPILOG)
    routes.add_argument("--app", metavar="APP", help="only the routes of this app (its name or id)")
    routes.add_argument("--json", action="store_true", help="one Flynn route JSON object per line")
    routes.set_defaults(func=Body("handlers.routes.commands:routes", extra="router"))

    events = _sub(sub, "events", "list route events; --follow keeps printing new ones", EVENTS_DESCRIPTION,
                  EVENTS_EPILOG)
    events.add_argument("--follow", action="store_true", help="keep printing new events as they happen")
    events.add_argument("--count", type=int, default=20, metavar="N",
                        help="past events to print first (default 20; 0: only new ones)")
    events.add_argument("--all-types", action="store_true", help="include app events, not only route events")
    events.add_argument("--json", action="store_true", help="one Flynn event JSON object per line")
    events.set_defaults(func=Body("handlers.routes.commands:events", extra="router"))

    services = _sub(sub, "services", "list (the default) or edit the local service registry", SERVICES_DESCRIPTION,
                    SERVICES_EPILOG)
    services.add_argument("action", nargs="?", default="list", choices=("list", "register", "unregister"),
                          help="list (default), register SERVICE ADDR, or unregister SERVICE ADDR")
    services.add_argument("service", nargs="?", metavar="SERVICE", help="the service name routes point at, e.g. ros-web")
    services.add_argument("addr", nargs="?", metavar="ADDR", help="a backend address, host:port")
    services.add_argument("--leader", action="store_true",
                          help="with register: make this backend the service's leader (leader routes go to it)")
    services.set_defaults(func=Body("handlers.routes.commands:services", extra="router"))
