"""Helpers shared by the worker tests (imported as a plain module; pytest puts this folder on sys.path)."""

from __future__ import annotations

import time
from typing import Any, Callable

from crhelper.local.mns_server import LocalMNS


def queue_counts(local_mns: LocalMNS, queue_name: str) -> dict[str, int]:
    """Active, Inactive and Delay message counts, read through the SDK."""
    attrs = local_mns.account().get_queue(queue_name).get_attributes()
    return {"active": attrs.active_messages, "inactive": attrs.inactive_messages, "delay": attrs.delay_messages}


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02) -> Any:
    """The first truthy value of predicate(), or AssertionError after timeout."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def queue_empty(local_mns: LocalMNS, queue_name: str) -> bool:
    return sum(queue_counts(local_mns, queue_name).values()) == 0
