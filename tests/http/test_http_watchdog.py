"""The outbound watchdog: one shared deadline thread, not a timer thread per attempt, and a later
attempt with an earlier deadline is still cut at its own deadline (real sockets, real peers)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from crhelper.config import DeliverySettings
from crhelper.outbound import deliver

FAULTS = Path(__file__).resolve().parents[1] / "faults"
if str(FAULTS) not in sys.path:
    sys.path.insert(0, str(FAULTS))

from test_faults_delivery import HostilePeer  # noqa: E402  (the trickling peer the fault tests use)


@pytest.fixture
def trickler() -> Iterator[HostilePeer]:
    with HostilePeer("trickle", interval=0.3) as peer:
        yield peer


def _settings(read_timeout: float) -> DeliverySettings:
    return DeliverySettings(connect_timeout=0.5, read_timeout=read_timeout, max_attempts=1, backoff_base=0.01, backoff_cap=0.02)


@pytest.mark.slow
def test_concurrent_attempts_share_one_deadline_thread_and_each_keeps_its_deadline(trickler: HostilePeer) -> None:
    results: dict[str, tuple[bool, float]] = {}

    def send(name: str, deadline_in: float) -> None:
        started = time.monotonic()
        report = deliver(b"{}", trickler.url, None, _settings(5.0), deadline=time.monotonic() + deadline_in)
        results[name] = (report.delivered, time.monotonic() - started)

    # The far deadline is registered first: the thread sleeps for it and must wake for the near ones.
    senders = [threading.Thread(target=send, args=("far", 1.6))]
    senders += [threading.Thread(target=send, args=(f"near{i}", 0.8)) for i in range(6)]
    senders[0].start()
    time.sleep(0.1)
    for sender in senders[1:]:
        sender.start()
    time.sleep(0.3)
    live = threading.enumerate()
    assert [t for t in live if isinstance(t, threading.Timer)] == []
    assert sum(t.name == "crhelper-outbound-deadlines" for t in live) == 1
    for sender in senders:
        sender.join(10)
    for i in range(6):
        delivered, took = results[f"near{i}"]
        assert not delivered
        assert took < 0.8 + 0.6, f"an attempt with a 0.8 s deadline took {took:.2f} s"
    delivered, took = results["far"]
    assert not delivered and took < 1.6 + 0.6
