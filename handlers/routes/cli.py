"""``crhelper router ...``: serve the local router or controller, list routes, list/follow events,
and edit the service registry."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def register(subparsers: "argparse._SubParsersAction[Any]") -> None:
    """Add the ``router`` command and its sub-commands."""
    router = subparsers.add_parser("router", help="local Flynn-style router, routes and events")
    router.set_defaults(func=lambda args: (router.print_help(), 2)[1])
    sub = router.add_subparsers(dest="router_command")

    serve = sub.add_parser("serve", help="run the reverse proxy (HTTP and TCP routes)")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=int(os.environ.get("CRHELPER_ROUTER_HTTP_PORT", "8080")),
                       help="HTTP listen port (default $CRHELPER_ROUTER_HTTP_PORT or 8080)")
    serve.add_argument("--https-port", type=int, default=int(os.environ.get("CRHELPER_ROUTER_HTTPS_PORT", "4433")),
                       help="HTTPS listen port, certificates chosen by SNI (default $CRHELPER_ROUTER_HTTPS_PORT or 4433)")
    serve.add_argument("--no-https", action="store_true", help="do not open the HTTPS listener")
    serve.add_argument("--tcp-host", default="127.0.0.1", help="listen address of TCP routes")
    serve.add_argument("--poll", type=float, default=0.2, help="seconds between route-change checks")
    serve.set_defaults(func=_serve)

    controller = sub.add_parser("controller", help="serve the Flynn controller route API locally")
    controller.add_argument("--host", default="127.0.0.1")
    controller.add_argument("--port", type=int, default=8081)
    controller.set_defaults(func=_controller)

    routes = sub.add_parser("routes", help="list live routes, newest first")
    routes.add_argument("--app", help="only this app (name or id)")
    routes.add_argument("--json", action="store_true", help="print Flynn route JSON")
    routes.set_defaults(func=_routes)

    events = sub.add_parser("events", help="list route events; --follow keeps printing new ones")
    events.add_argument("--follow", action="store_true")
    events.add_argument("--count", type=int, default=20)
    events.add_argument("--all-types", action="store_true", help="include app events")
    events.add_argument("--json", action="store_true")
    events.set_defaults(func=_events)

    services = sub.add_parser("services", help="show or edit the local service registry")
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


def _serve(args: argparse.Namespace) -> int:
    import asyncio

    from .proxy import Router, serve_forever
    from .registry import ServiceRegistry
    from .sticky import CookieSealer, load_key

    router = Router(_repo(), ServiceRegistry(), CookieSealer(load_key()), host=args.host,
                    http_port=args.port, tcp_host=args.tcp_host, poll_interval=args.poll,
                    https_port=None if args.no_https else args.https_port)
    print(f"router: http://{args.host}:{args.port} (Ctrl-C to stop)", file=sys.stderr)
    try:
        asyncio.run(serve_forever(router))
    except KeyboardInterrupt:
        pass
    return 0


def _controller(args: argparse.Namespace) -> int:
    from aiohttp import web

    from .controller import Controller, parse_keys

    keys = parse_keys(os.environ.get("CRHELPER_FLYNN_KEY", ""), os.environ.get("CRHELPER_FLYNN_KEY_IDS", ""))
    if not keys:
        print("router controller: set CRHELPER_FLYNN_KEY (comma-separated keys)", file=sys.stderr)
        return 2
    web.run_app(Controller(_repo(), keys).app(), host=args.host, port=args.port, print=None)
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

    repo = _repo()
    types = () if args.all_types else ROUTE_EVENT_TYPES
    past = list(reversed(repo.list_events(object_types=types, count=args.count)))
    show = event_json if args.json else format_event
    for event in past:
        print(show(event), flush=True)
    if args.follow:
        try:
            for event in follow(repo, object_types=types, since_id=past[-1].id if past else 0):
                print(show(event), flush=True)
        except KeyboardInterrupt:
            pass
    return 0


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
        registry.register(args.service, args.addr, leader=args.leader)
    else:
        registry.unregister(args.service, args.addr)
    return 0
