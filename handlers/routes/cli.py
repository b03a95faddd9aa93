"""``crhelper router ...``: serve the local router or controller, list routes, list/follow events,
and edit the service registry.

Registered through the ``crhelper.commands`` entry point. Importing this module costs only the
standard library (``crhelper --help`` builds every command's parser); each sub-command imports
what it needs when it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

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
    serve.set_defaults(func=_serve)

    controller = sub.add_parser("controller", help="serve the Flynn controller route API locally",
                                epilog="example: CRHELPER_FLYNN_KEY=k crhelper router controller --port 8081")
    controller.add_argument("--host", default="127.0.0.1")
    controller.add_argument("--port", type=int, default=8081)
    controller.set_defaults(func=_controller)

    routes = sub.add_parser("routes", help="list live routes, newest first",
                            epilog="example: crhelper router routes --app demo-ros --json")
    routes.add_argument("--app", help="only this app (name or id)")
    routes.add_argument("--json", action="store_true", help="print Flynn route JSON")
    routes.set_defaults(func=_routes)

    events = sub.add_parser("events", help="list route events; --follow keeps printing new ones",
                            epilog="example: crhelper router events --count 5 --follow")
    events.add_argument("--follow", action="store_true")
    events.add_argument("--count", type=int, default=20, help="past events to print first (0: only new ones)")
    events.add_argument("--all-types", action="store_true", help="include app events")
    events.add_argument("--json", action="store_true")
    events.set_defaults(func=_events)

    services = sub.add_parser("services", help="show or edit the local service registry",
                              epilog="examples: crhelper router services register ros-web 127.0.0.1:9911 --leader; "
                                     "crhelper router services list")
    services.add_argument("action", choices=("list", "register", "unregister"))
    services.add_argument("service", nargs="?")
    services.add_argument("addr", nargs="?", help="host:port")
    services.add_argument("--leader", action="store_true")
    services.set_defaults(func=_services)


def _repo() -> Any:
    from .backends import RouterConfig
    from .repository import RouteRepository

    config = RouterConfig.from_env()
    return RouteRepository(config.db_path, default_domain=config.default_domain)


def _port(given: int | None, flag: str, env_name: str, default: int) -> int:
    """The flag's value, else the environment variable, else the default; 0 means any port."""
    from crhelper.config import env_port

    if given is None:
        return env_port(os.environ, env_name, default, allow_any=True)
    if not 0 <= given <= 65535:
        raise ValueError(f"{flag}: must be a port number 0-65535")
    return given


def _serve(args: argparse.Namespace) -> int:
    import asyncio

    from .proxy import Router, serve_forever
    from .registry import ServiceRegistry
    from .sticky import CookieSealer, load_key

    try:
        http_port = _port(args.port, "--port", "CRHELPER_ROUTER_HTTP_PORT", 8080)
        https_port = None if args.no_https else _port(args.https_port, "--https-port", "CRHELPER_ROUTER_HTTPS_PORT", 4433)
        sealer = CookieSealer(load_key())
    except ValueError as exc:
        print(f"router serve: {exc}", file=sys.stderr)
        return 2
    router = Router(_repo(), ServiceRegistry(), sealer, host=args.host, http_port=http_port,
                    tcp_host=args.tcp_host, poll_interval=args.poll, https_port=https_port)

    def ready() -> None:
        tls = f", https://{args.host}:{router.https_port}" if router.https_port is not None else ""
        print(f"router: http://{args.host}:{router.http_port}{tls} (Ctrl-C to stop)", file=sys.stderr, flush=True)

    try:
        asyncio.run(serve_forever(router, on_ready=ready))
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the listen address is taken or not ours
        wanted = f"{args.host}:{http_port}" + (f" / {https_port}" if https_port is not None else "")
        print(f"router serve: cannot listen on {wanted}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def _controller(args: argparse.Namespace) -> int:
    from aiohttp import web

    from .controller import Controller, parse_keys

    keys = parse_keys(os.environ.get("CRHELPER_FLYNN_KEY", ""), os.environ.get("CRHELPER_FLYNN_KEY_IDS", ""))
    if not keys:
        print("router controller: set CRHELPER_FLYNN_KEY (comma-separated keys)", file=sys.stderr)
        return 2
    try:
        web.run_app(Controller(_repo(), keys).app(), host=args.host, port=args.port, print=None)
    except OSError as exc:  # the listen address is taken or not ours
        print(f"router controller: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def _routes(args: argparse.Namespace) -> int:
    from . import errors as E

    try:
        routes = _repo().list_routes(args.app)
    except E.FlynnError as exc:
        print(f"router routes: {exc.reason()}", file=sys.stderr)
        return 1
    for route in routes:
        if args.json:
            print(json.dumps(route.to_json(include_key=False), sort_keys=True))
        elif route.type == "http":
            print(f"{route.formatted_id}  {route.domain}{route.path}  -> {route.service}"
                  f"{'  sticky' if route.sticky else ''}{'  leader' if route.leader else ''}")
        else:
            print(f"{route.formatted_id}  :{route.port}  -> {route.service}{'  leader' if route.leader else ''}")
    return 0


def _events(args: argparse.Namespace) -> int:
    from .events import ROUTE_EVENT_TYPES, event_json, follow, format_event

    if args.count < 0:
        print("router events: --count must be 0 or more", file=sys.stderr)
        return 2
    repo = _repo()
    types = () if args.all_types else ROUTE_EVENT_TYPES
    latest = repo.list_events(object_types=types, count=1)
    # count=None would mean "no limit" to the store, so --count 0 is handled here: nothing past.
    past = list(reversed(repo.list_events(object_types=types, count=args.count))) if args.count else []
    show = event_json if args.json else format_event
    for event in past:
        print(show(event), flush=True)
    if args.follow:
        try:
            for event in follow(repo, object_types=types, since_id=latest[0].id if latest else 0,
                                should_stop=_stdout_gone):
                print(show(event), flush=True)
        except KeyboardInterrupt:
            pass
    return 0


def _stdout_gone() -> bool:
    """True once the reader of a piped stdout has exited (``... --follow | head -1``), so a quiet
    follower ends instead of waiting for an event it would fail to write."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR/POLLHUP are always reported
        return any(mask & (select.POLLERR | select.POLLHUP) for _, mask in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _services(args: argparse.Namespace) -> int:
    from .registry import ServiceRegistry

    registry = ServiceRegistry()
    if args.action == "list":
        for name, backends in sorted(registry.load().items()):
            print(f"{name}: " + ", ".join(b.addr + (" (leader)" if b.leader else "") for b in backends))
        return 0
    if not args.service or not args.addr:
        print(f"router services {args.action}: SERVICE and ADDR (host:port) are required", file=sys.stderr)
        return 2
    if args.action == "register":
        try:
            registry.register(args.service, args.addr, leader=args.leader)
        except ValueError as exc:
            print(f"router services register: {exc}", file=sys.stderr)
            return 2
    else:
        registry.unregister(args.service, args.addr)
    return 0
