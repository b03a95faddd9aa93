"""``crhelper appcenter ...``: check, render and plan QingCloud AppCenter packages, for package authors.

Registered through the ``crhelper.commands`` entry point. Importing this module costs only the
standard library (``crhelper --help`` builds every command's parser); the bodies are in
``handlers.appcenter.commands``, imported when a sub-command runs.
"""

from __future__ import annotations

import argparse
import functools
from typing import TYPE_CHECKING

from crhelper.cli.parsers import Body, add_command

if TYPE_CHECKING:
    from crhelper.cli.parsers import SubParsers

DESCRIPTION = """\
QingCloud AppCenter application packages (what Custom::AppCluster deploys): a folder, a .zip, a
.tar.gz, or an oss://bucket/key (s3://) object holding config.json, cluster.json.mustache and the
optional replace_policy.json and locale/*.json. validate checks the files, the form and the
values you give, render prints the cluster definition filled with them, plan shows the lifecycle
steps an operation runs (service, role, nodes, order, what runs in parallel).

Values are the form's defaults, then the --resource-group preset, then each --set (a dotted path as
in the template's tags, e.g. env.web.console.enabled=true, converted to the entry's type), then the
--zone's replace_policy.

Exit status: 0 valid, 1 invalid (every problem is listed), 2 an unreadable package or a usage
error. Each sub-command has its own --help."""

EPILOG = """\
examples:
  crhelper appcenter validate ../shared/appcenter/etcd
  crhelper appcenter validate app.zip --set cluster.etcd_node.count=5 --zone pek3a
  crhelper appcenter render ../shared/appcenter/zookeeper --set env.tickTime=3000 | jq .env
  crhelper appcenter plan ../shared/appcenter/etcd --operation create
  crhelper appcenter plan ../shared/appcenter/etcd --operation scale-out --role etcd_node --count 2 --json
"""

VALIDATE_DESCRIPTION = """\
Check a package with the values given: the files (UTF-8 without BOM, JSON), config.json (every
entry's attributes and type), the values (type, range, multichoice, min/max/step, pattern,
required, dependencies, presets, QingCloud's role value sets), the template (known paths, plain
{{path}} tags only), and the rendered cluster (roles, counts, services, health_check, monitor,
display_tabs and their bounds). Every problem is listed, each naming the file or item path and
the rule; warnings do not make a package invalid."""
VALIDATE_EPILOG = """\
examples:
  crhelper appcenter validate ../shared/appcenter/redis-standalone
  crhelper appcenter validate pkg.tar.gz --set env.admin_username=admin --json | jq '.Problems[].Rule'
"""

RENDER_DESCRIPTION = """\
Print the cluster definition (cluster.json.mustache filled with the values, as JSON) on stdout.
An invalid package prints its problems on stderr instead (with --json: a JSON document on stdout)
and exits 1."""
RENDER_EPILOG = """\
examples:
  crhelper appcenter render ../shared/appcenter/etcd --resource-group Test | jq '.nodes[].count'
  crhelper appcenter render oss://my-bucket/apps/etcd-1.0.zip --zone cn-hangzhou-h
"""

PLAN_DESCRIPTION = """\
The lifecycle steps of an operation, in the order of the AppCenter guide: stages run one after
another, the steps of a stage together (equal service `order` across roles). create: resources,
metadata, confd, init/custom_metadata/start by order (init after start with post_start_service).
delete: the destroy gate (unless post_stop_service), stop by ascending order, release. scale-out
and scale-in (--role R --count N: how many nodes to add or remove): /adding-hosts or /deleting-hosts,
pre_check on the nodes that stay, scale_out/scale_in, destroy and stop on the leaving nodes. Blocking
steps stop the operation on a non-zero exit; "force refused" marks a destroy with allow_force false."""
PLAN_EPILOG = """\
examples:
  crhelper appcenter plan ../shared/appcenter/etcd --operation delete
  crhelper appcenter plan ../shared/appcenter/zookeeper --operation scale-in --role zk_node --count 2
  crhelper appcenter plan ../shared/appcenter/etcd --operation custom --service compact
  crhelper appcenter plan ../shared/appcenter/zookeeper --operation upgrade --json | jq '.Stages[].Label'
"""

