"""`crhelper worker`: the parser (standard library only); the body is `crhelper.cli.worker`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from . import Body, add_command, provider_argument

if TYPE_CHECKING:
    from . import SubParsers

DESCRIPTION = (
    "Long-poll an MNS queue with aliyun-mns-sdk and answer each ROS request it carries. A message is "
    "deleted only after its response reached the ResponseURL (or when nothing is left to send); while a "
    "handler runs its visibility is extended; a message whose response could not be delivered stays for "
    "redelivery, and undecodable messages are deleted and logged. Long-running handlers (InProgress) "
    "continue through delayed messages on the same queue unless CRHELPER_REENTRY says otherwise; use a "
    "shared CRHELPER_STORE when several workers consume one queue. A response the ResponseURL rejects for "
    "good (a final 4xx) deletes its message with an error log; a duplicate of a request in flight elsewhere "
    "stays hidden until the holder's lease could have lapsed. SIGTERM/SIGINT finish in-flight messages (up to "
    "--grace seconds), make the ones still running visible again within seconds, and exit 0. At start, "
    "operations a killed worker left in the store are resumed at once. "
    "Credentials come from ALIBABA_CLOUD_ACCESS_KEY_ID, "
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET and, for STS, ALIBABA_CLOUD_SECURITY_TOKEN."
)
EPILOG = """examples:
  crhelper worker samples/greeting.py:provider --queue acs:mns:cn-hangzhou:123456789:queues/ros-requests
      (endpoint derived: https://123456789.mns.cn-hangzhou.aliyuncs.com)
  crhelper worker mypkg.provider:provider --queue ros-requests \\
      --endpoint http://123456789.mns.cn-hangzhou-internal.aliyuncs.com --concurrency 8 --wait-seconds 20
  python -m crhelper.local.mns_server --port 8100   # a local MNS to try it against
"""


def register(subparsers: SubParsers) -> None:
    add_arguments(add_command(subparsers, "worker", "answer ROS requests from an MNS queue (acs:mns:...:queues/<name> ServiceTokens)",
                              DESCRIPTION, EPILOG))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    provider_argument(parser)
    parser.add_argument("--queue", required=True, help="acs:mns:<region>:<account>:queues/<name> ARN, or a queue name with --endpoint")
    parser.add_argument("--endpoint", default=None, help="MNS endpoint, e.g. https://<account>.mns.<region>.aliyuncs.com (derived from an ARN when omitted)")
    parser.add_argument("--concurrency", type=int, default=4, metavar="N", help="messages handled at once (default 4)")
    parser.add_argument("--prefetch", type=int, default=None, metavar="N",
                        help="messages received ahead and waiting for a free thread (kept invisible meanwhile), so "
                             "receives come in full batches of 16 (default min(16, --concurrency); 0 receives only "
                             "for free threads; e.g. --prefetch 8)")
    parser.add_argument("--wait-seconds", type=int, default=10, metavar="S", help="long-poll duration, 0-30 (default 10)")
    parser.add_argument("--visibility-timeout", type=int, default=60, metavar="S", help="how long each extension hides a message being handled (default 60)")
    parser.add_argument("--extend-every", type=float, default=None, metavar="S", help="seconds between extensions (default a third of --visibility-timeout)")
    parser.add_argument("--grace", type=float, default=30.0, metavar="S", help="on SIGTERM, how long in-flight messages may still run; those still running then become "
                             "visible again within seconds for another worker (default 30; e.g. --grace 10)")
    parser.add_argument("--reentry", choices=("queue", "provider"), default="queue",
                        help="long-running operations continue via delayed messages on this queue (default), "
                             "or via the provider's own strategy (CRHELPER_REENTRY)")
    parser.set_defaults(func=Body("crhelper.cli.worker:run"))
