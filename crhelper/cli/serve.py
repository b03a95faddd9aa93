"""`crhelper serve`: run a provider as an HTTP endpoint for `web:` ServiceTokens on waitress.

`BackgroundServer` runs the same thing in a thread, for tests and the local emulator.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Any, Sequence

from ..fc import ProviderSpecError
from ..transports.http import HttpApp, wsgi_app
from ..transports.http_config import (
    DEFAULT_MAX_BODY,
    DEFAULT_SYNC_WITHIN,
    ENV_BASIC_AUTH,
    ENV_BEARER_TOKEN,
    ENV_SIGN_KEY,
    EndpointConfig,
    EndpointConfigError,
)
from ..transports.signature import DEFAULT_MAX_SKEW, SignatureVariant
from .loading import provider_from_spec

#: Seconds running handlers may still take after SIGTERM (ROS waits much longer; orchestrators kill at ~30).
DEFAULT_GRACE = 20.0
#: waitress accepts 100 connections by default; 110 idle clients then starve every real request.
#: The poll() loop (not select()) is used, so this may exceed 1,024 descriptors.
DEFAULT_CONNECTION_LIMIT = 1000
#: waitress keeps an idle or half-sent connection 120 s by default; ROS sends a whole request at once.
DEFAULT_CHANNEL_TIMEOUT = 30.0
DEFAULT_CLEANUP_INTERVAL = 5.0

DESCRIPTION = (
    "Serve a provider over HTTP for ROS `web:` ServiceTokens. Requests to a path ending in /sync are "
    "answered in-band (web[sync]: tokens, FAILED after --sync-within seconds); all others are acknowledged "
    "at once and handled by a bounded worker pool that answers the request's ResponseURL (web: tokens). "
    f"Secrets come from the environment: {ENV_SIGN_KEY} (HttpConfig.SignKey; enables signature checks), "
    f"{ENV_BEARER_TOKEN} (require 'Authorization: Bearer <token>'), {ENV_BASIC_AUTH} (user:password). "
    f"With {ENV_SIGN_KEY}, --public-url is required (signatures cover the ServiceToken URL; the Host header "
    "can be spoofed). SIGTERM/SIGINT stop accepting, give running handlers --grace seconds, answer FAILED for "
    "async requests still running, and exit 0. At start, operations a killed predecessor left in the state "
    "store (CRHELPER_STORE) are resumed at once."
)
EPILOG = (
    "example: crhelper serve samples/greeting.py:provider --port 8080 --public-url https://cr.example.com  "
    "then use ServiceToken web:https://cr.example.com/ or web[sync]:https://cr.example.com/sync"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a provider over HTTP(S) for web: and web[sync]: ServiceTokens",
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("provider", help="the provider: package.module:provider or path/to/file.py:provider")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on; 0 picks a free one (default 8080)")
    parser.add_argument("--threads", type=int, default=16, help="HTTP server threads; each sync request holds one (default 16)")
    parser.add_argument("--workers", type=int, default=8, help="background handler threads for async requests (default 8)")
    parser.add_argument("--backlog", type=int, default=64, help="accepted async requests that may wait for a worker; beyond, --overload-status (default 64)")
    parser.add_argument("--mode", choices=("async", "sync"), default="async", help="mode for paths not ending in /sync (default async)")
    parser.add_argument("--sync-within", type=float, default=DEFAULT_SYNC_WITHIN, metavar="SECONDS", help=f"answer FAILED if a sync handler runs longer (default {DEFAULT_SYNC_WITHIN}; ROS waits 10)")
    parser.add_argument("--inline", action="store_true", help="async mode: run the handler before acknowledging (no background pool)")
    parser.add_argument("--ack-status", type=int, default=200, help="status of the async acknowledgement (default 200)")
    parser.add_argument("--overload-status", type=int, default=500, help="status when the pool is full; ROS documents retries after 500 (default 500)")
    parser.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY, metavar="BYTES", help=f"largest request body accepted, else 413 (default {DEFAULT_MAX_BODY})")
    parser.add_argument("--public-url", default=None, metavar="URL", help=f"the ServiceToken URL prefix clients use; signatures cover it, so it is required with {ENV_SIGN_KEY} (the Host header can be spoofed); e.g. --public-url https://cr.example.com/ros")
    parser.add_argument("--signed-header", action="append", default=[], metavar="NAME", help="an HttpConfig.Headers name that ROS signs; repeat for each")
    parser.add_argument("--max-skew", type=float, default=DEFAULT_MAX_SKEW, metavar="SECONDS", help=f"accepted clock difference of Signature.Date (default {DEFAULT_MAX_SKEW:g})")
    parser.add_argument("--signature-variant", default="", metavar="SPEC", help="unconfirmed parts of the SignKey algorithm, e.g. digest=sha1-append,md5=base64,json=compact,key=hex")
    parser.add_argument("--mns-cert-host", action="append", default=[], metavar="HOST", help="host allowed to serve the MNS signing certificate for pushes to /mns (default mnstest.oss-cn-hangzhou.aliyuncs.com); repeat for each")
    parser.add_argument("--mns-allow-http-cert", action="store_true", help="accept an http:// MNS certificate URL (only for a local MNS endpoint)")
    parser.add_argument("--allow-replays", action="store_true", help="do not refuse a signed request (or MNS push) whose exact signature was already accepted")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE, metavar="SECONDS",
                        help=f"on SIGTERM/SIGINT stop accepting, let running handlers finish this long, then answer FAILED "
                             f"for async requests still running and exit 0 (default {DEFAULT_GRACE:g}; e.g. --grace 5)")
    parser.add_argument("--connection-limit", type=int, default=DEFAULT_CONNECTION_LIMIT, metavar="N",
                        help=f"open client connections at once; beyond, new ones wait in the kernel's listen queue "
                             f"(default {DEFAULT_CONNECTION_LIMIT}, above waitress's 100 so idle keep-alive clients cannot "
                             f"lock out ROS; e.g. --connection-limit 4000 with a matching ulimit -n)")
    parser.add_argument("--channel-timeout", type=float, default=DEFAULT_CHANNEL_TIMEOUT, metavar="SECONDS",
                        help=f"close a connection idle this long, or one that stopped sending halfway through a request "
                             f"(default {DEFAULT_CHANNEL_TIMEOUT:g}; e.g. --channel-timeout 10)")
    parser.add_argument("--cleanup-interval", type=float, default=DEFAULT_CLEANUP_INTERVAL, metavar="SECONDS",
                        help=f"how often idle connections are looked for (default {DEFAULT_CLEANUP_INTERVAL:g}; "
                             f"e.g. --cleanup-interval 1)")


def config_from_args(args: argparse.Namespace) -> EndpointConfig:
    """The endpoint settings from the command line plus secrets from the environment."""
    try:
        variant = SignatureVariant.named(args.signature_variant)
    except ValueError as exc:
        raise EndpointConfigError(f"--signature-variant: {exc}") from None
    config = EndpointConfig(
        mode=args.mode,
        sync_within=args.sync_within,
        workers=args.workers,
        backlog=args.backlog,
        inline=args.inline,
        ack_status=args.ack_status,
        overload_status=args.overload_status,
        max_body=args.max_body,
        public_url=args.public_url,
        signed_headers=tuple(args.signed_header),
        max_skew=args.max_skew,
        signature_variant=variant,
        reject_replays=not args.allow_replays,
        mns_require_https=not args.mns_allow_http_cert,
        mns_cert_hosts=tuple(args.mns_cert_host) if args.mns_cert_host else EndpointConfig.mns_cert_hosts,
    )
    return config.with_secrets_from_env()


def make_server(
    app: HttpApp,
    host: str,
    port: int,
    threads: int,
    loop_timeout: float = 1.0,
    *,
    connection_limit: int = DEFAULT_CONNECTION_LIMIT,
    channel_timeout: float = DEFAULT_CHANNEL_TIMEOUT,
    cleanup_interval: float = DEFAULT_CLEANUP_INTERVAL,
) -> Any:
    """A waitress server for `app`, bound but not yet running; `loop_timeout` bounds how long a stop takes.

    Connection settings are deliberate (waitress's defaults let 100 idle connections lock everyone
    out for 2 minutes): many connections, closed when idle or half-sent for `channel_timeout`."""
    from waitress.server import create_server

    if connection_limit < 1 or channel_timeout <= 0 or cleanup_interval <= 0:
        raise EndpointConfigError("connection_limit must be at least 1, channel_timeout and cleanup_interval positive")
    return create_server(
        app,
        host=host,
        port=port,
        threads=threads,
        # Our app answers oversize bodies with a JSON 413; waitress only stops absurd ones.
        max_request_body_size=max(app.config.max_body * 4, 1024 * 1024),
        max_request_header_size=64 * 1024,
        ident="crhelper",
        asyncore_loop_timeout=loop_timeout,
        asyncore_use_poll=True,  # select() fails beyond 1,024 descriptors
        connection_limit=connection_limit,
        channel_timeout=channel_timeout,
        cleanup_interval=cleanup_interval,
        backlog=max(1024, min(connection_limit, 4096)),
        clear_untrusted_proxy_headers=True,
    )


def _close_all(server: Any) -> None:
    """Close the listener, every open connection and the trigger (run it in the loop thread)."""
    for dispatcher in list(server._map.values()):
        dispatcher.close()


def _stop_accepting(server: Any) -> None:
    """Close only the listening socket: connections already open keep being served."""
    try:
        server.close()  # the listener is the server dispatcher itself
    except OSError:
        pass


def _waitress_busy(server: Any) -> int:
    """Requests waitress is still running or has queued (sync requests hold these)."""
    dispatcher = server.task_dispatcher
    return int(getattr(dispatcher, "active_count", 0)) + len(getattr(dispatcher, "queue", ()))


def ensure_descriptors(connection_limit: int, spare: int = 64) -> str | None:
    """Raise the soft open-files limit to fit `connection_limit` connections if the hard limit allows;
    a warning when it cannot (accept() would then fail with EMFILE before the limit is reached)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = connection_limit + spare
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        target = soft
    if target < needed:
        return (f"open-files limit {target} is below --connection-limit {connection_limit} + {spare}; "
                f"raise ulimit -n or lower --connection-limit")
    return None


