"""`crhelper serve`: run a provider as an HTTP endpoint for `web:` ServiceTokens on waitress.

`BackgroundServer` runs the same thing in a thread, for tests and the local emulator. The parser
(and the command's defaults) is `crhelper.cli.parsers.serve`.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Any, Sequence

from waitress.server import create_server

from ..loading import ProviderSpecError
from ..logs import configure, get_logger
from ..signals import on_signals
from ..transports.http import HttpApp, wsgi_app
from ..transports.http_config import ENV_SIGN_KEY, EndpointConfig, EndpointConfigError
from ..transports.signature import SignatureVariant
from . import provider_spec
from .parsers.serve import (
    DEFAULT_CHANNEL_TIMEOUT,
    DEFAULT_CLEANUP_INTERVAL,
    DEFAULT_CONNECTION_LIMIT,
    DEFAULT_GRACE,
    DESCRIPTION,
    EPILOG,
    add_arguments,
    register,
)

if TYPE_CHECKING:
    from ..transports.hosted import HostedProvider

__all__ = ["DEFAULT_GRACE", "BackgroundServer", "config_from_args", "main", "make_server", "register", "run"]

_log = get_logger("serve")


def config_from_args(args: argparse.Namespace) -> EndpointConfig:
    """The endpoint settings from the command line plus secrets from the environment."""
    try:
        variant = SignatureVariant.named(args.signature_variant)
    except ValueError as exc:
        raise EndpointConfigError(f"--signature-variant: {exc}") from None
    # Options the command line leaves unset keep the endpoint's own defaults.
    optional = {key: value for key, value in (("sync_within", args.sync_within), ("max_body", args.max_body),
                                              ("max_skew", args.max_skew), ("backlog", args.backlog),
                                              ("queue_bytes", args.queue_bytes), ("start_within", args.start_within))
                if value is not None}
    config = EndpointConfig(
        mode=args.mode,
        workers=args.workers,
        inline=args.inline,
        ack_status=args.ack_status,
        overload_status=args.overload_status,
        public_url=args.public_url,
        signed_headers=tuple(args.signed_header),
        signature_variant=variant,
        reject_replays=not args.allow_replays,
        mns_require_https=not args.mns_allow_http_cert,
        mns_cert_hosts=tuple(args.mns_cert_host) if args.mns_cert_host else EndpointConfig.mns_cert_hosts,
        **optional,
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
    """A waitress server for `app` (typed Any: waitress has no type hints), bound but not yet
    running; `loop_timeout` bounds how long a stop takes.

    Connection settings are deliberate (waitress's defaults let 100 idle connections lock everyone
    out for 2 minutes): many connections, closed when idle or half-sent for `channel_timeout`."""
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
    try:  # a platform guard: POSIX only
        import resource
    except ImportError:
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


def start_recovery(provider: "HostedProvider") -> threading.Thread:
    """Resume, in the background, operations a killed predecessor left in the store (and start the
    provider's periodic recovery), instead of waiting for some unrelated request to do it."""

    def run() -> None:
        try:
            answered = provider.recover(limit=50)
            if answered:
                _log.info("resumed operations left by a previous process", extra={"fields": {"answered": answered}})
        except Exception:  # noqa: BLE001 - recovery must not stop the server; the periodic one retries
            _log.exception("recovery at startup failed")

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
        _log.warning("answered FAILED: async requests still running after the grace period",
                    extra={"fields": {"answered": answered, "grace": grace}})
    time.sleep(0.1)  # let waitress flush replies just written
    try:
        server.trigger.pull_trigger(lambda: _close_all(server))
    except OSError:
        _close_all(server)
    requested.set()


def run(args: argparse.Namespace) -> int:
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
    provider = provider_spec.load(args.provider)
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

    checks = ", ".join(
        name
        for name, on in (("signature", config.sign_key), ("bearer", config.bearer_token), ("basic", config.basic_auth))
        if on
    )
    with on_signals(on_signal):  # SIGTERM, SIGINT: installed before "listening" is announced
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
            closer = threading.Thread(target=provider.close, name="crhelper-close", daemon=True)
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
