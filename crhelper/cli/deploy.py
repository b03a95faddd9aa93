"""`crhelper deploy PROVIDER`: deploy to Function Compute. The parser is `crhelper.cli.parsers.deploy`."""

from __future__ import annotations

import argparse
import json
import re
import sys

from ..deploy import DeployError
from ..deploy.clients import Target, fc2_client, fc3_client, resolve_target
from ..deploy.code import Code, build, from_zip
from ..deploy.oss import OssUploader, code_route
from ..deploy.plan import DeployResult, DeploySpec, FunctionSettings, description_for, wanted_triggers
from ..loading import ProviderSpecError, import_from_cwd, parse_spec
from .provider_spec import resolve
from .failures import print_failure

DEFAULT_RUNTIME = {"3": "python3.12", "2": "python3.10"}
#: FC 2.0's Python runtimes among those `crhelper package` builds for (deploy.md §2.1: no python3.12).
FC2_RUNTIMES = ("python3.10",)


def default_function_name(spec: str) -> str:
    """The provider's module name as an FC name: `samples/greeting.py:provider` -> `greeting`."""
    location, _, is_file = parse_spec(spec)
    stem = location.rsplit("/", 1)[-1].removesuffix(".py") if is_file else location.split(".")[-1]
    name = re.sub(r"[^A-Za-z0-9_-]", "-", stem)[:64]
    return name if re.match(r"[A-Za-z_]", name) else f"crhelper-{name}"[:64]


def _environment(args: argparse.Namespace, code: Code) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise DeployError(f"--env {item!r} is not NAME=VALUE", "give it as --env NAME=VALUE")
        env[name] = value
    env["CRHELPER_PROVIDER"] = code.provider_env
    if args.store:
        env["CRHELPER_STORE"] = args.store
    return env


def log_config(text: str | None) -> dict[str, str] | None:
    """`--log PROJECT/LOGSTORE` as FC's logConfig."""
    if text is None:
        return None
    project, sep, logstore = text.partition("/")
    if not sep or not project or not logstore or "/" in logstore:
        raise DeployError(f"--log {text!r} is not PROJECT/LOGSTORE", "give it as --log my-project/my-logstore")
    return {"project": project, "logstore": logstore}


def deploy(args: argparse.Namespace) -> tuple[DeployResult, Code]:
    spec, manifest = resolve(args.provider)
    target = resolve_target(profile=args.profile, region=args.region, account_id=args.account_id,
                            endpoint=args.endpoint)
    import_from_cwd()
    runtime = args.runtime or DEFAULT_RUNTIME[args.fc_version]
    if args.fc_version == "2" and runtime not in FC2_RUNTIMES:
        raise DeployError(f"FC 2.0 has no runtime {runtime} (its Python runtimes stop at python3.10)",
                          "deploy it to FC 3.0 (--fc-version 3), or build for --runtime python3.10")
    uploader = OssUploader(args.oss, target.credentials, target.region) if args.oss else None
    if args.zip is not None:
        code = from_zip(args.zip, spec)
    else:
        extras = tuple(manifest.extras) if manifest else ()
        code = build(spec, runtime, extras, tuple(args.find_links), args.no_index, not args.no_bytecode)
    name = args.function or default_function_name(spec)
    log = log_config(args.log)
    settings = FunctionSettings(name, code.handler, runtime, args.memory, args.timeout, _environment(args, code),
                                description_for(spec), args.role if args.fc_version == "3" else None,
                                log if args.fc_version == "3" else None)
    timer = None if args.timer.strip().lower() in ("none", "off", "") else args.timer
    if args.mns_topic and target.account_id is None:
        raise DeployError("the MNS topic's ARN needs the account ID", "give --account-id or set ALIBABA_CLOUD_ACCOUNT_ID")
    triggers = wanted_triggers(timer=timer, mns_topic=args.mns_topic, region=target.region,
                               account_id=target.account_id or "", invocation_role=args.invocation_role)
    via_oss = code_route(len(code.data), args.code_upload, args.oss) == "oss"
    wanted = DeploySpec(settings, code.data, code.checksum, triggers,
                        service=args.service if args.fc_version == "2" else None, via_oss=via_oss)
    return _apply(args, target, wanted, uploader), code


def _apply(args: argparse.Namespace, target: Target, wanted: DeploySpec, uploader: OssUploader | None) -> DeployResult:
    endpoint = target.endpoint or f"{target.region} (account {target.account_id})"
    if args.fc_version == "3":
        from ..deploy.fc3 import Fc3Deployer

        fc3 = Fc3Deployer(fc3_client(target), region=target.region, account_id=target.account_id, endpoint=endpoint,
                          uploader=uploader)
        return fc3.deploy(wanted)
    from ..deploy.fc2 import Fc2Deployer

    if target.account_id is None:
        raise DeployError("the FC 2.0 ServiceToken names the account", "give --account-id or set ALIBABA_CLOUD_ACCOUNT_ID")
    return Fc2Deployer(fc2_client(target), region=target.region, account_id=target.account_id, endpoint=endpoint,
                       role=args.role, uploader=uploader, log=log_config(args.log)).deploy(wanted)


def run(args: argparse.Namespace) -> int:
    try:
        result, code = deploy(args)
    except (DeployError, ProviderSpecError) as exc:
        print_failure("deploy", exc, args.json)
        return 2
    for warning in code.warnings:
        print(f"crhelper deploy: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    for step in result.steps:
        print(step.text())
    print("deployed" if result.changed else "nothing changed: FC already holds this deploy")
    print(f"ServiceToken: {result.token}")
    return 0