def start_recovery(provider: Any) -> threading.Thread | None:
    """Resume, in the background, operations a killed predecessor left in the store (and start the
    provider's periodic recovery), instead of waiting for some unrelated request to do it."""
    recover = getattr(provider, "recover", None)
    if not callable(recover):
        return None

    def run() -> None:
        from ..logs import get_logger

        try:
            answered = recover(limit=50)
            if answered:
                get_logger("serve").info("resumed operations left by a previous process", extra={"fields": {"answered": answered}})
        except Exception:  # noqa: BLE001 - recovery must not stop the server; the periodic one retries
            get_logger("serve").exception("recovery at startup failed")

    thread = threading.Thread(target=run, name="crhelper-recover", daemon=True)
    thread.start()
    return thread


class BackgroundServer:
    """`with BackgroundServer(app) as server: requests.post(server.url, ...)`; stops and drains on exit."""

    def __init__(self, app: HttpApp, host: str = "127.0.0.1", port: int = 0, threads: int = 8, **limits: Any) -> None:
        self.app = app
        self._server = make_server(app, host, port, threads, loop_timeout=0.05, **limits)
        if app.config.sign_key is not None and not app.config.public_url:
            # Signatures cover the ServiceToken URL; this server knows the one it is reached at.
            app.set_public_url(self.url)
        self._thread = threading.Thread(target=self._server.run, name="crhelper-serve", daemon=True)
        self._stopped = False

    @property
    def url(self) -> str:
        return f"http://{self._server.effective_host}:{self._server.effective_port}"

    def start(self) -> "BackgroundServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close every connection, stop the server threads, then let accepted handlers finish. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        server = self._server

        def close_all() -> None:  # listener, open connections and the trigger
            _close_all(server)

        pulled = False
        if self._thread.is_alive():
            try:
                server.trigger.pull_trigger(close_all)  # runs in the loop thread, which then ends
                pulled = True
            except OSError:  # the loop already closed its trigger on its way out
                pass
            self._thread.join(5)
        if not pulled:
            close_all()
        server.task_dispatcher.shutdown()
        self.app.close(wait=True)

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _shutdown(server: Any, app: HttpApp, grace: float, requested: threading.Event) -> None:
    """After SIGTERM: stop accepting, give running handlers `grace` seconds, answer FAILED for async
    requests still running, then end the loop (which returns from server.run())."""
    import time

    from ..logs import get_logger

    log = get_logger("serve")
    deadline = time.monotonic() + max(0.0, grace)
    app.stop_accepting()
    try:
        server.trigger.pull_trigger(lambda: _stop_accepting(server))
    except OSError:
        pass
    while time.monotonic() < deadline and (app.busy() or _waitress_busy(server)):
        time.sleep(0.05)
    answered = app.close(wait=True, grace=max(0.0, deadline - time.monotonic()))
    if answered:
        log.warning("answered FAILED: async requests still running after the grace period",
                    extra={"fields": {"answered": answered, "grace": grace}})
    time.sleep(0.1)  # let waitress flush replies just written
    try:
        server.trigger.pull_trigger(lambda: _close_all(server))
    except OSError:
        _close_all(server)
    requested.set()


