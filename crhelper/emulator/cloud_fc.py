"""ALIYUN::FC (2.0) and ALIYUN::FC3 resource types: properties, checks and attributes (pure).

deploy.md §1.1-1.5. The functions themselves run in a local Function Compute endpoint
(`cloud_session` deploys them through its management API); here is only what a template may say
and what `Fn::GetAtt` answers, so a custom resource's `ServiceToken: {Fn::GetAtt: [Fn, ARN]}` gets
the token form of the function's FC version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from .cloud_schema import ANY, BOOLEAN, INTEGER, LIST, MAP, NUMBER, CloudType, Prop
from .intrinsics import UNKNOWN

MAX_SOURCE_CODE = 4096
#: Runtimes ROS accepts (the CDK's list, plus python3.12 from the FC 3.0 SDK); locally only Python runs.
RUNTIMES = ("python3.12", "python3.10", "python3.9", "python3", "python2.7", "nodejs20", "nodejs18", "nodejs16",
            "nodejs14", "java11", "java8", "php7.2", "dotnetcore3.1", "go1", "custom", "custom.debian10",
            "custom.debian11", "custom.debian12", "custom-container")
TRIGGER_TYPES = ("oss", "log", "tablestore", "timer", "mns_topic", "cdn_events", "http")
FC3_TRIGGER_TYPES = TRIGGER_TYPES + ("eventbridge",)
_NAME_128 = Prop(required=True, editable=False, low=1, high=128)
_TRIGGER_NAME = Prop(required=True, editable=False, low=1, high=128, pattern=r"[A-Za-z_][A-Za-z0-9_-]*",
                     rule="must start with a letter or '_' and use only letters, digits, '_' and '-'")
#: The ROS page marks FunctionName editable, but the FC 3.0 API cannot rename (UpdateFunctionInput has
#: no name), so a new name replaces the function here (Inf, deploy.md §1.4 "verify before relying").
_FC3_NAME = Prop(required=True, editable=False, low=1, high=64, pattern=r"[A-Za-z_][A-Za-z0-9_-]*",
                 rule="must be 1-64 letters, digits, '_' or '-', not starting with a digit or '-'")


def stable_id(*parts: str) -> str:
    """An id like FC's (a UUID), derived from the names so attributes stay put across operations."""
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def fc2_arn(region: str, account: str, service: str, function: str) -> str:
    return f"acs:fc:{region}:{account}:services/{service}/functions/{function}"


def fc3_arn(region: str, account: str, function: str) -> str:
    return f"acs:fc:{region}:{account}:functions/{function}"


def _code_errors(code: Any, handler: Any, path: str, fc3: bool) -> list[str]:
    if code is UNKNOWN or code is None:
        return []
    if not isinstance(code, dict):
        return [f"{path}.Code: must be a map with ZipFile, SourceCode or OssBucketName and OssObjectName"]
    allowed = {"ZipFile", "SourceCode", "OssBucketName", "OssObjectName"} | ({"Checksum"} if fc3 else set())
    errors = [f"{path}.Code.{k}: unknown key (allowed: {', '.join(sorted(allowed))})" for k in code if k not in allowed]
    source = code.get("SourceCode")
    if code.get("ZipFile") is None and source is None:
        bucket, key = code.get("OssBucketName"), code.get("OssObjectName")
        if bucket is None or key is None:
            errors.append(f"{path}.Code: give ZipFile (base64 zip), SourceCode, or both OssBucketName and OssObjectName")
    if code.get("ZipFile") is None and isinstance(source, str):
        if len(source) > MAX_SOURCE_CODE:
            errors.append(f"{path}.Code.SourceCode: at most {MAX_SOURCE_CODE} characters, got {len(source)}")
        if isinstance(handler, str) and not handler.startswith("index."):
            errors.append(f"{path}.Handler: with Code.SourceCode the code is the file 'index', so the handler must "
                          f"start with 'index.', got {handler!r}")
    return errors


def _fc2_function_extra(props: Mapping[str, Any], path: str) -> list[str]:
    return _code_errors(props.get("Code"), props.get("Handler"), path, fc3=False)


def _fc3_function_extra(props: Mapping[str, Any], path: str) -> list[str]:
    errors = _code_errors(props.get("Code"), props.get("Handler"), path, fc3=True)
    if ("Code" in props) == ("CustomContainerConfig" in props):
        errors.append(f"{path}: give exactly one of Code and CustomContainerConfig")
    cpu, memory = props.get("Cpu"), props.get("MemorySize")
    if isinstance(cpu, (int, float)) and isinstance(memory, int) and cpu > 0:
        ratio = memory / 1024 / cpu
        if not 1 <= ratio <= 4:
            errors.append(f"{path}.Cpu: Cpu to MemorySize (GB) must be between 1:1 and 1:4, got {cpu} vCPU for {memory} MB")
    return errors


