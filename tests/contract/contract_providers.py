"""Providers for the contract tests: hand-rolled broken ones and a leaky crhelper one (loaded by file path too)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from email.utils import formatdate
from typing import Any

import requests

from crhelper import Provider, Request, Result

_log = logging.getLogger("contract-tests")


def post(event: dict[str, Any], status: str, physical_id: str | None, data: dict[str, Any] | None = None,
         reason: str = "") -> None:
    body: dict[str, Any] = {"Status": status, "StackId": event["StackId"], "RequestId": event["RequestId"],
                            "LogicalResourceId": event["LogicalResourceId"]}
    if physical_id is not None:
        body["PhysicalResourceId"] = physical_id
    if data is not None:
        body["Data"] = data
    if reason:
        body["Reason"] = reason
    headers = {"Content-Type": "application/json", "Date": formatdate(usegmt=True)}
    requests.post(event["ResponseURL"], data=json.dumps(body), headers=headers, timeout=5)


class Broken:
    """Breaks most of the contract: new ids on every Create and Update, Delete only once, a logged URL, big Data."""

    def __init__(self) -> None:
        self.live: set[str] = set()

    def handle(self, event: dict[str, Any]) -> None:
        kind = event["RequestType"]
        if kind == "Create":
            physical_id = f"broken-{uuid.uuid4().hex[:8]}"
            self.live.add(physical_id)
            print(f"creating, will answer at {event['ResponseURL']}")
            post(event, "SUCCESS", physical_id, {"Id": physical_id})
        elif kind == "Update":
            post(event, "SUCCESS", f"broken-{uuid.uuid4().hex[:8]}", {"Blob": "x" * 5000})
        elif event.get("PhysicalResourceId") in self.live:
            self.live.discard(event["PhysicalResourceId"])
            post(event, "SUCCESS", event["PhysicalResourceId"])
        else:
            post(event, "FAILED", event.get("PhysicalResourceId"), reason="no such resource")


class Slow:
    """Correct, but takes its time on Create."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def handle(self, event: dict[str, Any]) -> None:
        if event["RequestType"] == "Create":
            time.sleep(self.seconds)
        post(event, "SUCCESS", event.get("PhysicalResourceId") or "slow-1")


leaky = Provider()


@leaky.create("Custom::Db")
def create(props: dict, request: Request) -> Result:
    _log.warning("connecting with password %s", props["Password"])
    return Result(physical_id=f"db-{props['Name']}")


@leaky.delete("Custom::Db")
def delete(props: dict, request: Request) -> None:
    return None


broken = Broken()
