"""The FC 3.0 API (`/2023-03-30/...`) of the local Function Compute, as `alibabacloud-fc20230330`
sends it: functions, triggers, async configuration and invocations. No sockets here.

Errors are FC 3.0's JSON `{"Code", "Message", "RequestId"}` with FC's status; the Tea SDK raises
them as `ClientException` carrying that code. Function errors are HTTP 200 with
`x-fc-error-type`, as in FC 2.0 (the invoke path is shared).
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping
from urllib.parse import parse_qs, unquote

from crhelper.local.fc_manage import (
    AsyncConfigRecord, FunctionCall, FunctionRecord, Management, TriggerRecord, function_call, iso_time,
)
from crhelper.local.fc_protocol import FcApiError, management_response, path_not_supported
from crhelper.local.fc_registry import FC3_SERVICE, FunctionSpec
from crhelper.servers import ApiResponse

API_VERSION = "2023-03-30"
PREFIX = f"/{API_VERSION}/"

#: (request id, function spec, qualifier, headers, payload) -> the invocation's answer.
Invoke = Callable[[str, FunctionSpec, "str | None", Mapping[str, str], bytes], ApiResponse]

_ROUTE = re.compile(r"^/2023-03-30/functions(?:/(?P<function>[^/]+)(?:/(?P<sub>invocations|triggers|async-invoke-config)"
                    r"(?:/(?P<trigger>[^/]+))?)?)?/?$")


def error_body(err: FcApiError, request_id: str) -> bytes:
    return json.dumps({"Code": err.code, "Message": err.message, "RequestId": request_id}).encode("utf-8")


def function_arn(region: str, account_id: str, name: str) -> str:
    return f"acs:fc:{region}:{account_id}:functions/{name}"


class Fc3Api:
    """Routes one verified FC 3.0 request to the management model or to `invoke`."""

    def __init__(self, management: Management, invoke: Invoke, registry_lookup: Callable[[str, str], FunctionSpec],
                 *, region: str, account_id: str) -> None:
        self._manage = management
        self._invoke = invoke
        self._lookup = registry_lookup
        self._region = region
        self._account = account_id

    def handle(self, request_id: str, method: str, raw_target: str, headers: Mapping[str, str],
               body: bytes) -> ApiResponse:
        raw_path, _, raw_query = raw_target.partition("?")
        path = unquote(raw_path)
        query = {k: v[-1] for k, v in parse_qs(raw_query, keep_blank_values=True).items()}
        match = _ROUTE.match(path)
        method = method.upper()
        if match is None:
            raise path_not_supported(method, path)
        function, sub, trigger = match.group("function"), match.group("sub"), match.group("trigger")
        if sub == "invocations" and method == "POST" and trigger is None:
            assert function is not None
            spec = self._lookup(FC3_SERVICE, function)
            return self._invoke(request_id, spec, query.get("qualifier") or None, headers, body)
        call = FunctionCall(method, path, FC3_SERVICE, function, sub, trigger, query.get("qualifier") or "LATEST",
                            query, body)
        return management_response(request_id, function_call(self._manage, self, 3, call))

    def render_function(self, record: FunctionRecord) -> dict[str, Any]:
        fields = dict(record.fields)
        fields.pop("initializer", None)
        return {**fields, "functionName": record.name, "functionId": record.function_id,
                "functionArn": function_arn(self._region, self._account, record.name),
                "codeChecksum": record.checksum, "codeSize": record.code_size,
                "createdTime": iso_time(record.created), "lastModifiedTime": iso_time(record.modified),
                "state": "Active", "lastUpdateStatus": "Successful"}

    def render_trigger(self, record: TriggerRecord) -> dict[str, Any]:
        return {**record.fields, "triggerName": record.name, "triggerType": record.trigger_type,
                "triggerConfig": json.dumps(record.config), "triggerId": record.trigger_id,
                "createdTime": iso_time(record.created), "lastModifiedTime": iso_time(record.modified),
                "status": "Success"}

    def render_async(self, record: AsyncConfigRecord) -> dict[str, Any]:
        return {**record.fields, "functionArn": function_arn(self._region, self._account, record.function),
                "createdTime": iso_time(record.created), "lastModifiedTime": iso_time(record.modified)}

