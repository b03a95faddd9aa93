"""The `context` object handed to handlers, mirroring FC 2.0's Python runtime.

Field names follow the FC docs (https://www.alibabacloud.com/help/en/functioncompute/user-guide/context-1):
`request_id`, `credentials`, `function`, `service`, `region`, `account_id`, `tracing`, `logger`.
`credentials` is the shared `crhelper.cloud.credentials.Credentials` (the role's STS key:
`access_key_id`, `access_key_secret`, `security_token`; its repr shows the key id only).
FC has no remaining-time helper, so `deadline` (epoch seconds) is added: the moment the local
server kills the invocation.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Mapping

from crhelper.cloud.credentials import Credentials


class FunctionMeta:
    def __init__(self, name: str, handler: str, memory: int, timeout: float,
                 initializer: str = "", initialization_timeout: float = 0) -> None:
        self.name = name
        self.handler = handler
        self.memory = memory
        self.timeout = timeout
        self.initializer = initializer
        self.initialization_timeout = initialization_timeout


class ServiceMeta:
    def __init__(self, service_name: str, log_project: str, log_store: str,
                 qualifier: str, version_id: str) -> None:
        self.name = service_name
        self.log_project = log_project
        self.log_store = log_store
        self.qualifier = qualifier
        self.version_id = version_id


class Tracing:
    """Tracing is not emulated; the attributes exist so code reading them does not break."""

    def __init__(self) -> None:
        self.span_context: str | None = None
        self.jaeger_endpoint: str | None = None
        self.span_baggages: dict[str, str] = {}

    def parseOpenTracingBaggages(self) -> dict[str, str]:  # noqa: N802 - FC's spelling
        return dict(self.span_baggages)


class FCContext:
    def __init__(self, account_id: str, request_id: str, credentials: Credentials,
                 function_meta: FunctionMeta, service_meta: ServiceMeta, region: str,
                 tracing: Tracing, logger: logging.Logger, deadline: float) -> None:
        self.account_id = account_id
        self.request_id = request_id
        self.credentials = credentials
        self.function = function_meta
        self.service = service_meta
        self.region = region
        self.tracing = tracing
        self.logger = logger
        self.deadline = deadline

    def remaining_seconds(self) -> float:
        """Seconds left before the invocation is killed (local convenience, not in FC)."""
        return max(0.0, self.deadline - time.time())


def context_payload(*, request_id: str, account_id: str, region: str,
                    credentials: Mapping[str, str], function: Mapping[str, Any],
                    service: Mapping[str, Any], deadline: float) -> dict[str, Any]:
    """A JSON-safe description of the context, sent to the worker process."""
    return {
        "request_id": request_id, "account_id": account_id, "region": region,
        "credentials": dict(credentials), "function": dict(function),
        "service": dict(service), "deadline": deadline,
    }


def build_context(payload: Mapping[str, Any], logger: logging.Logger) -> FCContext:
    """Rebuild the handler's context from `context_payload` output inside the worker."""
    creds = payload["credentials"]
    func = payload["function"]
    svc = payload["service"]
    return FCContext(
        account_id=payload["account_id"],
        request_id=payload["request_id"],
        credentials=Credentials(creds["access_key_id"], creds["access_key_secret"],
                                creds["security_token"]),
        function_meta=FunctionMeta(func["name"], func["handler"], func["memory"], func["timeout"],
                                   func.get("initializer", ""),
                                   func.get("initialization_timeout", 0)),
        service_meta=ServiceMeta(svc["name"], svc.get("log_project", ""), svc.get("log_store", ""),
                                 svc["qualifier"], svc["version_id"]),
        region=payload["region"],
        tracing=Tracing(),
        logger=logger,
        deadline=payload["deadline"],
    )
