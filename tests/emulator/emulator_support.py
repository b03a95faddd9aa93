"""Helpers shared by the emulator tests: a scriptable in-process provider and template builders."""

from __future__ import annotations

import copy
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

TOKEN = "acs:fc:cn-hangzhou:123456789:functions/echo-provider"


@dataclass
class Behaviour:
    fail: str | None = None
    raise_error: BaseException | None = None
    sleep: float = 0.0
    hang: bool = False
    response: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    #: Apply this rule only to requests whose ResourceProperties equal this (e.g. only the new ones).
    only_for: dict[str, Any] | None = None


@dataclass
class Provider:
    """A deliverer acting as a provider: echoes ResourceProperties as Data, scriptable per resource."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, float]] = field(default_factory=list)
    behaviours: dict[tuple[str, str], Behaviour] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counter: int = 0

    def on(self, logical_id: str, request_type: str, **kwargs: Any) -> None:
        self.behaviours[(logical_id, request_type)] = Behaviour(**kwargs)

    def __call__(self, service_token: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        with self.lock:
            self.requests.append(copy.deepcopy(request))
            self.calls.append((service_token, timeout))
            self.counter += 1
            number = self.counter
        rule = self.behaviours.get((request["LogicalResourceId"], request["RequestType"]), Behaviour())
        if rule.only_for is not None and request["ResourceProperties"] != rule.only_for:
            rule = Behaviour()
        if rule.hang:
            self.release.wait(30)
        if rule.sleep:
            time.sleep(rule.sleep)
        if rule.raise_error is not None:
            raise rule.raise_error
        echoed = {k: request[k] for k in ("StackId", "RequestId", "LogicalResourceId")}
        if rule.response is not None:
            return {**echoed, **rule.response}
        if rule.fail is not None:
            return {**echoed, "Status": "FAILED", "Reason": rule.fail}
        physical_id = request.get("PhysicalResourceId") or f"{request['LogicalResourceId'].lower()}-{number}"
        data = rule.data if rule.data is not None else dict(request["ResourceProperties"])
        return {**echoed, "Status": "SUCCESS", "PhysicalResourceId": physical_id, "Data": data}

    def sent(self, request_type: str | None = None) -> list[tuple[str, str]]:
        """(RequestType, LogicalResourceId) in the order the provider received them."""
        return [
            (r["RequestType"], r["LogicalResourceId"])
            for r in self.requests
            if request_type is None or r["RequestType"] == request_type
        ]

    def last(self, logical_id: str, request_type: str) -> dict[str, Any]:
        matches = [r for r in self.requests if r["LogicalResourceId"] == logical_id and r["RequestType"] == request_type]
        assert matches, f"no {request_type} was sent to {logical_id}; sent: {self.sent()}"
        return matches[-1]


def custom(name: str = "Custom::Echo", token: str = TOKEN, **properties: Any) -> dict[str, Any]:
    """A resource entry for templates built as dicts."""
    return {"Type": name, "Properties": {"ServiceToken": token, **properties}}


def template(resources: dict[str, Any], **sections: Any) -> dict[str, Any]:
    return {"ROSTemplateFormatVersion": "2015-09-01", "Resources": resources, **sections}


def as_text(document: dict[str, Any]) -> str:
    return json.dumps(document)