def _trigger_extra(props: Mapping[str, Any], path: str) -> list[str]:
    kind = props.get("TriggerType")
    if kind in (UNKNOWN, "timer", "http") or "InvocationRole" in props:
        return []
    return [f"{path}.InvocationRole: required for TriggerType {kind!r} (optional only for timer and http)"]


def lower_first(value: Any) -> Any:
    """TriggerConfig as the FC API takes it: ROS templates write PascalCase keys (deploy.md §1.3)."""
    if isinstance(value, dict):
        return {(k[:1].lower() + k[1:] if isinstance(k, str) else k): lower_first(v) for k, v in value.items()}
    if isinstance(value, list):
        return [lower_first(v) for v in value]
    return value


def _service_attributes(region: str, account: str, physical_id: str, props: Mapping[str, Any]) -> dict[str, Any]:
    log = props.get("LogConfig") or {}
    vpc = props.get("VpcConfig") or {}
    return {"ServiceId": stable_id(account, region, physical_id), "ServiceName": physical_id, "Role": props.get("Role", ""),
            "InternetAccess": props.get("InternetAccess", True), "LogProject": log.get("Project", ""),
            "Logstore": log.get("Logstore", ""), "Tags": props.get("Tags", []), "VpcId": vpc.get("VpcId", "")}


def _fc2_function_attributes(region: str, account: str, physical_id: str, props: Mapping[str, Any]) -> dict[str, Any]:
    service, function = props["ServiceName"], props["FunctionName"]
    return {"ARN": fc2_arn(region, account, service, function), "FunctionId": stable_id(account, region, service, function),
            "FunctionName": function, "ServiceId": stable_id(account, region, service), "ServiceName": service}


def _fc3_function_attributes(region: str, account: str, physical_id: str, props: Mapping[str, Any]) -> dict[str, Any]:
    return {"ARN": fc3_arn(region, account, physical_id), "FunctionId": stable_id(account, region, "fc3", physical_id),
            "FunctionName": physical_id}


def _trigger_urls(region: str, account: str, props: Mapping[str, Any], path: str) -> dict[str, str]:
    if props.get("TriggerType") != "http":
        return {"UrlInternet": "", "UrlIntranet": ""}
    return {"UrlInternet": f"https://{account}.{region}.fc.aliyuncs.com{path}",
            "UrlIntranet": f"https://{account}.{region}-internal.fc.aliyuncs.com{path}"}


def _fc2_trigger_attributes(region: str, account: str, physical_id: str, props: Mapping[str, Any]) -> dict[str, Any]:
    service, function, name = props["ServiceName"], props["FunctionName"], props["TriggerName"]
    path = f"/2016-08-15/proxy/{service}/{function}/"
    return {"TriggerId": stable_id(account, region, service, function, name), "TriggerName": name,
            "FunctionName": function, "ServiceName": service, **_trigger_urls(region, account, props, path)}


def _fc3_trigger_attributes(region: str, account: str, physical_id: str, props: Mapping[str, Any]) -> dict[str, Any]:
    function, name = props["FunctionName"], props["TriggerName"]
    return {"TriggerId": stable_id(account, region, "fc3", function, name), "TriggerName": name, "FunctionName": function,
            **_trigger_urls(region, account, props, f"/{function}")}


_COMMON_FUNCTION = {
    "Handler": Prop(required=True),
    "Runtime": Prop(required=True, choices=RUNTIMES),
    "Code": Prop(MAP),
    "Timeout": Prop(INTEGER, low=1, high=86400, default=3),
    "EnvironmentVariables": Prop(MAP),
    "InstanceConcurrency": Prop(INTEGER, low=1, high=100),
    "Description": Prop(high=256),
    "DiskSize": Prop(INTEGER, choices=(512, 10240)),
    "Cpu": Prop(NUMBER, low=0.05, high=16, multiple=0.05),
    "CustomContainerConfig": Prop(MAP), "CustomDNS": Prop(MAP), "CustomRuntimeConfig": Prop(MAP),
    "InstanceLifecycleConfig": Prop(MAP), "GpuMemorySize": Prop(INTEGER),
}

