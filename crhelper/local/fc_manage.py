"""The management model of the local Function Compute, shared by the FC 2.0 and FC 3.0 APIs:
services (2.0 only), functions with their deployed code, triggers and async configurations.

No HTTP here: each operation takes the decoded JSON body (FC's camelCase fields), checks it as FC
does (400 InvalidArgument naming the field and the rule, 404 ...NotFound, 409 ...AlreadyExists)
and keeps the registry the invoke path reads in step. Records hold FC's fields; the API modules
render them in their version's shape. FC 3.0 functions live under the service "" (`FC3_SERVICE`).
"""
from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Protocol

from crhelper.local.fc_code import CodeLimits, CodeStore, OssReader, code_checksum, decode_zip_field
from crhelper.local.fc_manage_timers import DueTimer, ScheduleError, parse_schedule
from crhelper.local.fc_protocol import FcApiError, path_not_supported
from crhelper.local.fc_registry import FC3_SERVICE, MAX_TIMEOUT_SECONDS, FunctionRegistry, FunctionSpec, split_handler

#: Runtimes the local endpoint can run (Python ones: the handler runs in a Python worker).
PYTHON_RUNTIMES = ("python3", "python3.9", "python3.10", "python3.12")
TRIGGER_TYPES = ("timer", "http", "oss", "log", "mns_topic", "cdn_events", "tablestore", "eventbridge")
MAX_ASYNC_RETRIES = 8
MAX_EVENT_AGE = {2: 2_592_000, 3: 604_800}

_NAMES = {2: re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,127}$"), 3: re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")}
_NAME_RULE = {2: "1-128 letters, digits, '_' or '-', starting with a letter or '_'",
              3: "1-64 letters, digits, '_' or '-', starting with a letter or '_'"}


