"""``crhelper router ...``: serve the local router or controller, list routes, list/follow events,
and edit the service registry.

Registered through the ``crhelper.commands`` entry point. Importing this module costs only the
standard library (``crhelper --help`` builds every command's parser); the bodies are in
``handlers.routes.commands``, imported when a sub-command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from crhelper.cli.parsers import Body

RAW = argparse.RawDescriptionHelpFormatter
EPILOG = """\
examples:
  crhelper router services register ros-web 127.0.0.1:9911
  crhelper router serve                      # HTTP on :8080, HTTPS on :4433
  crhelper router routes --app demo-ros
  crhelper router events --follow
  CRHELPER_FLYNN_KEY=k crhelper router controller --port 8081
"""


def register(subparsers: "argparse._SubParsersAction[Any]") -> None:
    """Add the ``router`` command and its sub-commands."""
    router = subparsers.add_parser("router", help="local Flynn-style router, routes and events",
                                   description="The routing provider's local router (an aiohttp reverse proxy matching "
                                               "as Flynn's does), its routes, events and service registry; state in "
                                               "$CRHELPER_HOME/router.", epilog=EPILOG, formatter_class=RAW)
    router.set_defaults(func=lambda args: (router.print_help(), 2)[1])
    sub = router.add_subparsers(dest="router_command")

    serve = sub.add_parser("serve", help="run the reverse proxy (HTTP and TCP routes)",
                           epilog="example: crhelper router serve --port 0 --no-https")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP listen address (default 127.0.0.1)")
    # Env defaults are read when serving, so a bad variable cannot break every other command.
    serve.add_argument("--port", type=int, default=None,
                       help="HTTP listen port, 0 for any free one (default $CRHELPER_ROUTER_HTTP_PORT or 8080)")
    serve.add_argument("--https-port", type=int, default=None,
                       help="HTTPS listen port, certificates chosen by SNI (default $CRHELPER_ROUTER_HTTPS_PORT or 4433)")
    serve.add_argument("--no-https", action="store_true", help="do not open the HTTPS listener")
    serve.add_argument("--tcp-host", default="127.0.0.1", help="listen address of TCP routes")
    serve.add_argument("--poll", type=float, default=0.2, help="seconds between route-change checks")
    serve.set_defaults(func=Body("handlers.routes.commands:serve", extra="router"))

    controller = sub.add_parser("controller", help="serve the Flynn controller route API locally",
                                epilog="example: CRHELPER_FLYNN_KEY=k crhelper router controller --port 8081")
    controller.add_argument("--host", default="127.0.0.1")
    controller.add_argument("--port", type=int, default=8081)
    controller.set_defaults(func=Body("handlers.routes.commands:controller", extra="router"))

    routes = sub.add_parser("routes", help="list live routes, newest first",
                            epilog="example: crhelper router routes --app demo-ros --json")
    routes.add_argument("--app", help="only this app (name or id)")
    routes.add_argument("--json", action="store_true", help="print Flynn route JSON")
    routes.set_defaults(func=Body("handlers.routes.commands:routes", extra="router"))

    events = sub.add_parser("events", help="list route events; --follow keeps printing new ones",
                            epilog="example: crhelper router events --count 5 --follow")
    events.add_argument("--follow", action="store_true")
    events.add_argument("--count", type=int, default=20, help="past events to print first (0: only new ones)")
    events.add_argument("--all-types", action="store_true", help="include app events")
    events.add_argument("--json", action="store_true")
    events.set_defaults(func=Body("handlers.routes.commands:events", extra="router"))

    services = sub.add_parser("services", help="show or edit the local service registry",
                              epilog="examples: crhelper router services register ros-web 127.0.0.1:9911 --leader; "
                                     "crhelper router services list")
    services.add_argument("action", choices=("list", "register", "unregister"))
    services.add_argument("service", nargs="?")
    services.add_argument("addr", nargs="?", help="host:port")
    services.add_argument("--leader", action="store_true")
    services.set_defaults(func=Body("handlers.routes.commands:services", extra="router"))