FC_SERVICE = CloudType(
    "ALIYUN::FC::Service",
    {"ServiceName": _NAME_128, "Role": Prop(), "InternetAccess": Prop(BOOLEAN), "Description": Prop(),
     "LogConfig": Prop(MAP), "VpcConfig": Prop(MAP), "VpcBindings": Prop(LIST, high=20), "NasConfig": Prop(MAP),
     "OssMountConfig": Prop(MAP), "TracingConfig": Prop(MAP), "Tags": Prop(LIST, high=20), "DeletionForce": Prop(BOOLEAN)},
    ("ServiceId", "ServiceName", "Role", "InternetAccess", "LogProject", "Logstore", "Tags", "VpcId"),
    physical_id=lambda p: str(p["ServiceName"]), attributes=_service_attributes,
)
FC_FUNCTION = CloudType(
    "ALIYUN::FC::Function",
    {"ServiceName": _NAME_128, "FunctionName": Prop(required=True, editable=False, low=1, high=128), **_COMMON_FUNCTION,
     "MemorySize": Prop(INTEGER, low=128, high=32768, multiple=64, default=128),
     "Initializer": Prop(), "InitializationTimeout": Prop(INTEGER, low=1, high=300, default=3),
     "InstanceSoftConcurrency": Prop(INTEGER, low=1, high=100),
     "InstanceType": Prop(choices=("e1", "c1", "fc.gpu.tesla.1", "fc.gpu.ampere.1", "fc.gpu.ada.1", "g1")),
     "AsyncConfiguration": Prop(MAP), "CAPort": Prop(INTEGER, default=9000), "CustomHealthCheckConfig": Prop(MAP)},
    ("ARN", "FunctionId", "FunctionName", "ServiceId", "ServiceName"),
    extra=_fc2_function_extra, physical_id=lambda p: f"{p['ServiceName']}|{p['FunctionName']}",
    attributes=_fc2_function_attributes,
)
FC_TRIGGER = CloudType(
    "ALIYUN::FC::Trigger",
    {"ServiceName": _NAME_128, "FunctionName": Prop(required=True, editable=False), "TriggerName": _TRIGGER_NAME,
     "TriggerType": Prop(required=True, editable=False, choices=TRIGGER_TYPES), "TriggerConfig": Prop(MAP, required=True),
     "InvocationRole": Prop(), "SourceArn": Prop(editable=False), "Qualifier": Prop()},
    ("TriggerId", "TriggerName", "FunctionName", "ServiceName", "UrlInternet", "UrlIntranet"),
    extra=_trigger_extra, physical_id=lambda p: f"{p['ServiceName']}|{p['FunctionName']}|{p['TriggerName']}",
    attributes=_fc2_trigger_attributes,
)
FC3_FUNCTION = CloudType(
    "ALIYUN::FC3::Function",
    {"FunctionName": _FC3_NAME, **_COMMON_FUNCTION,
     "MemorySize": Prop(INTEGER, low=128, high=65536, multiple=64, default=128),
     "InstanceConcurrency": Prop(INTEGER, low=1, high=200), "Role": Prop(), "InternetAccess": Prop(BOOLEAN),
     "Layers": Prop(LIST, low=1, high=100), "LogConfig": Prop(MAP), "VpcConfig": Prop(MAP), "NasConfig": Prop(MAP),
     "OssMountConfig": Prop(MAP), "GpuConfig": Prop(MAP), "TracingConfig": Prop(MAP), "Tags": Prop(LIST, high=20),
     "InstanceIsolationMode": Prop(choices=("SHARE", "SESSION_EXCLUSIVE", "REQUEST_EXCLUSIVE")),
     "DisableOndemand": Prop(BOOLEAN), "SessionAffinity": Prop(choices=("MCP_SSE", "GENERATED_COOKIE", "HEADER_FIELD", "NONE")),
     "SessionAffinityConfig": Prop(ANY)},
    ("ARN", "FunctionId", "FunctionName"),
    extra=_fc3_function_extra, physical_id=lambda p: str(p["FunctionName"]), attributes=_fc3_function_attributes,
)
FC3_TRIGGER = CloudType(
    "ALIYUN::FC3::Trigger",
    {"FunctionName": Prop(required=True, editable=False), "TriggerName": _TRIGGER_NAME,
     "TriggerType": Prop(required=True, editable=False, choices=FC3_TRIGGER_TYPES), "TriggerConfig": Prop(MAP, required=True),
     "Description": Prop(), "InvocationRole": Prop(), "Qualifier": Prop(), "SourceArn": Prop(editable=False)},
    ("FunctionName", "TriggerId", "TriggerName", "UrlInternet", "UrlIntranet"),
    physical_id=lambda p: f"{p['FunctionName']}|{p['TriggerName']}", attributes=_fc3_trigger_attributes,
)
FC3_ASYNC_INVOKE_CONFIG = CloudType(
    "ALIYUN::FC3::AsyncInvokeConfig",
    {"FunctionName": Prop(required=True, editable=False),
     "MaxAsyncRetryAttempts": Prop(INTEGER, low=0, high=8, default=3),
     "MaxAsyncEventAgeInSeconds": Prop(INTEGER, low=1, high=604800, default=86400),
     "AsyncTask": Prop(BOOLEAN), "DestinationConfig": Prop(MAP)},
    (),
    physical_id=lambda p: str(p["FunctionName"]), attributes=lambda region, account, physical_id, props: {},
)
TYPES = (FC_SERVICE, FC_FUNCTION, FC_TRIGGER, FC3_FUNCTION, FC3_TRIGGER, FC3_ASYNC_INVOKE_CONFIG)