def iso_time(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def invalid(field_name: str, rule: str) -> FcApiError:
    return FcApiError(400, "InvalidArgument", f"{field_name}: {rule}")


def check_name(value: Any, field_name: str, version: int) -> str:
    if not isinstance(value, str) or not _NAMES[version].match(value):
        raise invalid(field_name, f"must be {_NAME_RULE[version]}")
    return value


def _int(body: Mapping[str, Any], name: str, low: int, high: int, default: int | None) -> int | None:
    value = body.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(name, f"must be an integer from {low} to {high}")
    return value


def _env(body: Mapping[str, Any], default: Mapping[str, str]) -> dict[str, str]:
    value = body.get("environmentVariables", default)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise invalid("environmentVariables", "must be an object mapping names to string values")
    return dict(value)


@dataclass
class ServiceRecord:
    name: str
    fields: dict[str, Any]
    service_id: str
    created: float
    modified: float


@dataclass
class FunctionRecord:
    """A function as FC holds it: `fields` are its settings (FC's names), `spec` what the invoke path runs."""

    service: str
    name: str
    fields: dict[str, Any]
    spec: FunctionSpec
    function_id: str
    checksum: str
    code_size: int
    created: float
    modified: float


@dataclass
class TriggerRecord:
    service: str
    function: str
    name: str
    trigger_type: str
    config: dict[str, Any]
    fields: dict[str, Any]
    trigger_id: str
    created: float
    modified: float


@dataclass
class AsyncConfigRecord:
    service: str
    function: str
    qualifier: str
    fields: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    modified: float = 0.0

    @property
    def max_retries(self) -> int | None:
        value = self.fields.get("maxAsyncRetryAttempts")
        return value if isinstance(value, int) else None


_SERVICE_FIELDS = ("description", "role", "internetAccess", "logConfig", "vpcConfig", "nasConfig",
                   "ossMountConfig", "tracingConfig")
_FUNCTION_FIELDS = ("description", "role", "layers", "cpu", "diskSize", "instanceConcurrency",
                    "internetAccess", "logConfig", "vpcConfig", "instanceLifecycleConfig", "initializationTimeout",
                    "instanceType", "caPort")


class Management:
    """Thread-safe; one per endpoint. `oss` reads code objects (None: OSS code is refused)."""

    def __init__(self, registry: FunctionRegistry, code: CodeStore, *, oss: OssReader | None,
                 limits: CodeLimits = CodeLimits(), clock: Callable[[], float] = time.time) -> None:
        self._registry = registry
        self._code = code
        self._oss = oss
        self._limits = limits
        self._clock = clock
        self._lock = threading.RLock()
        self.services: dict[str, ServiceRecord] = {}
        self.functions: dict[tuple[str, str], FunctionRecord] = {}
        self.triggers: dict[tuple[str, str, str], TriggerRecord] = {}
        self.async_configs: dict[tuple[str, str, str], AsyncConfigRecord] = {}

    # ------------------------------------------------------------------ services (FC 2.0)

    def create_service(self, body: Mapping[str, Any]) -> ServiceRecord:
        name = check_name(body.get("serviceName"), "serviceName", 2)
        now = self._clock()
        with self._lock:
            if name in self.services or self._has_functions(name):
                raise FcApiError(409, "ServiceAlreadyExists", f"service '{name}' already exists")
            record = ServiceRecord(name, {k: body[k] for k in _SERVICE_FIELDS if k in body},
                                   str(uuid.uuid4()), now, now)
            self.services[name] = record
            self._registry.add_service(name)
            return record

    def service(self, name: str) -> ServiceRecord:
        with self._lock:
            record = self.services.get(name)
        if record is None:
            raise FcApiError(404, "ServiceNotFound", f"service '{name}' does not exist")
        return record

    def update_service(self, name: str, body: Mapping[str, Any]) -> ServiceRecord:
        with self._lock:
            record = self.service(name)
            record.fields.update({k: body[k] for k in _SERVICE_FIELDS if k in body})
            record.modified = self._clock()
            return record

    def delete_service(self, name: str) -> None:
        with self._lock:
            self.service(name)
            if self._has_functions(name):
                raise FcApiError(409, "ServiceNotEmpty", f"service '{name}' is not empty: delete its functions first")
            del self.services[name]
            self._registry.remove_service(name)

    def list_services(self, prefix: str, limit: int, token: str) -> tuple[list[ServiceRecord], str]:
        with self._lock:
            names = sorted(n for n in self.services if n.startswith(prefix) and n >= token)
            page = [self.services[n] for n in names[:limit]]
        return page, names[limit] if len(names) > limit else ""

    def _has_functions(self, service: str) -> bool:
        return any(s == service for s, _ in self.functions)

    # ------------------------------------------------------------------ functions

    def _known_service(self, service: str) -> None:
        if service != FC3_SERVICE:
            self.service(service)

    def create_function(self, service: str, body: Mapping[str, Any], version: int) -> FunctionRecord:
        name = check_name(body.get("functionName"), "functionName", version)
        with self._lock:
            self._known_service(service)
            if (service, name) in self.functions:
                raise FcApiError(409, "FunctionAlreadyExists", self._function_text(service, name, "already exists"))
            if "code" not in body or not body.get("code"):
                raise invalid("code", "is required: give code.zipFile (base64) or code.ossBucketName and code.ossObjectName")
            record = self._build(service, name, body, None, version)
            self.functions[(service, name)] = record
            self._registry.add(record.spec)
            return record

    def update_function(self, service: str, name: str, body: Mapping[str, Any], version: int) -> FunctionRecord:
        with self._lock:
            current = self.function(service, name)
            record = self._build(service, name, body, current, version)
            self.functions[(service, name)] = record
            self._registry.add(record.spec)
            return record

    def function(self, service: str, name: str) -> FunctionRecord:
        with self._lock:
            self._known_service(service)
            record = self.functions.get((service, name))
        if record is None:
            raise FcApiError(404, "FunctionNotFound", self._function_text(service, name, "does not exist"))
        return record

    def delete_function(self, service: str, name: str) -> None:
        with self._lock:
            self.function(service, name)
            if service != FC3_SERVICE and any(k[:2] == (service, name) for k in self.triggers):
                raise FcApiError(409, "FunctionNotEmpty",
                                 f"function '{name}' of service '{service}' has triggers: delete them first")
            for key in [k for k in self.triggers if k[:2] == (service, name)]:
                del self.triggers[key]
            for key in [k for k in self.async_configs if k[:2] == (service, name)]:
                del self.async_configs[key]
            del self.functions[(service, name)]
            self._registry.remove(service, name)
            self._code.remove(service, name)

    def list_functions(self, service: str, prefix: str, limit: int, token: str) -> tuple[list[FunctionRecord], str]:
        with self._lock:
            self._known_service(service)
            names = sorted(n for s, n in self.functions if s == service and n.startswith(prefix) and n >= token)
            page = [self.functions[(service, n)] for n in names[:limit]]
        return page, names[limit] if len(names) > limit else ""

    @staticmethod
    def _function_text(service: str, name: str, what: str) -> str:
        return f"function '{name}' {what}" if service == FC3_SERVICE else f"function '{name}' of service '{service}' {what}"

    def _code_bytes(self, code: Any) -> tuple[bytes, str]:
        """(zip bytes, the field they came from) of a `code` object."""
        if not isinstance(code, dict):
            raise invalid("code", "must be an object with zipFile, or ossBucketName and ossObjectName")
        if code.get("zipFile"):
            return decode_zip_field(code["zipFile"], "code.zipFile", self._limits), "code.zipFile"
        bucket, key = code.get("ossBucketName"), code.get("ossObjectName")
        if not bucket or not key or not isinstance(bucket, str) or not isinstance(key, str):
            raise invalid("code", "give zipFile (base64), or both ossBucketName and ossObjectName")
        if self._oss is None:
            raise invalid("code.ossBucketName", "this local endpoint has no OSS configured (oss_url)")
        limit = self._limits.max_oss_zip
        data = self._oss(bucket, key, limit)
        if len(data) > limit:
            raise FcApiError(400, "CodeSizeLimitExceeded", f"code.ossObjectName: the object is over {limit} bytes")
        return data, "code.ossObjectName"

    def _build(self, service: str, name: str, body: Mapping[str, Any], current: FunctionRecord | None,
               version: int) -> FunctionRecord:
        """Check every field (defaults from `current` on update), then install any new code."""
        old: Mapping[str, Any] = current.fields if current is not None else {}
        runtime = body.get("runtime", old.get("runtime"))
        if runtime not in PYTHON_RUNTIMES:
            raise invalid("runtime", f"must be one of {', '.join(PYTHON_RUNTIMES)} (the local endpoint runs Python); "
                                     f"got {str(runtime)[:32]!r}")
        handler = body.get("handler", old.get("handler"))
        try:
            split_handler(handler if isinstance(handler, str) else "")
        except ValueError:
            raise invalid("handler", "must look like 'module.function' (e.g. index.handler)") from None
        initializer = body.get("initializer", old.get("initializer")) or None
        if initializer is not None:
            try:
                split_handler(initializer if isinstance(initializer, str) else "")
            except ValueError:
                raise invalid("initializer", "must look like 'module.function'") from None
        timeout = _int(body, "timeout", 1, MAX_TIMEOUT_SECONDS, old.get("timeout", 3))
        memory = _int(body, "memorySize", 128, 32768 if version == 2 else 65536, old.get("memorySize", 128))
        assert timeout is not None and memory is not None
        if memory % 64:
            raise invalid("memorySize", "must be a multiple of 64 MB")
        env = _env(body, old.get("environmentVariables") or {})
        fields = {k: v for k, v in old.items()}
        fields.update({k: body[k] for k in _FUNCTION_FIELDS if k in body})
        fields.update(runtime=runtime, handler=handler, timeout=timeout, memorySize=memory,
                      environmentVariables=env, initializer=initializer or "")
        now = self._clock()
        checksum, size = (current.checksum, current.code_size) if current is not None else ("", 0)
        code_dir = current.spec.code_dir if current is not None else None
        if body.get("code"):
            data, source = self._code_bytes(body["code"])
            given = body["code"].get("checksum") if isinstance(body["code"], dict) else None
            if given and str(given) != code_checksum(data):
                raise invalid("code.checksum", "does not match the CRC-64 of the zip")
            limits = replace(self._limits, max_zip=self._limits.max_oss_zip) if source == "code.ossObjectName" else None
            deployed = self._code.install(service, name, data, source, limits)
            code_dir, checksum, size = deployed.code_dir, deployed.checksum, deployed.size
        spec = FunctionSpec(service, name, handler, float(timeout), memory, env, initializer,
                            code_dir=code_dir, runtime=runtime)
        if current is not None:
            return replace(current, fields=fields, spec=spec, checksum=checksum, code_size=size, modified=now)
        return FunctionRecord(service, name, fields, spec, str(uuid.uuid4()), checksum, size, now, now)

    # ------------------------------------------------------------------ triggers

    def create_trigger(self, service: str, function: str, body: Mapping[str, Any], version: int) -> TriggerRecord:
        name = check_name(body.get("triggerName"), "triggerName", 2)
        trigger_type = body.get("triggerType")
        if trigger_type not in TRIGGER_TYPES:
            raise invalid("triggerType", f"must be one of {', '.join(TRIGGER_TYPES)}")
        config = _trigger_config(body.get("triggerConfig"), version, required=True)
        _check_trigger(str(trigger_type), config)
        now = self._clock()
        with self._lock:
            self.function(service, function)
            if (service, function, name) in self.triggers:
                raise FcApiError(409, "TriggerAlreadyExists", f"trigger '{name}' of function '{function}' already exists")
            record = TriggerRecord(service, function, name, str(trigger_type), config,
                                   {k: body[k] for k in ("sourceArn", "invocationRole", "qualifier", "description")
                                    if body.get(k) is not None},
                                   str(uuid.uuid4()), now, now)
            self.triggers[(service, function, name)] = record
            return record

    def trigger(self, service: str, function: str, name: str) -> TriggerRecord:
        with self._lock:
            self.function(service, function)
            record = self.triggers.get((service, function, name))
        if record is None:
            raise FcApiError(404, "TriggerNotFound", f"trigger '{name}' of function '{function}' does not exist")
        return record

    def update_trigger(self, service: str, function: str, name: str, body: Mapping[str, Any], version: int) -> TriggerRecord:
        with self._lock:
            record = self.trigger(service, function, name)
            if "triggerConfig" in body:
                config = _trigger_config(body.get("triggerConfig"), version, required=True)
                _check_trigger(record.trigger_type, config)
                record.config = config
            record.fields.update({k: body[k] for k in ("invocationRole", "qualifier", "description")
                                  if body.get(k) is not None})
            record.modified = self._clock()
            return record

    def delete_trigger(self, service: str, function: str, name: str) -> None:
        with self._lock:
            self.trigger(service, function, name)
            del self.triggers[(service, function, name)]

    def list_triggers(self, service: str, function: str, prefix: str, limit: int,
                      token: str) -> tuple[list[TriggerRecord], str]:
        with self._lock:
            self.function(service, function)
            names = sorted(n for s, f, n in self.triggers if (s, f) == (service, function)
                           and n.startswith(prefix) and n >= token)
            page = [self.triggers[(service, function, n)] for n in names[:limit]]
        return page, names[limit] if len(names) > limit else ""

    # ------------------------------------------------------------------ async configuration

    def put_async_config(self, service: str, function: str, qualifier: str, body: Mapping[str, Any],
                         version: int) -> AsyncConfigRecord:
        if not isinstance(body, dict):
            raise invalid("body", "must be a JSON object")
        _int(body, "maxAsyncRetryAttempts", 0, MAX_ASYNC_RETRIES, None)
        _int(body, "maxAsyncEventAgeInSeconds", 1, MAX_EVENT_AGE[version], None)
        for name in ("asyncTask", "statefulInvocation"):
            if name in body and not isinstance(body[name], bool):
                raise invalid(name, "must be true or false")
        if "destinationConfig" in body and not isinstance(body["destinationConfig"], (dict, type(None))):
            raise invalid("destinationConfig", "must be an object with onSuccess/onFailure destinations")
        now = self._clock()
        with self._lock:
            self.function(service, function)
            key = (service, function, qualifier)
            record = self.async_configs.get(key) or AsyncConfigRecord(service, function, qualifier, created=now)
            record.fields = {k: v for k, v in body.items()
                             if k in ("maxAsyncRetryAttempts", "maxAsyncEventAgeInSeconds", "destinationConfig",
                                      "asyncTask", "statefulInvocation")}
            record.modified = now
            self.async_configs[key] = record
            return record

    def async_config(self, service: str, function: str, qualifier: str) -> AsyncConfigRecord:
        with self._lock:
            self.function(service, function)
            record = self.async_configs.get((service, function, qualifier))
        if record is None:
            target = function if service == FC3_SERVICE else f"{service}:{function}"
            raise FcApiError(404, "AsyncConfigNotExists", f"AsyncConfig for {target}:{qualifier} does not exist.")
        return record

    def delete_async_config(self, service: str, function: str, qualifier: str) -> None:
        with self._lock:
            self.async_config(service, function, qualifier)
            del self.async_configs[(service, function, qualifier)]

    def max_async_retries(self, service: str, function: str, qualifier: str | None) -> int | None:
        """The function's maxAsyncRetryAttempts for this qualifier (LATEST when none), if configured."""
        with self._lock:
            record = self.async_configs.get((service, function, qualifier or "LATEST"))
        return record.max_retries if record is not None else None

    def enabled_timers(self) -> list[DueTimer]:
        """The timer triggers that fire now (`enable` true; FC's default is true)."""
        with self._lock:
            triggers = [t for t in self.triggers.values() if t.trigger_type == "timer" and t.config.get("enable", True)]
        return [DueTimer(t.service, t.function, t.name, t.fields.get("qualifier") or None,
                         parse_schedule(t.config.get("cronExpression")), t.config.get("payload")) for t in triggers]

    def close(self) -> None:
        self._code.close()


def _trigger_config(value: Any, version: int, *, required: bool) -> dict[str, Any]:
    """FC 3.0 sends triggerConfig as a JSON string, FC 2.0 as an object; either way an object."""
    if value is None and not required:
        return {}
    if isinstance(value, str) and version == 3:
        try:
            value = json.loads(value)
        except ValueError:
            raise invalid("triggerConfig", "must be a JSON object encoded as a string") from None
    if not isinstance(value, dict):
        raise invalid("triggerConfig", "must be a JSON object" + (" encoded as a string" if version == 3 else ""))
    return value


def _check_trigger(trigger_type: str, config: Mapping[str, Any]) -> None:
    """A timer trigger needs a schedule the endpoint can fire; other types are kept as given."""
    if trigger_type != "timer":
        return
    try:
        parse_schedule(config.get("cronExpression"))
    except ScheduleError as exc:
        raise invalid("triggerConfig.cronExpression", str(exc)) from None
    if "enable" in config and not isinstance(config["enable"], bool):
        raise invalid("triggerConfig.enable", "must be true or false")


def parse_limit(value: str | None, name: str = "limit", default: int = 20, high: int = 100) -> int:
    if value is None or value == "":
        return default
    if not value.isdigit() or not 1 <= int(value) <= high:
        raise invalid(name, f"must be an integer from 1 to {high}")
    return int(value)



def json_body(body: bytes) -> dict[str, Any]:
    """A management call's JSON object body; 400 InvalidArgument otherwise."""
    try:
        value = json.loads(body or b"{}")
    except (ValueError, RecursionError):
        raise invalid("body", "must be a JSON object") from None
    if not isinstance(value, dict):
        raise invalid("body", "must be a JSON object")
    return value


def page(key: str, items: list[dict[str, Any]], next_token: str) -> dict[str, Any]:
    """A List call's answer: the items under `key`, and `nextToken` when more follow."""
    return {key: items, **({"nextToken": next_token} if next_token else {})}


class Renderer(Protocol):
    """How one API version shows records."""

    def render_function(self, record: FunctionRecord) -> dict[str, Any]: ...

    def render_trigger(self, record: TriggerRecord) -> dict[str, Any]: ...

    def render_async(self, record: AsyncConfigRecord) -> dict[str, Any]: ...


@dataclass(frozen=True)
class FunctionCall:
    """A management call on functions, their triggers or async configuration, as routed from a path."""

    method: str
    path: str
    service: str
    function: str | None
    sub: str | None  # None, "triggers" or "async-invoke-config"
    trigger: str | None
    qualifier: str
    query: Mapping[str, str]
    body: bytes


def function_call(manage: Management, show: Renderer, version: int, call: FunctionCall) -> Any:
    """Run `call` for either version; the JSON answer, None for 204, or 400 PathNotSupported."""
    m, s, method, function, trigger = manage, call.service, call.method, call.function, call.trigger
    token = call.query.get("nextToken") or call.query.get("startKey", "")
    prefix, limit = call.query.get("prefix", ""), parse_limit(call.query.get("limit"))
    if function is None:
        if method == "POST":
            return show.render_function(m.create_function(s, json_body(call.body), version))
        if method == "GET":
            found, more = m.list_functions(s, prefix, limit, token)
            return page("functions", [show.render_function(r) for r in found], more)
    elif call.sub is None:
        if method == "GET":
            return show.render_function(m.function(s, function))
        if method == "PUT":
            return show.render_function(m.update_function(s, function, json_body(call.body), version))
        if method == "DELETE":
            m.delete_function(s, function)
            return None
    elif call.sub == "triggers" and trigger is None:
        if method == "POST":
            return show.render_trigger(m.create_trigger(s, function, json_body(call.body), version))
        if method == "GET":
            triggers, more = m.list_triggers(s, function, prefix, limit, token)
            return page("triggers", [show.render_trigger(r) for r in triggers], more)
    elif call.sub == "triggers" and trigger is not None:
        if method == "GET":
            return show.render_trigger(m.trigger(s, function, trigger))
        if method == "PUT":
            return show.render_trigger(m.update_trigger(s, function, trigger, json_body(call.body), version))
        if method == "DELETE":
            m.delete_trigger(s, function, trigger)
            return None
    elif call.sub == "async-invoke-config" and trigger is None:
        if method == "PUT":
            return show.render_async(m.put_async_config(s, function, call.qualifier, json_body(call.body), version))
        if method == "GET":
            return show.render_async(m.async_config(s, function, call.qualifier))
        if method == "DELETE":
            m.delete_async_config(s, function, call.qualifier)
            return None
    raise path_not_supported(method, call.path)
