"""`crhelper ros`: the parser (standard library only); the body is `crhelper.cli.ros`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import Body, add_command

if TYPE_CHECKING:
    from . import SubParsers

DESCRIPTION = (
    "The local ROS as ROS users know it. `crhelper ros serve` answers the ROS 2019-09-10 OpenAPI on\n"
    "loopback (CreateStack, UpdateStack, DeleteStack, GetStack, ListStacks, ListStackEvents,\n"
    "ListStackResources, GetStackResource, GetTemplate, ValidateTemplate, PreviewStack, DescribeRegions)\n"
    "for the official SDK (alibabacloud-ros20190910: Config(endpoint='127.0.0.1:PORT', protocol='http')),\n"
    "the aliyun CLI (--endpoint 127.0.0.1:PORT --insecure) and tools built on them, and serves the\n"
    "console at / of the same port (the URL with its token is printed at start).\n\n"
    "Stacks are those of `crhelper stack` (the same --home state): one created through the API is\n"
    "listed by `crhelper stack list` and the other way round. Custom resources reach the providers\n"
    "the --bindings file names (as `crhelper stack --bindings` reads it), over the bindings remembered\n"
    "with each stack.\n\n"
    "Requests must be signed (ACS3-HMAC-SHA256 or RPC HMAC-SHA1) with the access key of --profile\n"
    "(~/.aliyun/config.json), else ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET, else the config file's current\n"
    "profile. Ctrl-C (or SIGTERM) stops serving and waits for running stack operations."
)
EPILOG = """\
examples:
  crhelper ros serve --port 9100 --bindings templates/demo.bindings.yaml
  crhelper ros serve --port 0 --home /tmp/ros-home --json     # one JSON line: endpoint, console URL
  crhelper ros serve --host 0.0.0.0 --allow-remote     # the signed API for other machines; no console
  aliyun ros GetStack --StackId ID --RegionId cn-hangzhou --endpoint 127.0.0.1:9100 --insecure
"""
SERVE_DESCRIPTION = (
    "Serve the ROS 2019-09-10 API and the console on one loopback port until Ctrl-C. Prints the\n"
    "endpoint (host:port for the SDK's Config.endpoint) and the console URL; with --json, one JSON\n"
    "line {\"endpoint\", \"console_url\", \"region\", \"access_key_id\", \"home\"} instead (console_url is\n"
    "null when the console is off).\n\n"
    "A --host that is not a loopback address (127.0.0.0/8, ::1, localhost) is refused unless\n"
    "--allow-remote is given: then other machines reach the API (every call still signed with the\n"
    "access key) and the stacks' providers it runs, and the console is not served at all."
)


def register(subparsers: SubParsers) -> None:
    parser = add_command(subparsers, "ros", "the local ROS's OpenAPI (for the SDK, aliyun CLI, iact3) and console",
                         DESCRIPTION, EPILOG)
    commands = parser.add_subparsers(dest="ros_command", metavar="COMMAND", required=True)
    serve = add_command(commands, "serve", "serve the ROS 2019-09-10 API and the console on loopback",
                        SERVE_DESCRIPTION, EPILOG)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; a non-loopback one needs --allow-remote)")
    serve.add_argument("--allow-remote", action="store_true",
                       help="allow a non-loopback --host: exposes the signed ROS API (and the providers it runs) to "
                            "the network; the console is then not served")
    serve.add_argument("--port", type=int, default=9100, help="port to listen on; 0 picks a free one (default 9100)")
    serve.add_argument("--home", type=Path, default=None, metavar="DIR",
                       help="state folder shared with `crhelper stack` (default $CRHELPER_HOME or ~/.crhelper)")
    serve.add_argument("--region", default="cn-hangzhou", help="the region the endpoint serves (default cn-hangzhou)")
    serve.add_argument("--bindings", type=Path, default=None, metavar="FILE",
                       help="which local provider answers each ServiceToken, e.g. templates/demo.bindings.yaml")
    serve.add_argument("--profile", default=None, help="profile of ~/.aliyun/config.json whose key callers sign with")
    serve.add_argument("--json", action="store_true", help="print the endpoint as one JSON line (for programs)")
    serve.set_defaults(func=Body("crhelper.cli.ros:serve"))
