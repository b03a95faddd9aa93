"""`crhelper deploy`: the parser (standard library only); the body is `crhelper.cli.deploy`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import Body, add_command, provider_argument

if TYPE_CHECKING:
    from . import SubParsers

DESCRIPTION = (
    "Create or update a provider's Function Compute function so ROS can reach it, and print its\n"
    "ServiceToken. FC 3.0 (default; alibabacloud-fc20230330): the function. FC 2.0 (--fc-version 2; fc2):\n"
    "the service and the function. Either way its environment (CRHELPER_PROVIDER, CRHELPER_STORE from\n"
    "--store), its async configuration, the time trigger that resumes abandoned operations (--timer;\n"
    "'none' removes it) and, with --mns-topic, an MNS topic trigger.\n\n"
    "The code is --zip (from `crhelper package`) or built as `crhelper package` builds it. Unchanged\n"
    "code (same CRC-64 as FC's codeChecksum) is not uploaded. A zip over FC's 100 MB call limit (or any,\n"
    "with --code-upload oss) is put in the --oss bucket through OSS's S3-compatible API, named by its\n"
    "CRC-64, and FC reads it from there (up to 500 MB). A second deploy of the same inputs\n"
    "changes nothing and says so. Triggers deploy created (its mark in their description) and no\n"
    "longer wants are deleted; nothing else is touched.\n\n"
    "Credentials as the Alibaba tools find them: --profile (~/.aliyun/config.json, modes AK and\n"
    "StsToken), else ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET (+ _SECURITY_TOKEN), else the config file's\n"
    "current profile. Region: --region, ALIBABA_CLOUD_REGION_ID, or the profile's. --endpoint host:port\n"
    "deploys to a local Function Compute (python -m crhelper.local.fc_server). Exit 0 when deployed,\n"
    "2 when not (the error says what to do next). With --json, stdout is one JSON document."
)
EPILOG = """\
examples:
  crhelper deploy samples/greeting.py:provider --region cn-hangzhou --account-id 123456789
  crhelper deploy routes --fc-version 2 --service crhelper --store s3://bucket/state?endpoint=...
  crhelper deploy mypkg.cluster:provider --zip cluster.zip --timer '0 */10 * * * *' --mns-topic ros-events \\
      --invocation-role acs:ram::123456789:role/mns-invoke-fc
  crhelper deploy samples/greeting.py:provider --zip greeting.zip --endpoint 127.0.0.1:9000 --account-id 1
  crhelper deploy mypkg.big:provider --zip big.zip --oss oss://my-code-bucket/fc/ --region cn-hangzhou  # > 100 MB
"""


def register(subparsers: SubParsers) -> None:
    parser = add_command(subparsers, "deploy", "create or update a provider's Function Compute function (FC 3.0 or 2.0)",
                         DESCRIPTION, EPILOG)
    provider_argument(parser)
    parser.add_argument("--fc-version", choices=("3", "2"), default="3", help="FC API version (default 3)")
    parser.add_argument("--function", default=None, metavar="NAME", help="function name (default: from the provider)")
    parser.add_argument("--service", default="crhelper", metavar="NAME", help="FC 2.0 service (default crhelper)")
    parser.add_argument("--zip", type=Path, default=None, metavar="F.zip",
                        help="the code package (default: build it as `crhelper package` does)")
    parser.add_argument("--runtime", choices=("python3.10", "python3.12"), default=None,
                        help="FC runtime (default python3.12 on FC 3.0, python3.10 on FC 2.0, which has no python3.12)")
    parser.add_argument("--oss", default=None, metavar="URL",
                        help="where code too big for the call goes: oss://BUCKET/PREFIX (OSS of --region; the bucket "
                             "must be in the function's region) or s3://BUCKET/PREFIX?endpoint=... (as CRHELPER_STORE)")
    parser.add_argument("--code-upload", choices=("auto", "direct", "oss"), default="auto",
                        help="how the code reaches FC: auto (default: in the call up to FC's 100 MB, through --oss "
                             "above), direct (always in the call), oss (always through --oss)")
    parser.add_argument("--memory", type=int, default=256, metavar="MB", help="memory size (default 256)")
    parser.add_argument("--timeout", type=int, default=300, metavar="S", help="function timeout (default 300)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="another environment variable of the function (repeatable)")
    parser.add_argument("--store", default=None, metavar="URL", help="CRHELPER_STORE of the function, e.g. s3://...")
    parser.add_argument("--timer", default="@every 5m", metavar="EXPR",
                        help="schedule of the resume trigger: '@every 5m' (default) or six-field cron in UTC; "
                             "'none' for no timer (an existing one is removed)")
    parser.add_argument("--mns-topic", default=None, metavar="NAME", help="add an MNS topic trigger on this topic")
    parser.add_argument("--invocation-role", default=None, metavar="ARN",
                        help="the role MNS invokes the function with (trusted by mns.aliyuncs.com)")
    parser.add_argument("--role", default=None, metavar="ARN", help="the RAM role of the function (FC 2.0: the service)")
    parser.add_argument("--log", default=None, metavar="PROJECT/LOGSTORE",
                        help="send the function's logs to this SLS project and logstore (FC 2.0: the service's "
                             "logConfig; its role must be allowed to write there), e.g. --log ros-providers/functions")
    parser.add_argument("--region", default=None, help="region, e.g. cn-hangzhou")
    parser.add_argument("--account-id", default=None, help="Alibaba Cloud account ID (or ALIBABA_CLOUD_ACCOUNT_ID)")
    parser.add_argument("--profile", default=None, help="profile of ~/.aliyun/config.json")
    parser.add_argument("--endpoint", default=None, metavar="HOST:PORT", help="a local Function Compute (plain HTTP)")
    parser.add_argument("--find-links", action="append", default=[], metavar="DIR", help="wheels for the build (repeatable)")
    parser.add_argument("--no-index", action="store_true", help="build with --find-links only")
    parser.add_argument("--no-bytecode", action="store_true", help="build source only (no __pycache__)")
    parser.add_argument("--json", action="store_true", help="print the result (or the error) as one JSON document")
    parser.set_defaults(func=Body("crhelper.cli.deploy:run", extra="fc"))
