"""FC 2.0's management calls (`/2016-08-15/services/...`) as the `fc2` SDK sends them: services,
functions with their code, triggers and async configuration. No sockets here; errors are FC 2.0's
`{"ErrorCode", "ErrorMessage"}` (FcApiError), which `fc2` raises as `FcError` with that code."""
from __future__ import annotations

import re
from typing import Any, Mapping
from urllib.parse import parse_qs

from crhelper.local.fc_manage import (
    AsyncConfigRecord, FunctionCall, FunctionRecord, Management, ServiceRecord, TriggerRecord, function_call,
    iso_time, json_body, page, parse_limit,
)
from crhelper.local.fc_protocol import API_VERSION, management_response, path_not_supported
from crhelper.servers import ApiResponse

_ROUTE = re.compile(r"^/" + re.escape(API_VERSION) + r"/services(?:/(?P<service>[^/]+)(?:/functions(?:/(?P<function>[^/]+)"
                    r"(?:/(?P<sub>triggers|async-invoke-config)(?:/(?P<trigger>[^/]+))?)?)?)?)?/?$")


def is_management_path(path: str) -> bool:
    return _ROUTE.match(path) is not None


class Fc2ManagementApi:
    def __init__(self, management: Management, *, region: str, account_id: str) -> None:
        self._manage = management
        self._region = region
        self._account = account_id

    def handle(self, request_id: str, method: str, path: str, raw_query: str, body: bytes) -> ApiResponse:
        """`path` is unescaped; the route must match (`is_management_path`)."""
        match = _ROUTE.match(path)
        assert match is not None
        query = {k: v[-1] for k, v in parse_qs(raw_query, keep_blank_values=True).items()}
        result = self._call(method.upper(), path, match.groupdict(), query, body)
        return management_response(request_id, result)

    def _call(self, method: str, path: str, parts: Mapping[str, str | None], query: Mapping[str, str],
              body: bytes) -> Any:
        m = self._manage
        raw_service, function, sub = parts["service"], parts["function"], parts["sub"]
        service, _, qualifier = (raw_service or "").partition(".")
        if raw_service is None:
            if method == "POST":
                return self.render_service(m.create_service(json_body(body)))
            if method == "GET":
                return self._list_services(query)
            raise path_not_supported(method, path)
        if qualifier and sub != "async-invoke-config":
            raise path_not_supported(method, path)  # only async configuration takes a service qualifier
        if function is None and "/functions" not in path:
            if method == "GET":
                return self.render_service(m.service(service))
            if method == "PUT":
                return self.render_service(m.update_service(service, json_body(body)))
            if method == "DELETE":
                m.delete_service(service)
                return None
            raise path_not_supported(method, path)
        call = FunctionCall(method, path, service, function, sub, parts["trigger"],
                            qualifier or query.get("qualifier") or "LATEST", query, body)
        return function_call(m, self, 2, call)

    def _list_services(self, query: Mapping[str, str]) -> dict[str, Any]:
        found, token = self._manage.list_services(query.get("prefix", ""), parse_limit(query.get("limit")),
                                                 query.get("nextToken") or query.get("startKey", ""))
        return page("services", [self.render_service(r) for r in found], token)

    def render_service(self, record: ServiceRecord) -> dict[str, Any]:
        return {**record.fields, "serviceName": record.name, "serviceId": record.service_id,
                "createdTime": iso_time(record.created), "lastModifiedTime": iso_time(record.modified)}

    def render_function(self, record: FunctionRecord) -> dict[str, Any]:
        return {**record.fields, "functionName": record.name, "functionId": record.function_id,
                "codeChecksum": record.checksum, "codeSize": record.code_size,
                "createdTime": iso_time(record.created), "lastModifiedTime": iso_time(record.modified)}

    def render_trigger(self, record: TriggerRecord) -> dict[str, Any]:
        return {**record.fields, "triggerName": record.name, "triggerType": record.trigger_type,
                "triggerConfig": record.config, "triggerId": record.trigger_id,
                "createdTime": iso_time(record.created), "lastModifiedTime": iso_time(record.modified)}

    def render_async(self, record: AsyncConfigRecord) -> dict[str, Any]:
        return {**record.fields, "service": record.service, "function": record.function,
                "qualifier": record.qualifier,
                "createdTime": iso_time(record.created), "lastModifiedTime": iso_time(record.modified)}