def run(args: argparse.Namespace) -> int:
    import os
    import time

    from ..logs import configure

    configure()
    try:
        config = config_from_args(args)
        if config.sign_key is not None and not config.public_url:
            raise EndpointConfigError(
                f"{ENV_SIGN_KEY} is set but --public-url is not: signatures cover the ServiceToken URL, and without "
                "--public-url it would come from the Host header, which any client may spoof. Set --public-url to the "
                "URL prefix of the ServiceToken, e.g. --public-url https://cr.example.com"
            )
        if args.grace < 0:
            raise EndpointConfigError("--grace: must not be negative")
    except EndpointConfigError as exc:
        print(f"crhelper serve: {exc}", file=sys.stderr)
        return 2
    provider = provider_from_spec(args.provider)
    app = wsgi_app(provider, config=config)
    try:
        server = make_server(app, args.host, args.port, args.threads, connection_limit=args.connection_limit,
                             channel_timeout=args.channel_timeout, cleanup_interval=args.cleanup_interval)
    except EndpointConfigError as exc:
        print(f"crhelper serve: {exc}", file=sys.stderr)
        return 2
    warning = ensure_descriptors(args.connection_limit)
    if warning:
        print(f"crhelper serve: warning: {warning}", file=sys.stderr, flush=True)
    stopped = threading.Event()
    stopping: list[threading.Thread] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stopping:
            return
        print(f"crhelper serve: stopping (signal {signum}): no new connections, running handlers have "
              f"{args.grace:g} s", file=sys.stderr, flush=True)
        thread = threading.Thread(target=_shutdown, args=(server, app, args.grace, stopped), name="crhelper-shutdown",
                                  daemon=True)
        stopping.append(thread)
        thread.start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    checks = ", ".join(
        name
        for name, on in (("signature", config.sign_key), ("bearer", config.bearer_token), ("basic", config.basic_auth))
        if on
    )
    print(
        f"crhelper serve: listening on http://{server.effective_host}:{server.effective_port} "
        f"(default mode {config.mode}, sync path suffix {config.sync_suffix}, checks: {checks or 'none'})",
        file=sys.stderr,
        flush=True,
    )
    start_recovery(provider)
    try:
        server.run()  # returns once the shutdown thread closed every dispatcher
    finally:
        if not stopped.is_set():
            app.close(wait=True, grace=args.grace)
        server.task_dispatcher.shutdown(timeout=1)
        closer = threading.Thread(target=getattr(provider, "close", lambda: None), name="crhelper-close", daemon=True)
        closer.start()  # the provider's scheduler and state store; a continuation step may be mid-way
        closer.join(max(1.0, min(5.0, args.grace)))
        print("crhelper serve: stopped; every accepted request was handled", file=sys.stderr, flush=True)
    lingering = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if lingering:
        # A handler that never returns (in the provider's own threads) must not keep the process alive:
        # its operation is in the store, and the next process resumes it.
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(0)
        os._exit(0)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m crhelper.cli.serve ...`: the same command without the `crhelper` front end."""
    parser = argparse.ArgumentParser(prog="crhelper serve", description=DESCRIPTION, epilog=EPILOG)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (ProviderSpecError, ImportError, FileNotFoundError) as exc:
        print(f"crhelper serve: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
