"""The bodies of ``crhelper router ...`` (the parsers are in ``handlers.routes.cli``)."""

from __future__ import annotations

import argparse
import json
import os
import select
import sys

from aiohttp import web

from crhelper.config import env_port

from . import errors as E
from .backends import RouterConfig
from .controller import Controller, parse_keys
from .events import ROUTE_EVENT_TYPES, event_json, follow, format_event
from .proxy import Router, default_certificate_from_env, event_loop_runner, serve_forever, worker_count
from .registry import ServiceRegistry
from .repository import RouteRepository
from .sticky import CookieSealer, load_key


def _repo() -> RouteRepository:
    config = RouterConfig.from_env()
    return RouteRepository(config.db_path, default_domain=config.default_domain)


def _port(given: int | None, flag: str, env_name: str, default: int) -> int:
    """The flag's value (0: any free port), else the environment variable, else the default."""
    if given is None:
        return env_port(os.environ, env_name, default)  # the public port routes report: 1-65535
    if not 0 <= given <= 65535:
        raise ValueError(f"{flag}: must be a port number 0-65535")
    return given


def serve(args: argparse.Namespace) -> int:
    try:
        http_port = _port(args.port, "--port", "CRHELPER_ROUTER_HTTP_PORT", 8080)
        https_port = None if args.no_https else _port(args.https_port, "--https-port", "CRHELPER_ROUTER_HTTPS_PORT", 4433)
        cookie_key = load_key()
        sealer = CookieSealer(cookie_key)
        repo = _repo()  # reads the router's environment too: a bad value is a usage error, not a traceback
        if args.engine != "haproxy":
            workers = worker_count()
            default_certificate = default_certificate_from_env()
    except (ValueError, OSError) as exc:  # OSError: a default certificate file that cannot be read
        print(f"router serve: {exc}", file=sys.stderr)
        return 2
    if args.engine == "haproxy":
        return _serve_haproxy(args, repo, cookie_key=cookie_key, http_port=http_port, https_port=https_port)
    router = Router(repo, ServiceRegistry(), sealer, host=args.host, http_port=http_port,
                    tcp_host=args.tcp_host, poll_interval=args.poll, https_port=https_port,
                    workers=workers, default_certificate=default_certificate)

    def ready() -> None:
        tls = f", https://{args.host}:{router.https_port}" if router.https_port is not None else ""
        print(f"router: http://{args.host}:{router.http_port}{tls} (Ctrl-C to stop)", file=sys.stderr, flush=True)

    try:
        event_loop_runner()(serve_forever(router, on_ready=ready))
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the listen address is taken or not ours
        wanted = f"{args.host}:{http_port}" + (f" / {https_port}" if https_port is not None else "")
        print(f"router serve: cannot listen on {wanted}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def _serve_haproxy(args: argparse.Namespace, repo: RouteRepository, *, cookie_key: bytes, http_port: int,
                   https_port: int | None) -> int:
    """``--engine haproxy``: run HAProxy until SIGTERM/Ctrl-C, or until it dies."""
    from crhelper.signals import stop_requested

    from .engine_haproxy import HAProxyEngine, HAProxyError

    engine = HAProxyEngine(repo, ServiceRegistry(), cookie_key, host=args.host, http_port=http_port,
                           https_port=https_port, tcp_host=args.tcp_host, poll_interval=args.poll,
                           haproxy=args.haproxy)
    with stop_requested() as stop:
        try:
            engine.start()
        except HAProxyError as exc:
            print(f"router serve: {exc}", file=sys.stderr)
            return 1
        try:
            tls = f", https://{args.host}:{engine.https_port}" if engine.https_port is not None else ""
            if tls and not (engine.applied and engine.applied.certificates):
                tls += " once a route has a certificate"
            print(f"router: http://{args.host}:{engine.http_port}{tls} through HAProxy (Ctrl-C to stop)",
                  file=sys.stderr, flush=True)
            while not stop.wait(0.5):
                if not engine.alive():
                    print(f"router serve: haproxy exited: {engine.log_tail()}", file=sys.stderr)
                    return 1
        finally:
            engine.stop()
    return 0


def controller(args: argparse.Namespace) -> int:
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


def routes(args: argparse.Namespace) -> int:
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


def events(args: argparse.Namespace) -> int:
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
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR/POLLHUP are always reported
        return any(mask & (select.POLLERR | select.POLLHUP) for _, mask in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def services(args: argparse.Namespace) -> int:
    registry = ServiceRegistry()
    if args.action == "list":
        services = registry.load()
        if not services:
            print("router services: none registered; next: crhelper router services register SERVICE HOST:PORT",
                  file=sys.stderr)
        for name, backends in sorted(services.items()):
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
