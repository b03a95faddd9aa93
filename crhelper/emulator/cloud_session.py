"""Local ALIYUN:: resources for one stack operation: applies Create/Update/Delete and delivers custom
resource requests to the stack's own functions.

ALIYUN::FC / FC3 functions and their triggers live in a local Function Compute endpoint
started on first need and deployed through its management API with the real SDKs, their code
from `Code.ZipFile`, `Code.SourceCode` (a zip holding `index.py`) or OSS. The endpoint lives as
long as the operation: a later operation re-deploys a live function from its recorded properties
when a request needs it. A custom resource whose ServiceToken is the ARN of such a function is
invoked asynchronously there, and its answer read at a ResponseURL of this session's own server,
so the stack needs no bindings. The same holds for a ServiceToken naming a live function of another
stack of this emulator home (a deployment template's output: the function is run from that stack's
records, which keeps owning it), and for an MNS topic an mns_topic trigger of such a function
listens to (the emulator plays MNS's push: the function gets the trigger's notification format).

ALIYUN::OSS::Bucket is a bucket of the emulator's local OSS (`cloud_local_oss`: folders under
`$CRHELPER_HOME/oss`, served over the S3 API with create-only writes); a function's code may come
from one of its objects, and a function environment value that is an `s3://` URL of a local
bucket (CRHELPER_STORE, a provider's own store) is pointed at the local OSS endpoint when the
function is deployed, as the cloud's OSS host would resolve in the region. ALIYUN::MNS queues,
topics and subscriptions are made in the operation's local MNS endpoint (`cloud_local_mns`).
RAM resources are validated and recorded (their attributes are what ROS reports), not enforced.

A non-editable property change replaces the resource: the new one is created before the old one is
deleted, or after it when both have the same physical id (ROS deletes the old one at cleanup).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import os
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..servicetoken import FcFunctionToken, MnsTopicToken, ServiceTokenError, parse_service_token
from .cloud_fc import lower_first
from .cloud_local_mns import MNS_TYPES, LocalMnsResources
from .cloud_local_oss import LocalOss, OssError, OssFolder
from .cloud_local_stacks import (FC2_FUNCTION, FC2_SERVICE, FC2_TRIGGER, FC3_ASYNC, FC3_FUNCTION, FC3_TRIGGER,
                                 FUNCTION_TYPES, TRIGGER_TYPES, function_key as _function_key, function_with_settings,
                                 home_records, live_resources, topic_trigger, trigger_function as _trigger_function,
                                 trigger_topic as _trigger_topic)
from .cloud_registry import cloud_type, is_cloud_token
from .protocol import Deliverer, Outcome, failure

if TYPE_CHECKING:
    from ..local.fc_server import LocalFunctionCompute
    from ..local.response_server import ResponseServer
    from .model import ResourceRecord

OSS_BUCKET = "ALIYUN::OSS::Bucket"
_POLL = 0.02
#: Seconds a management call (a function's code upload) may take.
DEPLOY_TIMEOUT = 120
#: Seconds an answer may still arrive after its invocation settled.
ANSWER_GRACE = 0.5


def source_zip(source: str) -> bytes:
    """`Code.SourceCode` as FC gets it from ROS: one file named `index` (`index.py` for Python),
    with fixed metadata so the same source gives the same bytes (and checksum)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        info = zipfile.ZipInfo("index.py", date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        archive.writestr(info, source)
    return buffer.getvalue()


def code_location(code: Mapping[str, Any]) -> dict[str, Any]:
    """The FC API's `code` from ROS's `Code` (precedence ZipFile > SourceCode > OSS, deploy.md §1.2)."""
    if code.get("ZipFile"):
        return {"zipFile": str(code["ZipFile"]), **({"checksum": str(code["Checksum"])} if code.get("Checksum") else {})}
    if code.get("SourceCode") is not None:
        return {"zipFile": base64.b64encode(source_zip(str(code["SourceCode"]))).decode()}
    return {"ossBucketName": code.get("OssBucketName"), "ossObjectName": code.get("OssObjectName")}


@dataclass
class _Function:
    """A function of this stack: its resource type and properties, and whether it is deployed in
    this operation's endpoint."""

    type_name: str
    properties: dict[str, Any]
    deployed: bool = False


class CloudError(RuntimeError):
    """A local resource operation failed; the message becomes the resource's status reason."""


class CloudSession:
    """One stack operation's local ALIYUN:: resources; see the module docstring. Thread-safe."""

    def __init__(self, region: str, account_id: str) -> None:
        self.region = region
        self.account_id = account_id
        self._lock = threading.RLock()
        self._fc: LocalFunctionCompute | None = None
        self._client3: Any = None
        self._client2: Any = None
        self._responses: ResponseServer | None = None
        #: (service or "", function) -> the stack's function
        self._functions: dict[tuple[str, str], _Function] = {}
        self._services: dict[str, dict[str, Any]] = {}
        self._deployed_services: set[str] = set()
        #: ((service or "", function), trigger) held by this operation's endpoint
        self._deployed_triggers: set[tuple[tuple[str, str], str]] = set()
        #: MNS topic -> (the function its mns_topic trigger invokes, the trigger's notifyContentFormat)
        self._topic_triggers: dict[str, tuple[tuple[str, str], str]] = {}
        #: FC 3.0 function -> its ALIYUN::FC3::AsyncInvokeConfig properties (put again on each deploy)
        self._async: dict[str, dict[str, Any]] = {}
        self.oss_folder = OssFolder()
        self._oss: LocalOss | None = None
        self.mns = LocalMnsResources(region, account_id)

    # ------------------------------------------------------------------ lifecycle

    def attach(self, resources: Iterable["ResourceRecord"]) -> None:
        """Learn the live functions and services of the stack (deployed lazily when needed)."""
        for resource in resources:
            if resource.physical_id is None or not is_cloud_token(resource.service_token):
                continue
            if resource.status == "DELETE_COMPLETE":
                continue
            self._remember(resource.resource_type, resource.properties)
            if resource.resource_type in MNS_TYPES:
                self.mns.remember(resource.resource_type, resource.physical_id, resource.properties)

    def _remember(self, type_name: str, properties: Mapping[str, Any]) -> None:
        topic = _trigger_topic(type_name, properties)
        if topic is not None:
            config = lower_first(properties.get("TriggerConfig") or {})
            with self._lock:
                self._topic_triggers[topic] = (_trigger_function(properties),
                                               str(config.get("notifyContentFormat") or "STREAM").upper())
        if type_name == FC3_ASYNC:
            self._async[str(properties["FunctionName"])] = dict(properties)
        elif type_name == FC2_SERVICE:
            self._services[str(properties["ServiceName"])] = dict(properties)
        elif type_name in (FC2_FUNCTION, FC3_FUNCTION):
            key = _function_key(type_name, properties)
            with self._lock:
                known = self._functions.get(key)
                self._functions[key] = _Function(type_name, dict(properties), known is not None and known.deployed)

    def close(self) -> None:
        with self._lock:
            fc, responses, oss = self._fc, self._responses, self._oss
            self._fc = self._responses = self._oss = None
            self._client2 = self._client3 = None
            for function in self._functions.values():
                function.deployed = False
            self._deployed_services.clear()
            self._deployed_triggers.clear()
        if fc is not None:
            fc.stop()
        if responses is not None:
            responses.stop()
        if oss is not None:
            oss.stop()
        self.mns.close()

    @property
    def oss(self) -> LocalOss:
        """The local OSS endpoint over `oss_folder`, started on first need."""
        with self._lock:
            if self._oss is None:
                self._oss = LocalOss(self.oss_folder).start()
            return self._oss

    @property
    def fc(self) -> "LocalFunctionCompute":
        from ..local.fc_server import LocalFunctionCompute

        with self._lock:
            if self._fc is None:
                self._fc = LocalFunctionCompute(region=self.region, account_id=self.account_id).start()
            return self._fc

    def _fc3(self) -> Any:
        with self._lock:
            if self._client3 is None:
                # A code package of tens of MB takes FC seconds to unpack: the SDK's 10 s default is too short.
                self._client3 = self.fc.client3(read_timeout=DEPLOY_TIMEOUT * 1000, connect_timeout=10_000)
            return self._client3

    def _fc2(self) -> Any:
        with self._lock:
            if self._client2 is None:
                self._client2 = self.fc.client(Timeout=DEPLOY_TIMEOUT)
            return self._client2

    # ------------------------------------------------------------------ resource operations

    def apply(self, request_type: str, type_name: str, properties: Mapping[str, Any],
              physical_id: str | None = None, old_properties: Mapping[str, Any] | None = None) -> Outcome:
        """Create, Update (replacing when a non-editable property changed) or Delete one resource."""
        local_type = cloud_type(type_name)
        if local_type is None:
            return failure(f"{type_name} is not a local resource type")
        try:
            if request_type == "Delete":
                self._delete(type_name, properties)
                return Outcome(ok=True, physical_id=physical_id)
            new_id = local_type.physical_id(properties)
            if request_type == "Create":
                self._create(type_name, properties)
            else:
                old = dict(old_properties or {})
                if local_type.replaced_by(old, properties):
                    if new_id == physical_id:
                        self._delete(type_name, old)
                        self._create(type_name, properties)
                    else:
                        self._create(type_name, properties)
                        self._delete(type_name, old)
                else:
                    self._update(type_name, properties, old)
        except CloudError as exc:
            return failure(str(exc))
        except OssError as exc:
            return failure(f"local OSS: {exc.code}: {exc.message}")
        attributes = local_type.attributes(self.region, self.account_id, new_id, properties)
        return Outcome(ok=True, physical_id=new_id, data=attributes, data_given=True)

    def _create(self, type_name: str, properties: Mapping[str, Any]) -> None:
        self._remember(type_name, properties)
        if type_name in (FC2_FUNCTION, FC3_FUNCTION):
            self._deploy(_function_key(type_name, properties))
        elif type_name in (FC2_TRIGGER, FC3_TRIGGER):
            self._trigger("create", properties)
        elif type_name == FC3_ASYNC:
            self._put_async(str(properties["FunctionName"]))
        elif type_name == OSS_BUCKET:
            self._create_bucket(str(properties["BucketName"]))
        elif type_name in MNS_TYPES:
            self._mns_call("create", type_name, properties)

    def _update(self, type_name: str, properties: Mapping[str, Any], old: Mapping[str, Any]) -> None:
        self._remember(type_name, properties)
        if type_name in (FC2_FUNCTION, FC3_FUNCTION):
            key = _function_key(type_name, properties)
            with self._lock:
                was_deployed = self._function(key).deployed
            if was_deployed:
                self._deploy(key, update=True)
            else:  # not in this operation's endpoint yet: deploying now installs the new properties
                self._deploy(key)
        elif type_name in (FC2_TRIGGER, FC3_TRIGGER):
            self._trigger("update", properties)
        elif type_name == FC3_ASYNC:
            self._put_async(str(properties["FunctionName"]))
        elif type_name in MNS_TYPES:
            self._mns_call("update", type_name, properties)

    def _delete(self, type_name: str, properties: Mapping[str, Any]) -> None:
        if type_name in (FC2_FUNCTION, FC3_FUNCTION):
            key = _function_key(type_name, properties)
            with self._lock:
                function = self._functions.pop(key, None)
            if function is not None and function.deployed:
                self._call(lambda: self._fc3().delete_function(key[1]) if not key[0]
                           else self._fc2().delete_function(key[0], key[1]), f"deleting function '{key[1]}'")
        elif type_name == FC2_SERVICE:
            self._services.pop(str(properties.get("ServiceName")), None)
        elif type_name == FC3_ASYNC:
            name = str(properties["FunctionName"])
            with self._lock:
                self._async.pop(name, None)
                function = self._functions.get(("", name))
            if function is not None and function.deployed:
                from alibabacloud_fc20230330 import models

                self._call(lambda: self._fc3().delete_async_invoke_config(name, models.DeleteAsyncInvokeConfigRequest()),
                           f"deleting the async configuration of '{name}'")
        elif type_name == OSS_BUCKET:
            bucket = str(properties["BucketName"])
            if self.oss_folder.has_bucket(bucket):
                force = properties.get("DeletionForce") in (True, "true", "True")
                try:
                    self.oss_folder.delete_bucket(bucket, force=force)
                except OssError as exc:
                    raise CloudError(f"local OSS refused deleting bucket '{bucket}': {exc.code}: the bucket still "
                                     "holds objects (set DeletionForce: true to delete them with it, as ROS does)") from None
        elif type_name in MNS_TYPES:
            self._mns_call("delete", type_name, properties)
        elif type_name in (FC2_TRIGGER, FC3_TRIGGER):
            key = _trigger_function(properties)
            name = str(properties["TriggerName"])
            with self._lock:
                topic = _trigger_topic(type_name, properties)
                if topic is not None and self._topic_triggers.get(topic, ((), ""))[0] == key:
                    self._topic_triggers.pop(topic, None)
                function = self._functions.get(key)
            if function is not None and function.deployed and (key, name) in self._deployed_triggers:
                self._deployed_triggers.discard((key, name))
                self._call(lambda: self._fc2().delete_trigger(key[0], key[1], name) if key[0]
                           else self._fc3().delete_trigger(key[1], name), f"deleting trigger '{name}'")

    # ------------------------------------------------------------------ OSS, MNS, async configuration

    def _create_bucket(self, bucket: str) -> None:
        if not self.oss_folder.create_bucket(bucket):
            raise CloudError(f"Properties.BucketName: BucketAlreadyExists: the local OSS already holds bucket '{bucket}' "
                             f"({self.oss_folder.bucket_path(bucket)}): choose another BucketName, or delete that folder")

    def _mns_call(self, action: str, type_name: str, properties: Mapping[str, Any]) -> None:
        local_type = cloud_type(type_name)
        assert local_type is not None
        physical_id = local_type.physical_id(properties)
        try:
            getattr(self.mns, action)(type_name, physical_id, properties)
        except Exception as exc:  # noqa: BLE001 - the MNS SDK raises its own types; the message says why
            message = getattr(exc, "message", None) or str(exc)
            code = getattr(exc, "type", None)
            raise CloudError(f"local MNS refused {action} of {type_name} '{physical_id}': "
                             f"{code + ': ' if code else ''}{message}") from None

    def _put_async(self, name: str) -> None:
        """Put the function's async configuration, when the function is this stack's (deploying it
        first if needed); one of a function from outside the stack is recorded only."""
        with self._lock:
            function = self._functions.get(("", name))
            config = self._async.get(name)
            if function is None or config is None:
                return
            if not function.deployed:
                self._deploy(("", name))  # puts the configuration too
                return
        self._put_async_now(name, config)

    def _put_async_now(self, name: str, config: Mapping[str, Any]) -> None:
        from alibabacloud_fc20230330 import models

        body = models.PutAsyncInvokeConfigInput(max_async_retry_attempts=int(config.get("MaxAsyncRetryAttempts", 3)),
                                                max_async_event_age_in_seconds=int(config.get("MaxAsyncEventAgeInSeconds", 86400)),
                                                async_task=config.get("AsyncTask") in (True, "true", "True") or None)
        self._call(lambda: self._fc3().put_async_invoke_config(name, models.PutAsyncInvokeConfigRequest(body=body)),
                   f"putting the async configuration of '{name}'")

    def _local_code(self, code: Mapping[str, Any]) -> dict[str, Any]:
        """`code_location`, with an object of a local OSS bucket read here and sent as the zip."""
        location = code_location(code)
        bucket, key = location.get("ossBucketName"), location.get("ossObjectName")
        if location.get("zipFile") or bucket is None:
            return location
        bucket, key = str(bucket), str(key)
        if not self.oss_folder.has_bucket(bucket):
            raise CloudError(f"Properties.Code.OssBucketName: the local OSS has no bucket '{bucket}': put the code "
                             f"package at {self.oss_folder.root / bucket / key} (crhelper package MODULE:provider "
                             f"--output {self.oss_folder.root / bucket / key})")
        try:
            data = self.oss_folder.get(bucket, key)
        except OssError:
            raise CloudError(f"Properties.Code.OssObjectName: the local OSS bucket '{bucket}' has no object '{key}': "
                             f"crhelper package MODULE:provider --output {self.oss_folder.root / bucket / key}") from None
        return {"zipFile": base64.b64encode(data).decode()}

    def _local_environment(self, environment: Mapping[str, Any]) -> dict[str, str]:
        """The function's environment, with `s3://` URLs of local buckets pointed at the local OSS."""
        found = {}
        for name, value in environment.items():
            text = str(value)
            if text.startswith("s3://"):
                bucket = text[len("s3://"):].split("/", 1)[0].split("?", 1)[0]
                if self.oss_folder.has_bucket(bucket):
                    text = self.oss.store_url(text)
            found[str(name)] = text
        return found

    def _function(self, key: tuple[str, str]) -> _Function:
        function = self._functions.get(key)
        if function is None:
            raise CloudError(f"function '{key[1]}' is not a function of this stack")
        return function

    def _deploy(self, key: tuple[str, str], update: bool = False) -> None:
        """Install the function in this operation's endpoint through the management API."""
        with self._lock:
            function = self._function(key)
            properties = function.properties
            runtime = str(properties.get("Runtime"))
            if not runtime.startswith("python"):
                raise CloudError(f"Properties.Runtime: the local Function Compute runs Python functions only, got {runtime!r}")
            code = properties.get("Code") or {}
            body = {"functionName": key[1], "runtime": runtime, "handler": properties["Handler"],
                    "timeout": int(properties.get("Timeout", 3)), "memorySize": int(properties.get("MemorySize", 128)),
                    "environmentVariables": self._local_environment(properties.get("EnvironmentVariables") or {}),
                    "code": self._local_code(code)}
            if not update:  # a new function in this endpoint: none of its triggers is there yet
                self._deployed_triggers = {t for t in self._deployed_triggers if t[0] != key}
            if key[0]:
                self._deploy_fc2(key, body, update)
                self._put_fc2_async(key, properties.get("AsyncConfiguration"))
            else:
                self._deploy_fc3(body, update)
                if key[1] in self._async:
                    self._put_async_now(key[1], self._async[key[1]])
            function.deployed = True

    def _put_fc2_async(self, key: tuple[str, str], config: Any) -> None:
        """An FC 2.0 function's `AsyncConfiguration` (FC's asyncConfig keys, either case)."""
        if not isinstance(config, dict):
            return
        wanted = lower_first(config)
        self._call(lambda: self._fc2().put_function_async_invoke_config(key[0], "LATEST", key[1], wanted),
                   f"putting the async configuration of '{key[1]}'")

    def _deploy_fc3(self, body: dict[str, Any], update: bool) -> None:
        from alibabacloud_fc20230330 import models

        code = models.InputCodeLocation(zip_file=body["code"].get("zipFile"), checksum=body["code"].get("checksum"),
                                        oss_bucket_name=body["code"].get("ossBucketName"),
                                        oss_object_name=body["code"].get("ossObjectName"))
        fields = dict(runtime=body["runtime"], handler=body["handler"], timeout=body["timeout"],
                      memory_size=body["memorySize"], environment_variables=body["environmentVariables"], code=code)
        name = body["functionName"]
        if update:
            self._call(lambda: self._fc3().update_function(
                name, models.UpdateFunctionRequest(body=models.UpdateFunctionInput(**fields))), f"updating function '{name}'")
        else:
            self._call(lambda: self._fc3().create_function(
                models.CreateFunctionRequest(body=models.CreateFunctionInput(function_name=name, **fields))),
                f"creating function '{name}'")

    def _deploy_fc2(self, key: tuple[str, str], body: dict[str, Any], update: bool) -> None:
        service = key[0]
        if service not in self._deployed_services:
            role = (self._services.get(service) or {}).get("Role")
            self._call(lambda: self._fc2().create_service(service, role=role), f"creating service '{service}'")
            self._deployed_services.add(service)
        code = body["code"]
        with tempfile.TemporaryDirectory(prefix="crhelper-fc2-code-") as folder:
            zip_path = None
            if code.get("zipFile"):
                zip_path = os.path.join(folder, "code.zip")
                with open(zip_path, "wb") as handle:
                    handle.write(base64.b64decode(code["zipFile"]))
            arguments = dict(codeZipFile=zip_path, codeOSSBucket=code.get("ossBucketName"),
                             codeOSSObject=code.get("ossObjectName"), memorySize=body["memorySize"],
                             timeout=body["timeout"], environmentVariables=body["environmentVariables"])
            client = self._fc2()
            if update:
                self._call(lambda: client.update_function(service, key[1], runtime=body["runtime"],
                                                          handler=body["handler"], **arguments),
                           f"updating function '{key[1]}'")
            else:
                self._call(lambda: client.create_function(service, key[1], body["runtime"], body["handler"], **arguments),
                           f"creating function '{key[1]}'")

    def _trigger(self, action: str, properties: Mapping[str, Any]) -> None:
        """Create or update a trigger of one of the stack's functions (deploying it first if needed);
        a trigger of a function from outside the stack is recorded only."""
        key = _trigger_function(properties)
        with self._lock:
            function = self._functions.get(key)
            if function is None:
                return
            if not function.deployed:
                self._deploy(key)
        config = lower_first(properties.get("TriggerConfig") or {})
        name = str(properties["TriggerName"])
        with self._lock:
            if (key, name) not in self._deployed_triggers:
                action = "create"  # the function was deployed in this operation's endpoint without its triggers
            self._deployed_triggers.add((key, name))
        try:
            self._trigger_calls(action, key, name, config, properties)
        except CloudError:
            if action == "create":
                with self._lock:
                    self._deployed_triggers.discard((key, name))
            raise

    def _trigger_calls(self, action: str, key: tuple[str, str], name: str, config: Any,
                       properties: Mapping[str, Any]) -> None:
        role, qualifier = properties.get("InvocationRole"), properties.get("Qualifier")
        if key[0]:
            client = self._fc2()
            if action == "create":
                self._call(lambda: client.create_trigger(key[0], key[1], name, str(properties["TriggerType"]), config,
                                                         properties.get("SourceArn"), role, qualifier=qualifier),
                           f"creating trigger '{name}'")
            else:
                self._call(lambda: client.update_trigger(key[0], key[1], name, triggerConfig=config, invocationRole=role,
                                                         qualifier=qualifier), f"updating trigger '{name}'")
            return
        from alibabacloud_fc20230330 import models

        text = json.dumps(config)  # the FC 3.0 API takes triggerConfig as a JSON string
        description = properties.get("Description")
        if action == "create":
            body = models.CreateTriggerInput(trigger_name=name, trigger_type=str(properties["TriggerType"]),
                                             trigger_config=text, invocation_role=role, source_arn=properties.get("SourceArn"),
                                             qualifier=qualifier, description=description)
            self._call(lambda: self._fc3().create_trigger(key[1], models.CreateTriggerRequest(body=body)),
                       f"creating trigger '{name}'")
        else:
            update = models.UpdateTriggerInput(trigger_config=text, invocation_role=role, qualifier=qualifier,
                                               description=description)
            self._call(lambda: self._fc3().update_trigger(key[1], name, models.UpdateTriggerRequest(body=update)),
                       f"updating trigger '{name}'")

    @staticmethod
    def _call(operation: Any, what: str) -> Any:
        try:
            return operation()
        except Exception as exc:  # noqa: BLE001 - the SDKs raise their own types; the message names the field
            message = getattr(exc, "message", None) or str(exc)
            raise CloudError(f"local Function Compute refused {what}: {message}") from None

    # ------------------------------------------------------------------ custom resources

    def deliverer(self, fallback: Deliverer) -> Deliverer:
        """A Deliverer sending requests for this stack's own functions to them; others to `fallback`."""

        def deliver(service_token: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
            key = self._own_function(service_token)
            if key is not None:
                return self._invoke(key, request, timeout)
            topic = self._own_topic(service_token)
            if topic is not None:
                return self._invoke(topic[1], request, timeout, topic=(topic[0], topic[2]))
            return fallback(service_token, request, timeout)

        return deliver

    def _own_function(self, service_token: str) -> tuple[str, str] | None:
        try:
            token = parse_service_token(service_token)
        except ServiceTokenError:
            return None
        if not isinstance(token, FcFunctionToken) or (token.region, token.account_id) != (self.region, self.account_id):
            return None
        key = (token.service or "", token.function)
        with self._lock:
            if key in self._functions:
                return key
        return key if self._adopt(key) else None

    def _own_topic(self, service_token: str) -> tuple[str, tuple[str, str], str] | None:
        """(topic, function, content format) when the token is an MNS topic of this region and account
        with an mns_topic trigger of a known (or adoptable) function: MNS would invoke that function."""
        try:
            token = parse_service_token(service_token)
        except ServiceTokenError:
            return None
        if not isinstance(token, MnsTopicToken) or (token.region, token.account_id) != (self.region, self.account_id):
            return None
        with self._lock:
            found = self._topic_triggers.get(token.topic)
        if found is None:
            found = self._adopt_topic(token.topic)
        if found is None:
            return None
        key = found[0]
        with self._lock:
            known = key in self._functions
        if not known and not self._adopt(key):
            return None
        return token.topic, key, found[1]

    def _adopt_topic(self, topic: str) -> tuple[tuple[str, str], str] | None:
        """The mns_topic trigger of `topic` in another stack of this emulator home, learned."""
        for record in home_records(self.region, self.account_id, TRIGGER_TYPES):
            trigger = topic_trigger(live_resources(record), topic)
            if trigger is not None:
                self._remember(trigger.resource_type, trigger.properties)
                with self._lock:
                    return self._topic_triggers.get(topic)
        return None

    def _adopt(self, key: tuple[str, str]) -> bool:
        """Learn a live function of another stack in this emulator home (a deployment template's
        stack, whose outputs gave this stack its ServiceToken), to run it in this operation's
        endpoint as it is recorded there; its own stack keeps owning it (it is never deleted here)."""
        for record in home_records(self.region, self.account_id, FUNCTION_TYPES):
            found = function_with_settings(live_resources(record), key)
            for resource in found:
                self._remember(resource.resource_type, resource.properties)
            if found:
                return True
        return False

    def _invoke(self, key: tuple[str, str], request: dict[str, Any], timeout: float,
                topic: tuple[str, str] | None = None) -> dict[str, Any]:
        from ..local.response_server import ResponseServer

        with self._lock:
            if not self._function(key).deployed:
                try:
                    self._deploy(key)
                except CloudError as exc:
                    raise RuntimeError(str(exc)) from None
            if self._responses is None:
                self._responses = ResponseServer().start()
            responses = self._responses
        event = responses.attach(copy.deepcopy(request))
        payload = json.dumps(event).encode("utf-8")
        if topic is not None:
            payload = self._topic_notification(topic[0], topic[1], payload)
        invocation = self._invoke_async(key, payload)
        deadline = time.monotonic() + timeout
        settled_at: float | None = None
        while True:
            answers = responses.responses_for(str(request["RequestId"]))
            if answers:
                return answers[0]
            reason = self._settled_without_answer(invocation)
            if reason:  # an answer posted just before the function returned may still be arriving
                settled_at = settled_at if settled_at is not None else time.monotonic()
                if time.monotonic() - settled_at > ANSWER_GRACE:
                    raise RuntimeError(f"function '{key[1]}' {reason}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"function '{key[1]}' sent no response to the ResponseURL within {timeout:g} s")
            time.sleep(_POLL)

    def _topic_notification(self, topic: str, content_format: str, message: bytes) -> bytes:
        """What an mns_topic trigger hands the function for a message published to `topic` (the
        emulator plays MNS's push to FC): the body itself (STREAM), or the JSON notification."""
        if content_format != "JSON":
            return message
        text = message.decode("utf-8")
        return json.dumps({"TopicOwner": self.account_id, "TopicName": topic, "Subscriber": self.account_id,
                           "SubscriptionName": f"fc-trigger-{topic}", "MessageId": uuid.uuid4().hex.upper(),
                           "Message": text, "MessageMD5": hashlib.md5(message, usedforsecurity=False).hexdigest().upper(),
                           "MessageTag": "", "PublishTime": int(time.time() * 1000)}).encode("utf-8")

    def _invoke_async(self, key: tuple[str, str], payload: bytes) -> str:
        if key[0]:
            response = self._fc2().invoke_function(key[0], key[1], payload=payload, headers={"x-fc-invocation-type": "Async"})
            return str(response.headers.get("x-fc-request-id", ""))
        from alibabacloud_fc20230330 import models
        from alibabacloud_tea_util.models import RuntimeOptions

        answer = self._fc3().invoke_function_with_options(
            key[1], models.InvokeFunctionRequest(body=payload), models.InvokeFunctionHeaders(x_fc_invocation_type="Async"),
            RuntimeOptions())
        headers = {k.lower(): v for k, v in (answer.headers or {}).items()}
        return str(headers.get("x-fc-request-id", ""))

    def _settled_without_answer(self, invocation: str) -> str:
        """Why an invocation can no longer answer, or '' while it may (still running, or continuing
        through re-entries after returning InProgress)."""
        from .delivery_fc import in_progress

        try:
            record = self.fc.record(invocation)
        except KeyError:
            return ""
        if record.status == "succeeded" and not in_progress(record):
            return "finished but its response never reached the ResponseURL"
        if record.status in ("failed", "dropped"):
            last = record.attempts[-1] if record.attempts else None
            error = f": {last.error_type}: {last.error_message}" if last is not None and last.error_message else ""
            return f"failed on all {len(record.attempts)} attempt(s) without answering{error}"
        return ""