STATUS_DESCRIPTION = """\
A cluster deployed by Custom::AppCluster, as the provider's state and its health checks see it: the
nodes (instance, address), the last lifecycle run and how it ended, and each node's health
(Healthy after healthy_threshold passing check_cmd runs, Unhealthy after unhealthy_threshold
failing ones, when action_cmd runs) with its last monitor values. Exit 1 names the known clusters
when CLUSTER is not one of them."""
STATUS_EPILOG = """\
examples:
  crhelper appcenter status cl-app-1a2b3c4d5e
  crhelper appcenter status cl-app-1a2b3c4d5e --json | jq '.Nodes[].Health.status'
"""

OPERATIONS = ("create", "scale-out", "scale-in", "delete", "start", "stop", "restart", "upgrade", "custom")


def key_value(text: str) -> tuple[str, str]:
    """One ``--set KEY=VALUE``; the value stays a string, converted later by the entry's type."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError("takes KEY=VALUE (a template path, e.g. env.tickTime=3000)")
    return key.strip(), value


def _package_options(parser: argparse.ArgumentParser, json_help: str) -> None:
    parser.add_argument("package", metavar="PACKAGE",
                        help="a package folder, .zip, .tar.gz, or oss://bucket/key (s3://bucket/key)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", type=key_value,
                        help="a value for a form entry by its template path (repeatable)")
    parser.add_argument("--zone", default=None, metavar="ZONE", help="the zone whose replace_policy applies")
    parser.add_argument("--resource-group", default=None, metavar="PRESET",
                        help="a cluster.resource_group preset (e.g. Test, Prod)")
    parser.add_argument("--json", action="store_true", help=json_help)


def _usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """No sub-command given: the command's help, exit 2 (a usage error)."""
    parser.print_help()
    return 2


def register(subparsers: "SubParsers") -> None:
    """Add the ``appcenter`` command and its sub-commands."""
    group = add_command(subparsers, "appcenter", "validate, render and plan QingCloud AppCenter packages",
                        DESCRIPTION, EPILOG)
    group.set_defaults(func=functools.partial(_usage, group))
    sub = group.add_subparsers(dest="appcenter_command", title="sub-commands", metavar="<sub-command>")

    validate = add_command(sub, "validate", "check a package and values; every problem listed",
                           VALIDATE_DESCRIPTION, VALIDATE_EPILOG)
    _package_options(validate, "print one JSON document (Valid, Problems, Roles)")
    validate.set_defaults(func=Body("handlers.appcenter.commands:validate"))

    render = add_command(sub, "render", "print the rendered cluster JSON", RENDER_DESCRIPTION, RENDER_EPILOG)
    _package_options(render, "problems as one JSON document on stdout (the cluster JSON is printed either way)")
    render.set_defaults(func=Body("handlers.appcenter.commands:render"))

    plan = add_command(sub, "plan", "the lifecycle steps of an operation", PLAN_DESCRIPTION, PLAN_EPILOG)
    _package_options(plan, "print the plan as one JSON document")
    plan.add_argument("--operation", required=True, choices=OPERATIONS, help="what to plan")
    plan.add_argument("--role", default=None, metavar="ROLE", help="scale-out/scale-in (and custom): the role")
    plan.add_argument("--count", type=int, default=None, metavar="N",
                      help="scale-out/scale-in: how many nodes to add or remove")
    plan.add_argument("--service", default=None, metavar="NAME", help="custom: the service to run")
    plan.set_defaults(func=Body("handlers.appcenter.commands:plan"))

    status = add_command(sub, "status", "a deployed cluster: its nodes, last run, health and monitor values",
                         STATUS_DESCRIPTION, STATUS_EPILOG)
    status.add_argument("cluster", metavar="CLUSTER", help="the cluster id (the ClusterId of its Custom::AppCluster)")
    status.add_argument("--json", action="store_true", help="print one JSON document")
    status.set_defaults(func=Body("handlers.appcenter.status:status"))
