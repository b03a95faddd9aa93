"""Deploy to Function Compute 2.0 through `fc2`: the service, the function, its async configuration
and its triggers, as `plan` decides. The SDK is imported when a deploy runs."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any, Callable, Mapping, TypeVar

from . import DeployError
from .clients import explain, unreachable
from .oss import OssUploader, upload_step
from .plan import MANAGED_MARK, DeployResult, DeploySpec, Step, TriggerSpec, async_changes, function_changes, \
    held_part, service_token
from .triggers import sync_triggers

T = TypeVar("T")
QUALIFIER = "LATEST"


def _not_fc2(record: logging.LogRecord) -> bool:
    """fc2 logs every 4xx on the root logger (request headers included); deploy says what matters itself."""
    return not record.pathname.replace("\\", "/").endswith("fc2/client.py")


def _message(text: object) -> str:
    """fc2 gives FC's whole JSON answer as the message: its ErrorMessage."""
    try:
        found = json.loads(str(text))
    except ValueError:
        return str(text or "")
    return str(found.get("ErrorMessage") or text) if isinstance(found, dict) else str(text)


class Fc2Deployer:
    """One deploy's calls on one `fc2.Client`. `role` is the service's RAM role ARN (None: left as it is)."""

    def __init__(self, client: Any, *, region: str, account_id: str, endpoint: str, role: str | None = None,
                 uploader: OssUploader | None = None, log: Mapping[str, str] | None = None) -> None:
        import fc2

        self._client, self._error = client, fc2.FcError
        self._region, self._account, self._endpoint, self._role = region, account_id, endpoint, role
        self._uploader, self._log = uploader, dict(log) if log is not None else None

    def _call(self, doing: str, call: Callable[[], T], missing: tuple[str, ...] = ()) -> T | None:
        root = logging.getLogger()
        root.addFilter(_not_fc2)
        try:
            return call()
        except self._error as exc:
            if exc.err_code in missing:
                return None
            raise explain(str(exc.err_code or ""), exc.status_code, _message(exc.message), doing, self._region) from None
        except (OSError, ConnectionError) as exc:  # requests' errors are OSErrors
            raise unreachable(self._endpoint, exc, self._region) from None
        finally:
            root.removeFilter(_not_fc2)

    def deploy(self, spec: DeploySpec) -> DeployResult:
        if spec.service is None:
            raise DeployError("an FC 2.0 function lives in a service", "give --service NAME")
        steps = [self._service(spec.service)]
        steps += self._function(spec.service, spec)
        steps.append(self._async(spec.service, spec))
        steps += self._triggers(spec.service, spec)
        return DeployResult(service_token(self._region, self._account, spec.function.name, spec.service), steps)

    def _service(self, name: str, retried: bool = False) -> Step:
        found = self._call(f"get service {name}", lambda: self._client.get_service(name), ("ServiceNotFound",))
        if found is None:
            created = self._call(f"create service {name}", lambda: self._client.create_service(
                name, description=MANAGED_MARK, role=self._role, logConfig=self._log), ("ServiceAlreadyExists",))
            if created is None and not retried:  # created by someone else between our get and our create
                return self._service(name, retried=True)
            if created is None:
                raise DeployError(f"FC says service {name} exists and that it does not",
                                  "deploy again (another deploy of it may be running)")
            return Step("create", "service", name)
        changed = [field for field, wanted, held in (
            ("role", self._role, found.data.get("role")),
            ("logConfig", self._log, held_part(found.data.get("logConfig"), self._log or {})))
            if wanted is not None and held != wanted]
        if changed:
            self._call(f"update service {name}", lambda: self._client.update_service(
                name, role=self._role if "role" in changed else None,
                logConfig=self._log if "logConfig" in changed else None))
            return Step("update", "service", name, ", ".join(changed))
        return Step("unchanged", "service", name)

    def _function(self, service: str, spec: DeploySpec, retried: bool = False) -> list[Step]:
        fn = spec.function
        found = self._call(f"get function {fn.name}", lambda: self._client.get_function(service, fn.name),
                           ("FunctionNotFound",))
        current = found.data if found is not None else None
        code_changed = current is None or str(current.get("codeChecksum") or "") != spec.checksum
        changes = fn.fields() if current is None else function_changes(current, fn)
        if current is not None and not changes and not code_changed:
            return [Step("unchanged", "function", fn.name), Step("unchanged", "code", fn.name, "same checksum")]
        arguments = {"handler": changes.get("handler"), "runtime": changes.get("runtime"),
                     "memorySize": changes.get("memorySize"), "timeout": changes.get("timeout"),
                     "environmentVariables": changes.get("environmentVariables"),
                     "description": changes.get("description")}
        uploads: list[Step] = []
        with tempfile.TemporaryDirectory(prefix="crhelper-deploy-") as work:
            code: dict[str, str] = {}
            if code_changed and spec.via_oss:
                where = upload_step(self._uploader, spec, uploads)
                code = {"codeOSSBucket": where.bucket, "codeOSSObject": where.key}
            elif code_changed:  # fc2 reads the zip from a file
                code = {"codeZipFile": os.path.join(work, "code.zip")}
                with open(code["codeZipFile"], "wb") as handle:
                    handle.write(spec.code)
            if current is None:
                created = self._call(f"create function {fn.name}", lambda: self._client.create_function(
                    service, fn.name, fn.runtime, fn.handler, description=fn.description, memorySize=fn.memory,
                    timeout=fn.timeout, environmentVariables=dict(fn.environment), **code), ("FunctionAlreadyExists",))
                if created is None and not retried:  # created by someone else between our get and our create
                    return uploads + self._function(service, spec, retried=True)
                if created is None:
                    raise DeployError(f"FC says function {fn.name} exists and that it does not",
                                      "deploy again (another deploy of it may be running)")
                return uploads + [Step("create", "function", fn.name, f"{len(spec.code):,} bytes of code")]
            given = {k: v for k, v in arguments.items() if v is not None}
            self._call(f"update function {fn.name}", lambda: self._client.update_function(
                service, fn.name, **code, **given))
        return uploads + [Step("update" if changes else "unchanged", "function", fn.name, ", ".join(sorted(changes))),
                          Step("update" if code_changed else "unchanged", "code", fn.name,
                               f"checksum {spec.checksum}" if code_changed else "same checksum")]

    def _async(self, service: str, spec: DeploySpec) -> Step:
        name = spec.function.name
        found = self._call(f"get async configuration of {name}", lambda: self._client.get_function_async_invoke_config(
            service, QUALIFIER, name), ("AsyncConfigNotExists", "AsyncConfigNotFound"))
        current = found.data if found is not None else None
        if not async_changes(current, spec.async_config):
            return Step("unchanged", "async-config", name)
        self._call(f"put async configuration of {name}", lambda: self._client.put_function_async_invoke_config(
            service, QUALIFIER, name, dict(spec.async_config)))
        return Step("create" if current is None else "update", "async-config", name)

    def _list_triggers(self, service: str, name: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        token = None
        while True:
            answer = self._call(f"list triggers of {name}",
                                lambda: self._client.list_triggers(service, name, limit=100, nextToken=token))
            data = answer.data if answer is not None else {}
            found += data.get("triggers") or []
            token = data.get("nextToken")
            if not token:
                return found

    def _triggers(self, service: str, spec: DeploySpec) -> list[Step]:
        name = spec.function.name
        return sync_triggers(name, self._list_triggers(service, name), spec.triggers, _Fc2Triggers(self, service, name))

    def trigger_call(self, doing: str, call: Callable[[], Any]) -> None:
        self._call(doing, call)


class _Fc2Triggers:
    """FC 2.0's trigger calls on one function of one service."""

    def __init__(self, deployer: Fc2Deployer, service: str, function: str) -> None:
        self._deployer, self._service, self._function = deployer, service, function
        self._client = deployer._client

    def create(self, trigger: TriggerSpec) -> None:
        self._deployer.trigger_call(f"create trigger {trigger.name}", lambda: self._client.create_trigger(
            self._service, self._function, trigger.name, trigger.trigger_type, dict(trigger.config),
            trigger.source_arn, trigger.invocation_role, description=trigger.description))

    def update(self, trigger: TriggerSpec) -> None:
        self._deployer.trigger_call(f"update trigger {trigger.name}", lambda: self._client.update_trigger(
            self._service, self._function, trigger.name, triggerConfig=dict(trigger.config),
            invocationRole=trigger.invocation_role, description=trigger.description))

    def delete(self, name: str) -> None:
        self._deployer.trigger_call(f"delete trigger {name}",
                                    lambda: self._client.delete_trigger(self._service, self._function, name))
