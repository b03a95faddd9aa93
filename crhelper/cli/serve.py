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

DESCRIPTION = (
    "Serve a provider over HTTP for ROS `web:` ServiceTokens. Requests to a path ending in /sync are "
    "answered in-band (web[sync]: tokens, FAILED after --sync-within seconds); all others are acknowledged "
    "at once and handled by a bounded worker pool that answers the request's ResponseURL (web: tokens). "
    f"Secrets come from the environment: {ENV_SIGN_KEY} (HttpConfig.SignKey; enables signature checks), "
    f"{ENV_BEARER_TOKEN} (require 'Authorization: Bearer <token>'), {ENV_BASIC_AUTH} (user:password)."
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
    parser.add_argument("--public-url", default=None, metavar="URL", help="the ServiceToken URL prefix clients use (signatures cover it; needed behind proxies)")
    parser.add_argument("--signed-header", action="append", default=[], metavar="NAME", help="an HttpConfig.Headers name that ROS signs; repeat for each")
    parser.add_argument("--max-skew", type=float, default=DEFAULT_MAX_SKEW, metavar="SECONDS", help=f"accepted clock difference of Signature.Date (default {DEFAULT_MAX_SKEW:g})")
    parser.add_argument("--signature-variant", default="", metavar="SPEC", help="unconfirmed parts of the SignKey algorithm, e.g. digest=sha1-append,md5=base64,json=compact,key=hex")
    parser.add_argument("--mns-cert-host", action="append", default=[], metavar="HOST", help="host allowed to serve the MNS signing certificate for pushes to /mns (default mnstest.oss-cn-hangzhou.aliyuncs.com); repeat for each")
    parser.add_argument("--mns-allow-http-cert", action="store_true", help="accept an http:// MNS certificate URL (only for a local MNS endpoint)")
    parser.add_argument("--allow-replays", action="store_true", help="do not refuse a signed request whose exact signature was already accepted")


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


def make_server(app: HttpApp, host: str, port: int, threads: int, loop_timeout: float = 1.0) -> Any:
    """A waitress server for `app`, bound but not yet running; `loop_timeout` bounds how long a stop takes."""
    from waitress.server import create_server

    return create_server(
        app,
        host=host,
        port=port,
        threads=threads,
        # Our app answers oversize bodies with a JSON 413; waitress only stops absurd ones.
        max_request_body_size=max(app.config.max_body * 4, 1024 * 1024),
        ident="crhelper",
        asyncore_loop_timeout=loop_timeout,
        clear_untrusted_proxy_headers=True,
    )


class BackgroundServer:
    """`with BackgroundServer(app) as server: requests.post(server.url, ...)`; stops and drains on exit."""

    def __init__(self, app: HttpApp, host: str = "127.0.0.1", port: int = 0, threads: int = 8) -> None:
        self.app = app
        self._server = make_server(app, host, port, threads, loop_timeout=0.05)
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
            for dispatcher in list(server._map.values()):
                dispatcher.close()

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


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def run(args: argparse.Namespace) -> int:
    from ..logs import configure

    configure()
    try:
        config = config_from_args(args)
    except EndpointConfigError as exc:
        print(f"crhelper serve: {exc}", file=sys.stderr)
        return 2
    provider = provider_from_spec(args.provider)
    app = wsgi_app(provider, config=config)
    server = make_server(app, args.host, args.port, args.threads)
    signal.signal(signal.SIGTERM, _raise_exit)
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
    try:
        server.run()  # returns after SIGTERM/SIGINT, once waitress has stopped its threads
    finally:
        app.close(wait=True)
        close = getattr(provider, "close", None)
        if callable(close):  # the provider's scheduler and state store
            close()
        print("crhelper serve: stopped; every accepted request was handled", file=sys.stderr, flush=True)
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
