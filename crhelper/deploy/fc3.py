"""Deploy to Function Compute 3.0 through `alibabacloud-fc20230330`: the function, its async
configuration and its triggers, as `plan` decides. The SDK is imported when a deploy runs."""

from __future__ import annotations

import base64
import json
import re
import time
from typing import Any, Callable, TypeVar

from . import DeployError
from .clients import explain, unreachable
from .oss import OssUploader, upload_step
from .plan import DeployResult, DeploySpec, Step, TriggerSpec, async_changes, function_changes, service_token
from .triggers import sync_triggers

T = TypeVar("T")
_FIELD_NAMES = {"handler": "handler", "runtime": "runtime", "memorySize": "memory_size", "timeout": "timeout",
                "environmentVariables": "environment_variables", "description": "description", "role": "role",
                "logConfig": "log_config"}


class Fc3Deployer:
    """One deploy's calls on one client; `wait` bounds the wait for an update to settle (seconds)."""

    def __init__(self, client: Any, *, region: str, account_id: str | None, endpoint: str, wait: float = 120.0,
                 poll: float = 1.0, uploader: OssUploader | None = None) -> None:
        from alibabacloud_fc20230330 import models

        self._client, self._models = client, models
        self._region, self._account, self._endpoint = region, account_id, endpoint
        self._wait, self._poll, self._uploader = wait, poll, uploader

    def _call(self, doing: str, call: Callable[[], T], missing: tuple[str, ...] = ()) -> T | None:
        """`call()`; None when FC answers 404 with one of the `missing` codes."""
        try:
            return call()
        except Exception as exc:  # the Tea SDK raises ClientException / TeaException, or its transport's errors
            code = str(getattr(exc, "code", "") or "")
            status = getattr(exc, "status_code", None) or getattr(exc, "statusCode", None)
            if code and code in missing:
                return None
            if code or status:
                message = re.sub(r"^code: \d+, ", "", str(getattr(exc, "message", "") or ""))  # Tea's prefix
                raise explain(code, status, message, doing, self._region) from None
            if isinstance(exc, (OSError, ConnectionError)) or "connect" in type(exc).__name__.lower() \
                    or "retry" in type(exc).__name__.lower():
                raise unreachable(self._endpoint, exc, self._region) from None
            raise

    def _get_function(self, name: str) -> dict[str, Any] | None:
        found = self._call(f"get function {name}",
                           lambda: self._client.get_function(name, self._models.GetFunctionRequest()),
                           ("FunctionNotFound",))
        return found.body.to_map() if found is not None else None

    def deploy(self, spec: DeploySpec) -> DeployResult:
        m, fn = self._models, spec.function
        steps: list[Step] = []
        current = self._get_function(fn.name)
        if current is None:
            body = m.CreateFunctionInput(function_name=fn.name, code=self._code(spec, steps),
                                         **self._arguments(fn.fields()))
            created = self._call(f"create function {fn.name}",
                                 lambda: self._client.create_function(m.CreateFunctionRequest(body=body)),
                                 ("FunctionAlreadyExists",))
            if created is not None:
                steps.append(Step("create", "function", fn.name, f"{len(spec.code):,} bytes of code"))
            else:  # created by someone else between our get and our create: update it instead
                current = self._get_function(fn.name)
                if current is None:
                    raise DeployError(f"FC says function {fn.name} exists and that it does not",
                                      "deploy again (another deploy of it may be running)")
        if current is not None:
            changes = function_changes(current, fn)
            code_changed = str(current.get("codeChecksum") or "") != spec.checksum
            if changes or code_changed:
                update = m.UpdateFunctionInput(code=self._code(spec, steps) if code_changed else None,
                                               **self._arguments(changes))
                self._call(f"update function {fn.name}",
                           lambda: self._client.update_function(fn.name, m.UpdateFunctionRequest(body=update)))
            steps.append(Step("update" if changes else "unchanged", "function", fn.name, ", ".join(sorted(changes))))
            steps.append(Step("update" if code_changed else "unchanged", "code", fn.name,
                              f"checksum {spec.checksum}" if code_changed else "same checksum"))
        arn = self._settled(fn.name)
        steps.append(self._async(spec))
        steps += self._triggers(spec)
        account = self._account or _account_of(arn)
        if account is None:
            raise DeployError(f"FC did not say which account function {fn.name} belongs to",
                              "give --account-id to print the ServiceToken")
        return DeployResult(service_token(self._region, account, fn.name, None), steps)

    def _arguments(self, fields: dict[str, Any]) -> dict[str, Any]:
        """FC's field names as the SDK's keyword arguments (a logConfig as the SDK's model)."""
        found = {_FIELD_NAMES[k]: v for k, v in fields.items()}
        if "log_config" in found:
            found["log_config"] = self._models.LogConfig(**found["log_config"])
        return found

    def _code(self, spec: DeploySpec, steps: list[Step]) -> Any:
        """The code as FC 3.0 takes it: the zip in the call, or the OSS object it was put in (with its checksum,
        which FC verifies)."""
        m = self._models
        if not spec.via_oss:
            return m.InputCodeLocation(zip_file=base64.b64encode(spec.code).decode("ascii"), checksum=spec.checksum)
        where = upload_step(self._uploader, spec, steps)
        return m.InputCodeLocation(oss_bucket_name=where.bucket, oss_object_name=where.key, checksum=spec.checksum)

    def _settled(self, name: str) -> str:
        """Wait until FC says the last update succeeded; the function's ARN."""
        deadline = time.monotonic() + self._wait
        while True:
            current = self._get_function(name) or {}
            status = current.get("lastUpdateStatus") or "Successful"
            if status == "Successful":
                return str(current.get("functionArn") or "")
            if status == "Failed":
                raise DeployError(f"FC could not apply the update of {name}: {current.get('lastUpdateStatusReason')}",
                                  "fix what FC names, then deploy again")
            if time.monotonic() >= deadline:
                raise DeployError(f"function {name} still {status} after {self._wait:.0f} s",
                                  "deploy again later: FC is still applying the last update")
            time.sleep(self._poll)

    def _async(self, spec: DeploySpec) -> Step:
        m, name = self._models, spec.function.name
        found = self._call(f"get async configuration of {name}",
                           lambda: self._client.get_async_invoke_config(name, m.GetAsyncInvokeConfigRequest()),
                           ("AsyncConfigNotExists", "AsyncConfigNotFound"))
        current = found.body.to_map() if found is not None else None
        if not async_changes(current, spec.async_config):
            return Step("unchanged", "async-config", name)
        wanted = spec.async_config
        body = m.PutAsyncInvokeConfigInput(max_async_retry_attempts=wanted.get("maxAsyncRetryAttempts"),
                                           max_async_event_age_in_seconds=wanted.get("maxAsyncEventAgeInSeconds"))
        self._call(f"put async configuration of {name}",
                   lambda: self._client.put_async_invoke_config(name, m.PutAsyncInvokeConfigRequest(body=body)))
        return Step("create" if current is None else "update", "async-config", name)

    def _list_triggers(self, name: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        token = None
        while True:
            request = self._models.ListTriggersRequest(limit=100, next_token=token)
            answer = self._call(f"list triggers of {name}", lambda: self._client.list_triggers(name, request))
            body = answer.body.to_map() if answer is not None else {}
            found += body.get("triggers") or []
            token = body.get("nextToken")
            if not token:
                return found

    def _triggers(self, spec: DeploySpec) -> list[Step]:
        name = spec.function.name
        return sync_triggers(name, self._list_triggers(name), spec.triggers, _Fc3Triggers(self, name))

    def trigger_call(self, doing: str, call: Callable[[], Any]) -> None:
        self._call(doing, call)


class _Fc3Triggers:
    """FC 3.0's trigger calls on one function (`triggerConfig` travels as a JSON string)."""

    def __init__(self, deployer: Fc3Deployer, function: str) -> None:
        from alibabacloud_fc20230330 import models

        self._deployer, self._function, self._models = deployer, function, models
        self._client = deployer._client

    def create(self, trigger: TriggerSpec) -> None:
        m = self._models
        body = m.CreateTriggerInput(trigger_name=trigger.name, trigger_type=trigger.trigger_type,
                                    trigger_config=json.dumps(dict(trigger.config)), source_arn=trigger.source_arn,
                                    invocation_role=trigger.invocation_role, description=trigger.description)
        self._deployer.trigger_call(f"create trigger {trigger.name}", lambda: self._client.create_trigger(
            self._function, m.CreateTriggerRequest(body=body)))

    def update(self, trigger: TriggerSpec) -> None:
        m = self._models
        body = m.UpdateTriggerInput(trigger_config=json.dumps(dict(trigger.config)),
                                    invocation_role=trigger.invocation_role, description=trigger.description)
        self._deployer.trigger_call(f"update trigger {trigger.name}", lambda: self._client.update_trigger(
            self._function, trigger.name, m.UpdateTriggerRequest(body=body)))

    def delete(self, name: str) -> None:
        self._deployer.trigger_call(f"delete trigger {name}",
                                    lambda: self._client.delete_trigger(self._function, name))


def _account_of(arn: str) -> str | None:
    """The account of `acs:fc:<region>:<account>:functions/<name>`."""
    parts = arn.split(":")
    return parts[3] if len(parts) >= 5 and parts[3] else None
