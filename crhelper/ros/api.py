"""The ROS 2019-09-10 OpenAPI over `LocalStacks`: signature check, parameter parsing, actions, ROS's errors.

What arrives is RPC style (`POST /`): the official SDK (`alibabacloud-ros20190910`) names the action
in `x-acs-action`, signs with ACS3-HMAC-SHA256 and puts parameters in the query (lists flattened as
`Parameters.1.ParameterKey`), `TemplateBody` in a form body; the `aliyun` CLI sends `Action` and
signs with RPC v1 HMAC-SHA1 (`Signature`, `SignatureNonce`). Both are verified with the shared
verifiers (`crhelper.cloud.signing`), each nonce refused when seen again within the skew window.
Answers are JSON with the SDK's field names; a refusal is ROS's error document (`RequestId`,
`HostId`, `Code`, `Message`, `Recommend`) with the HTTP status the SDK turns into an exception.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing import acs3, rpc
from crhelper.cloud.signing.alibaba import MAX_CLOCK_SKEW_SECONDS
from crhelper.cloud.signing.core import SignatureRejected, WireRequest
from crhelper.cloud.signing.replay import ReplayCache
from crhelper.ros.stacks import LocalStacks, RosError
from crhelper.logs import get_logger
from crhelper.servers import ApiResponse

__all__ = ["API_VERSION", "RosApi", "Params", "is_api_request", "error_response", "internal_error", "request_id"]

_log = get_logger("local")
API_VERSION = "2019-09-10"
DEFAULT_PAGE_SIZE = 10
MAX_PAGE_SIZE = 50
#: The parameters of the signature itself, never action input.
_SIGNING = frozenset({"Action", "Version", "Format", "Timestamp", "SignatureMethod", "SignatureVersion",
                      "SignatureNonce", "AccessKeyId", "Signature", "SecurityToken", "SignatureType"})
_INDEXED = re.compile(r"^(?P<name>[A-Za-z]+)\.(?P<index>\d+)(?:\.(?P<field>[A-Za-z]+))?$")
_TRUE, _FALSE = "true", "false"
#: ASCII digits only: `int()` alone would take "1_0", "+5" or Arabic-Indic digits.
_WHOLE = re.compile(r"^-?[0-9]{1,18}$")


def is_api_request(query: Mapping[str, list[str]], headers: Mapping[str, str], form: Mapping[str, list[str]]) -> bool:
    """An OpenAPI call (action in `x-acs-action` or an `Action` parameter) rather than a console page."""
    lowered = {k.lower(): v for k, v in headers.items()}
    return bool(lowered.get("x-acs-action")) or "Action" in query or "Action" in form


def request_id() -> str:
    """A RequestId as ROS writes them (an upper-case UUID)."""
    return str(uuid.uuid4()).upper()


def _json(status: int, body: Mapping[str, Any], request_id: str) -> ApiResponse:
    return ApiResponse(status, {"Content-Type": "application/json;charset=utf-8", "x-acs-request-id": request_id},
                       json.dumps(body, ensure_ascii=False).encode("utf-8"))


def error_response(error: RosError, request_id: str, host: str = "ros.aliyuncs.com") -> ApiResponse:
    """ROS's error document with its HTTP status."""
    return _json(error.status, {"RequestId": request_id, "HostId": host, "Code": error.code, "Message": error.message,
                                "Recommend": f"https://api.aliyun.com/troubleshoot?q={error.code}&product=ROS"},
                 request_id)


def missing(name: str) -> RosError:
    return RosError("MissingParameter", f"The input parameter {name} should be specified.", 400)


def internal_error() -> RosError:
    """ROS's server-side error (its common error table), for a fault of the local ROS itself."""
    return RosError("InternalError", "The request processing has failed due to some unknown error, exception or "
                                     "failure; the local ROS server's log has the details.", 500)


def invalid(name: str, reason: str) -> RosError:
    return RosError("InvalidParameter", f"The specified parameter {name} is invalid, {reason}.", 400)


