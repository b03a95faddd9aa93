"""Providers for the contract tests: hand-rolled broken ones, a leaky crhelper one, a long-running one
(answering once, or twice on purpose) and one whose rollback Update fails (loaded by file path too)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from email.utils import formatdate
from typing import Any

import requests

from crhelper import Failure, InProgress, Provider, Request, Result

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


polling = Provider()


@polling.create("Custom::Polled")
def create_polled(props: dict, request: Request) -> Result | InProgress:
    """Answers after `Calls` calls, `Delay` s apart; with `AnswerTwice`, also posts its own answer first."""
    step = (request.state or {}).get("step", 0) + 1
    if step < int(props.get("Calls", 3)):
        return InProgress(state={"step": step}, delay=float(props.get("Delay", 0.2)))
    physical_id, data = f"polled-{props['Name']}", {"Steps": step}
    if props.get("AnswerTwice"):
        own = {"StackId": request.stack_id, "RequestId": request.request_id,
               "LogicalResourceId": request.logical_resource_id, "ResponseURL": request.response_url}
        post(own, "SUCCESS", physical_id, data)
    return Result(physical_id=physical_id, data=data)


@polling.update("Custom::Polled")
def update_polled(props: dict, old: dict, request: Request) -> Result:
    return Result(data={"Steps": int(props.get("Calls", 3))})


@polling.delete("Custom::Polled")
def delete_polled(props: dict, request: Request) -> None:
    return None


name_locked = Provider()  # samples/greeting.py before it was made rollback-safe


@name_locked.create("Custom::Greeting")
def create_locked(props: dict, request: Request) -> Result:
    return Result(physical_id=f"greeting-{props['Name']}", data={"Text": f"hi {props['Name']}"})


@name_locked.update("Custom::Greeting")
def update_locked(props: dict, old: dict, request: Request) -> Result:
    if props["Name"] != old["Name"]:  # the rollback Update (the same two property sets swapped) changes it too
        raise Failure("Name cannot change: it is part of the physical id; create a new resource instead")
    return Result(data={"Text": f"hi {props['Name']}"})


@name_locked.delete("Custom::Greeting")
def delete_locked(props: dict, request: Request) -> None:
    return None
