"""Providers the stack tests deliver to: a well-behaved echo provider and a rogue hand-rolled one.

Loaded by file path (`tests/stack/stack_providers.py:provider`) both in-process and in local FC
worker processes, so it imports nothing from the tests.
"""

from __future__ import annotations

import json
import time
import uuid
from email.utils import formatdate
from typing import Any

import requests

from crhelper import Failure, Provider, Request, Result

provider = Provider()


@provider.create("Custom::Echo")
def create(props: dict, request: Request) -> Result:
    if props.get("Fail"):
        raise Failure(f"intentional failure: {props['Fail']}")
    time.sleep(float(props.get("Sleep", 0)) + float(props.get("CreateSleep", 0)))
    return Result(physical_id=f"echo-{props.get('Name', request.logical_resource_id)}", data=dict(props))


@provider.update("Custom::Echo")
def update(props: dict, old: dict, request: Request) -> Result:
    if props.get("Fail"):
        raise Failure(f"intentional failure: {props['Fail']}")
    return Result(data=dict(props))


@provider.delete("Custom::Echo")
def delete(props: dict, request: Request) -> None:
    if props.get("FailDelete"):
        raise Failure(f"intentional delete failure: {props['FailDelete']}")
    time.sleep(float(props.get("Sleep", 0)))


class Rogue:
    """Posts its own answers, breaking the rule named by ResourceProperties.Break."""

    def handle(self, event: dict[str, Any]) -> None:
        rule = event["ResourceProperties"].get("Break", "")
        if rule == "raise-with-event":
            raise RuntimeError(f"cannot handle {event}")
        body: dict[str, Any] = {
            "Status": "SUCCESS",
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "PhysicalResourceId": event.get("PhysicalResourceId") or "rogue-1",
        }
        if rule == "no-echo":
            body["LogicalResourceId"] = "SomethingElse"
        if rule == "random-id":
            body["PhysicalResourceId"] = f"rogue-{uuid.uuid4().hex[:8]}"
        if rule == "big-data":
            body["Data"] = {"Blob": "x" * 5000}
        headers = {"Content-Type": "application/json", "Date": formatdate(usegmt=True)}
        requests.post(event["ResponseURL"], data=json.dumps(body), headers=headers, timeout=5)


rogue = Rogue()
