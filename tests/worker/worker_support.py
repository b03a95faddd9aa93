"""Helpers shared by the worker tests (imported as a plain module; pytest puts this folder on sys.path)."""

from __future__ import annotations

from crhelper.local.mns_server import LocalMNS
from crhelper.testing import wait_until

__all__ = ["queue_counts", "queue_empty", "wait_until"]


def queue_counts(local_mns: LocalMNS, queue_name: str) -> dict[str, int]:
    """Active, Inactive and Delay message counts, read through the SDK."""
    attrs = local_mns.account().get_queue(queue_name).get_attributes()
    return {"active": attrs.active_messages, "inactive": attrs.inactive_messages, "delay": attrs.delay_messages}


def queue_empty(local_mns: LocalMNS, queue_name: str) -> bool:
    return sum(queue_counts(local_mns, queue_name).values()) == 0
