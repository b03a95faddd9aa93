"""`crhelper serve`: the parser (standard library only); the body is `crhelper.cli.serve`.

The command's own defaults live here; the endpoint's (sync deadline, body limit, clock skew,
the secret variables) live in `crhelper.transports`: their options default to None, so the
endpoint's defaults apply, and the help text quotes them (`tests/core/test_core_cli_shape.py`
checks the quotes against the constants).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from . import Body, add_command, provider_argument

if TYPE_CHECKING:
    from . import SubParsers

#: Seconds running handlers may still take after SIGTERM (ROS waits much longer; orchestrators kill at ~30).
DEFAULT_GRACE = 20.0
#: waitress accepts 100 connections by default; 110 idle clients then starve every real request.
#: The poll() loop (not select()) is used, so this may exceed 1,024 descriptors.
DEFAULT_CONNECTION_LIMIT = 1000
#: waitress keeps an idle or half-sent connection 120 s by default; ROS sends a whole request at once.
DEFAULT_CHANNEL_TIMEOUT = 30.0
DEFAULT_CLEANUP_INTERVAL = 5.0

#: Quoted from crhelper.transports.http_config and .signature (see the module docstring).
SIGN_KEY_ENV, BEARER_TOKEN_ENV, BASIC_AUTH_ENV = "CRHELPER_HTTP_SIGN_KEY", "CRHELPER_HTTP_BEARER_TOKEN", "CRHELPER_HTTP_BASIC_AUTH"
SHOWN_SYNC_WITHIN, SHOWN_MAX_BODY, SHOWN_MAX_SKEW = 8.5, 64 * 1024, 300.0
SHOWN_BACKLOG, SHOWN_QUEUE_BYTES, SHOWN_START_WITHIN = 10_000, 64 * 1024 * 1024, 30.0

DESCRIPTION = (
    "Serve a provider over HTTP for ROS `web:` ServiceTokens. Requests to a path ending in /sync are "
    "answered in-band (web[sync]: tokens, FAILED after --sync-within seconds); all others are acknowledged "
    "at once and queued for a pool of workers that answers the request's ResponseURL (web: tokens); one that "
    "could not start within --start-within seconds is answered FAILED there instead (a plain web: Create is "
    "never retried by ROS, so it is never just refused). "
    f"Secrets come from the environment: {SIGN_KEY_ENV} (HttpConfig.SignKey; enables signature checks), "
    f"{BEARER_TOKEN_ENV} (require 'Authorization: Bearer <token>'), {BASIC_AUTH_ENV} (user:password). "
    f"With {SIGN_KEY_ENV}, --public-url is required (signatures cover the ServiceToken URL; the Host header "
    "can be spoofed). SIGTERM/SIGINT stop accepting, give running handlers --grace seconds, answer FAILED for "
    "async requests still running, and exit 0. At start, operations a killed predecessor left in the state "
    "store (CRHELPER_STORE) are resumed at once."
)
EPILOG = (
    "example: crhelper serve samples/greeting.py:provider --port 8080 --public-url https://cr.example.com  "
    "then use ServiceToken web:https://cr.example.com/ or web[sync]:https://cr.example.com/sync"
)


def register(subparsers: SubParsers) -> None:
    add_arguments(add_command(subparsers, "serve", "serve a provider over HTTP(S) for web: and web[sync]: ServiceTokens",
                              DESCRIPTION, EPILOG, argparse.HelpFormatter))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    provider_argument(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on; 0 picks a free one (default 8080)")
    parser.add_argument("--threads", type=int, default=16, help="HTTP server threads; each sync request holds one (default 16)")
    parser.add_argument("--workers", type=int, default=8, help="background handler threads for async requests (default 8)")
    parser.add_argument("--backlog", type=int, default=None, metavar="N", help=f"accepted async requests that may wait for a worker (a memory bound); beyond, --overload-status without an answer (default {SHOWN_BACKLOG})")
    parser.add_argument("--queue-bytes", type=int, default=None, metavar="BYTES", help=f"request bodies that may wait for a worker, in bytes (default {SHOWN_QUEUE_BYTES})")
    parser.add_argument("--start-within", type=float, default=None, metavar="SECONDS", help=f"an async request that waited longer for a worker is answered FAILED at its ResponseURL, once, instead of run (default {SHOWN_START_WITHIN:g}; ROS waits Timeout, 60 s by default); e.g. --start-within 20")
    parser.add_argument("--mode", choices=("async", "sync"), default="async", help="mode for paths not ending in /sync (default async)")
    parser.add_argument("--sync-within", type=float, default=None, metavar="SECONDS", help=f"answer FAILED if a sync handler runs longer (default {SHOWN_SYNC_WITHIN}; ROS waits 10)")
    parser.add_argument("--inline", action="store_true", help="async mode: run the handler before acknowledging (no background pool)")
    parser.add_argument("--ack-status", type=int, default=200, help="status of the async acknowledgement (default 200)")
    parser.add_argument("--overload-status", type=int, default=500, help="status when the queue is full (--backlog, --queue-bytes) or the server stops; ROS documents retries after 500 (default 500)")
    parser.add_argument("--max-body", type=int, default=None, metavar="BYTES", help=f"largest request body accepted, else 413 (default {SHOWN_MAX_BODY})")
    parser.add_argument("--public-url", default=None, metavar="URL", help=f"the ServiceToken URL prefix clients use; signatures cover it, so it is required with {SIGN_KEY_ENV} (the Host header can be spoofed); e.g. --public-url https://cr.example.com/ros")
    parser.add_argument("--signed-header", action="append", default=[], metavar="NAME", help="an HttpConfig.Headers name that ROS signs; repeat for each")
    parser.add_argument("--max-skew", type=float, default=None, metavar="SECONDS", help=f"accepted clock difference of Signature.Date (default {SHOWN_MAX_SKEW:g})")
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
    parser.set_defaults(func=Body("crhelper.cli.serve:run", extra="serve"))