class Params:
    """An action's decoded parameters with ROS's typing rules: booleans in any case, whole numbers,
    flattened lists (`Name.N` and `Name.N.Field`, in N order)."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = dict(values)

    def text(self, name: str) -> str | None:
        return self.values.get(name)

    def required(self, name: str) -> str:
        value = self.values.get(name)
        if value is None or value == "":
            raise missing(name)
        return value

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self.values.get(name)
        if value is None or value == "":
            return default
        lowered = value.strip().lower()
        if lowered not in (_TRUE, _FALSE):
            raise invalid(name, f"it must be true or false (any case), got {value[:32]!r}")
        return lowered == _TRUE

    def integer(self, name: str, default: int | None = None, low: int | None = None, high: int | None = None) -> int | None:
        value = self.values.get(name)
        if value is None or value == "":
            return default
        bounds = f"from {low}" + (f" to {high}" if high is not None else " up") if low is not None else ""
        if not _WHOLE.match(value.strip()):
            raise invalid(name, f"it must be a whole number{' ' + bounds if bounds else ''}, got {value[:32]!r}")
        number = int(value.strip())
        if (low is not None and number < low) or (high is not None and number > high):
            raise invalid(name, f"it must be {bounds}, got {number}")
        return number

    def _indexed(self, prefix: str) -> dict[int, dict[str, str]]:
        found: dict[int, dict[str, str]] = {}
        for key, value in self.values.items():
            match = _INDEXED.match(key)
            if match is None or match.group("name") != prefix:
                continue
            found.setdefault(int(match.group("index")), {})[match.group("field") or ""] = value
        return found

    def items(self, prefix: str) -> list[str]:
        """`Prefix.1`, `Prefix.2`, ... values in index order."""
        return [entry[""] for _, entry in sorted(self._indexed(prefix).items()) if "" in entry]

    def records(self, prefix: str, fields: tuple[str, ...]) -> list[dict[str, str]]:
        """`Prefix.N.Field` groups in index order; each must carry the first field."""
        result = []
        for index, entry in sorted(self._indexed(prefix).items()):
            if fields[0] not in entry:
                raise missing(f"{prefix}.{index}.{fields[0]}")
            result.append({name: entry.get(name, "") for name in fields})
        return result

    def parameters(self) -> dict[str, str]:
        """Parameters.N.ParameterKey / ParameterValue as a map; a key given twice is refused."""
        values: dict[str, str] = {}
        for record in self.records("Parameters", ("ParameterKey", "ParameterValue")):
            key = record["ParameterKey"]
            if key in values:
                raise invalid("Parameters", f"ParameterKey {key!r} is given more than once")
            values[key] = record["ParameterValue"]
        return values


def _page(items: list[Any], params: Params) -> tuple[list[Any], int, int]:
    number = params.integer("PageNumber", 1, low=1) or 1
    size = params.integer("PageSize", DEFAULT_PAGE_SIZE, low=1, high=MAX_PAGE_SIZE) or DEFAULT_PAGE_SIZE
    start = (number - 1) * size
    return items[start:start + size], number, size


def _template_body(params: Params, required: bool = True) -> str | None:
    body = params.text("TemplateBody")
    for unsupported in ("TemplateURL", "TemplateId", "TemplateScratchId"):
        if params.text(unsupported):
            raise RosError("NotSupported", f"{unsupported} is not supported by the local ROS; send the template "
                                           "itself as TemplateBody.", 400)
    if body is None or body == "":
        if required:
            raise missing("TemplateBody")
        return None
    return body


def _transport_content_type_dropped(request: WireRequest) -> WireRequest:
    """The request without a Content-Type that an ACS3 signature does not cover. The SDK's async
    transport (aiohttp, as iact3 uses it) adds `application/octet-stream` to bodiless calls after
    signing, and ROS accepts them; unsigned, the header declares nothing here: the body is then not
    read as form parameters (it is still covered by x-acs-content-sha256)."""
    authorization = request.header("authorization") or ""
    if request.header("content-type") is None or not authorization.lstrip().startswith(acs3.ALGORITHM):
        return request
    try:
        _, signed, _ = acs3.parse_authorization(authorization)
    except SignatureRejected:
        return request
    if "content-type" in signed:
        return request
    headers = {name: value for name, value in request.headers.items() if name != "content-type"}
    return WireRequest(request.method, request.target, headers, request.body)


class RosApi:
    """One request in, one ApiResponse out; see the module docstring.

    `keys` are the access keys callers sign with; `nonces` remembers signature nonces (None turns
    replay refusal off, for tests of something else)."""

    def __init__(self, stacks: LocalStacks, keys: Mapping[str, Credentials], *, nonces: ReplayCache | None,
                 max_skew: float = MAX_CLOCK_SKEW_SECONDS, clock: Callable[[], float] = time.time) -> None:
        self.stacks = stacks
        self._keys = dict(keys)
        self._nonces = nonces
        self._max_skew = max_skew
        self._clock = clock
        self._actions: dict[str, Callable[[Params], dict[str, Any]]] = {
            "CreateStack": self.create_stack, "UpdateStack": self.update_stack, "DeleteStack": self.delete_stack,
            "GetStack": self.get_stack, "ListStacks": self.list_stacks, "ListStackEvents": self.list_stack_events,
            "ListStackResources": self.list_stack_resources, "GetStackResource": self.get_stack_resource,
            "GetTemplate": self.get_template, "ValidateTemplate": self.validate_template,
            "PreviewStack": self.preview_stack, "DescribeRegions": self.describe_regions,
        }

    @property
    def actions(self) -> list[str]:
        return sorted(self._actions)

    def handle(self, request: WireRequest) -> ApiResponse:
        rid = request_id()
        host = request.header("host") or "ros.aliyuncs.com"
        try:
            body = self._handle(request)
        except SignatureRejected as rejected:
            return error_response(RosError(rejected.code, rejected.message, rejected.status), rid, host)
        except RosError as error:
            return error_response(error, rid, host)
        except RecursionError:  # a template (JSON or YAML) nested deeper than the parser goes
            return error_response(RosError("StackValidationFailed", "Stack validation failed: the template is nested "
                                           "too deeply to be read.", 400), rid, host)
        except Exception:  # noqa: BLE001 - a bug answers ROS's error shape, its traceback goes to the log only
            _log.error("ROS API request failed (RequestId %s)", rid, exc_info=True)
            return error_response(internal_error(), rid, host)
        return _json(200, {"RequestId": rid, **body}, rid)

    def _authenticate(self, request: WireRequest) -> dict[str, str]:
        request = _transport_content_type_dropped(request)
        parameters = rpc.request_parameters(request)
        now = self._clock()
        if request.header("authorization") or "Signature" not in parameters:
            acs3.verify(request, self._keys, now=now, nonces=self._nonces, max_skew=self._max_skew)
        else:
            rpc.verify(request, self._keys, now=now, nonces=self._nonces, max_skew=self._max_skew)
        return parameters

    def _handle(self, request: WireRequest) -> dict[str, Any]:
        parameters = self._authenticate(request)
        action = request.header("x-acs-action") or parameters.get("Action", "")
        if not action:
            raise missing("Action")
        version = request.header("x-acs-version") or parameters.get("Version", "")
        if version != API_VERSION:
            raise RosError("InvalidVersion", f"Specified parameter Version is not valid: ROS is {API_VERSION}, "
                                             f"got {version[:32]!r}.", 400)
        handler = self._actions.get(action)
        if handler is None:
            raise RosError("InvalidAction.NotFound",
                           "Specified api is not found, please check your url and method. "  # the gateway's words
                           f"(The local ROS serves {', '.join(self.actions)}; got {action[:64]!r}.)", 404)
        params = Params({k: v for k, v in parameters.items() if k not in _SIGNING})
        region = params.text("RegionId")
        if region and region != self.stacks.region:
            raise invalid("RegionId", f"the local ROS serves region {self.stacks.region}, got {region[:32]!r}")
        if not region and action not in ("DescribeRegions", "GetTemplate", "ValidateTemplate"):
            raise missing("RegionId")
        return handler(params)

    # ------------------------------------------------------------------ actions

    def create_stack(self, params: Params) -> dict[str, Any]:
        stack_id = self.stacks.create(
            params.required("StackName"), _template_body(params) or "", params.parameters(),
            disable_rollback=params.boolean("DisableRollback"),
            timeout_minutes=params.integer("TimeoutInMinutes"), client_token=params.text("ClientToken"),
            parallelism=params.integer("Parallelism", low=0),
            tags={t["Key"]: t["Value"] for t in params.records("Tags", ("Key", "Value"))})
        return {"StackId": stack_id}

    def update_stack(self, params: Params) -> dict[str, Any]:
        if params.boolean("DryRun"):
            raise RosError("NotSupported", "DryRun is not supported by the local ROS; PreviewStack shows what "
                                           "a template deploys.", 400)
        stack_id = self.stacks.update(
            params.required("StackId"), _template_body(params, required=False), params.parameters(),
            use_previous_parameters=params.boolean("UsePreviousParameters"),
            disable_rollback=params.boolean("DisableRollback"), timeout_minutes=params.integer("TimeoutInMinutes"),
            client_token=params.text("ClientToken"), parallelism=params.integer("Parallelism", low=0))
        return {"StackId": stack_id}

    def delete_stack(self, params: Params) -> dict[str, Any]:
        self.stacks.delete(params.required("StackId"), retain_resources=list(dict.fromkeys(params.items("RetainResources"))),
                           retain_all=params.boolean("RetainAllResources"), client_token=params.text("ClientToken"))
        return {}

    def get_stack(self, params: Params) -> dict[str, Any]:
        stack_id = params.required("StackId")
        stack = self.stacks.get(stack_id)
        option = (params.text("OutputOption") or "Enabled").lower()
        if option == "disabled":
            stack.pop("Outputs", None)
        if (params.text("ShowResourceProgress") or "").lower() == "enabled":
            stack["ResourceProgress"] = _progress(self.stacks.resources(stack_id))
        return stack

    def list_stacks(self, params: Params) -> dict[str, Any]:
        statuses = set(params.items("Status"))
        names = set(params.items("StackName"))
        ids = set(params.items("StackIds")) | ({params.text("StackId")} if params.text("StackId") else set())
        stacks = [s for s in self.stacks.list(include_deleted="DELETE_COMPLETE" in statuses)
                  if (not statuses or s["Status"] in statuses) and (not names or s["StackName"] in names)
                  and (not ids or s["StackId"] in ids)]
        page, number, size = _page(stacks, params)
        return {"Stacks": page, "PageNumber": number, "PageSize": size, "TotalCount": len(stacks)}

    def list_stack_events(self, params: Params) -> dict[str, Any]:
        events = self.stacks.events(params.required("StackId"))
        logical, types, statuses = set(params.items("LogicalResourceId")), set(params.items("ResourceType")), \
            set(params.items("Status"))
        chosen = [e for e in reversed(events)  # newest first
                  if (not logical or e["LogicalResourceId"] in logical) and (not types or e["ResourceType"] in types)
                  and (not statuses or e["Status"] in statuses)]
        page, number, size = _page(chosen, params)
        return {"Events": page, "PageNumber": number, "PageSize": size, "TotalCount": len(chosen)}

    def list_stack_resources(self, params: Params) -> dict[str, Any]:
        return {"Resources": [_resource_summary(r) for r in self.stacks.resources(params.required("StackId"))]}

    def get_stack_resource(self, params: Params) -> dict[str, Any]:
        resource = self.stacks.resource(params.required("StackId"), params.required("LogicalResourceId"))
        answer = _resource_summary(resource)
        answer.update({"Metadata": {}, "Description": "", "ResourceAttributes": []})
        if params.boolean("ShowResourceAttributes"):
            wanted = set(params.items("ResourceAttributes"))
            answer["ResourceAttributes"] = [{"Key": k, "Value": v} for k, v in sorted(resource["Data"].items())
                                            if not wanted or k in wanted]
        return answer

    def get_template(self, params: Params) -> dict[str, Any]:
        for unsupported in ("ChangeSetId", "StackGroupName", "TemplateId"):
            if params.text(unsupported):
                raise RosError("NotSupported", f"GetTemplate by {unsupported} is not supported by the local ROS; "
                                               "give StackId.", 400)
        stack_id = self.stacks.stack_id_of(params.required("StackId"))
        return {"StackId": stack_id, "TemplateBody": self.stacks.template(stack_id)}

    def validate_template(self, params: Params) -> dict[str, Any]:
        return self.stacks.validate(_template_body(params) or "")

    def preview_stack(self, params: Params) -> dict[str, Any]:
        name = params.text("StackName")
        if not name:
            stack_id = params.text("StackId")
            if not stack_id:
                raise RosError("MissingParameter", "One of the input parameters StackName, StackId should be specified.", 400)
            name = self.stacks.get(stack_id)["StackName"]
        preview = self.stacks.preview(name, _template_body(params) or "", params.parameters())
        preview["DisableRollback"] = params.boolean("DisableRollback")
        preview["TimeoutInMinutes"] = params.integer("TimeoutInMinutes") or preview["TimeoutInMinutes"]
        return {"Stack": preview}

    def describe_regions(self, params: Params) -> dict[str, Any]:
        region = self.stacks.region
        return {"Regions": [{"RegionId": region, "LocalName": f"{region} (local)", "RegionEndpoint": "ros.aliyuncs.com"}]}


def _resource_summary(resource: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("LogicalResourceId", "PhysicalResourceId", "ResourceType", "Status", "StatusReason", "CreateTime",
            "UpdateTime", "StackId", "StackName")
    return {key: resource[key] for key in keys}


def _progress(resources: list[dict[str, Any]]) -> dict[str, Any]:
    def count(predicate: Callable[[str], bool]) -> int:
        return sum(1 for r in resources if predicate(r["Status"]))

    return {"TotalResourceCount": len(resources),
            "SuccessResourceCount": count(lambda s: s.endswith("_COMPLETE") and s != "INIT_COMPLETE"),
            "FailedResourceCount": count(lambda s: s.endswith("_FAILED")),
            "InProgressResourceCount": count(lambda s: s.endswith("_IN_PROGRESS")),
            "PendingResourceCount": count(lambda s: s == "INIT_COMPLETE")}
