"""The queue worker against LocalMNS with the real SDK: decoding, deletion rules, visibility, concurrency."""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

import pytest
from mns.queue import Message

from crhelper import Provider, Result
from crhelper.local.mns_server import LocalMNS
from crhelper.testing import make_event
from crhelper.transports.mns_worker import Action, disposition, first_extension_delay
from worker_support import queue_counts, queue_empty, wait_until

#: Every test here waits out the worker's 1 s long poll when it stops: slow by construction.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.slow]


def greeting_provider(providers: Any, calls: list | None = None, sleep: float = 0.0) -> Provider:
    provider = providers()

    @provider.create("Custom::Greeting")
    def create(props: dict, request: Any) -> Result:
        if calls is not None:
            calls.append((time.monotonic(), request.request_id))
        if sleep:
            time.sleep(sleep)
        return Result(physical_id=f"greeting-{props['Name']}", data={"Greeting": f"hello {props['Name']}"})

    return provider


def test_raw_and_base64_requests_are_answered_then_deleted(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any, store_url: str, start_worker: Any
) -> None:
    raw_event = response_server.attach(make_event("Create", "Custom::Greeting", {"Name": "raw"}))
    b64_event = response_server.attach(make_event("Create", "Custom::Greeting", {"Name": "b64"}))
    make_queue(name).send_message(Message(json.dumps(raw_event)))
    # The SDK's default encoding: base64 of the JSON, as a producer that never turned it off sends it.
    local_mns.account().get_queue(name).send_message(Message(json.dumps(b64_event)))
    worker = start_worker(greeting_provider(providers), name)
    assert response_server.wait_for(raw_event["RequestId"])["Data"] == {"Greeting": "hello raw"}
    assert response_server.wait_for(b64_event["RequestId"])["Data"] == {"Greeting": "hello b64"}
    wait_until(lambda: queue_empty(local_mns, name))
    assert worker.stats()["deleted"] == 2 and worker.stats()["poison"] == 0


def test_poison_messages_are_deleted_without_sinking_good_ones(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any, store_url: str, start_worker: Any
) -> None:
    queue = make_queue(name)
    good = response_server.attach(make_event("Create", "Custom::Greeting", {"Name": "good"}))
    for body in ("not json at all", base64.b64encode(b"[1, 2]").decode(), json.dumps({"hello": "world"}),
                 json.dumps(good)):
        queue.send_message(Message(body))
    worker = start_worker(greeting_provider(providers), name)
    assert response_server.wait_for(good["RequestId"])["Status"] == "SUCCESS"
    wait_until(lambda: queue_empty(local_mns, name))
    wait_until(lambda: worker.stats()["deleted"] == 4)  # counted just after each delete returns
    stats = worker.stats()
    assert stats["poison"] == 3 and stats["deleted"] == 4 and len(response_server.captures) == 1


def test_unreachable_response_url_leaves_the_message_for_redelivery(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any, store_url: str,
    start_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRHELPER_RESPONSE_ATTEMPTS", "1")
    calls: list = []
    event = response_server.attach(make_event("Create", "Custom::Greeting", {"Name": "late"}), fail_first=1)
    make_queue(name, visibility=1).send_message(Message(json.dumps(event)))
    worker = start_worker(greeting_provider(providers, calls), name, visibility_timeout=1, extend_every=0.5)
    wait_until(lambda: worker.stats()["kept"] == 1)
    assert response_server.responses_for(event["RequestId"]) == []  # the one attempt got a 500
    assert queue_counts(local_mns, name)["inactive"] + queue_counts(local_mns, name)["active"] == 1
    # After the visibility timeout MNS hands the message out again; the store re-sends the stored answer.
    assert response_server.wait_for(event["RequestId"], timeout=5)["Status"] == "SUCCESS"
    wait_until(lambda: queue_empty(local_mns, name))
    assert len(calls) == 1, "the handler must not run again for a redelivery"
    assert worker.stats()["deleted"] == 1


@pytest.mark.slow
def test_visibility_is_extended_for_a_handler_slower_than_the_timeout(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any,
    start_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRHELPER_STORE", "none")  # no idempotency: a redelivery would run the handler again
    calls: list = []
    event = response_server.attach(make_event("Create", "Custom::Greeting", {"Name": "slow"}))
    make_queue(name, visibility=1).send_message(Message(json.dumps(event)))
    worker = start_worker(greeting_provider(providers, calls, sleep=2.5), name, concurrency=2,
                          visibility_timeout=1, extend_every=0.4)
    assert response_server.wait_for(event["RequestId"], timeout=6)["Status"] == "SUCCESS"
    wait_until(lambda: queue_empty(local_mns, name))
    time.sleep(0.3)
    assert len(calls) == 1 and len(response_server.responses_for(event["RequestId"])) == 1
    stats = worker.stats()
    assert stats["extensions"] >= 4 and stats["lost"] == 0 and stats["received"] == 1


def test_n_slow_messages_run_concurrently(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any, store_url: str,
    start_worker: Any
) -> None:
    calls: list = []
    events = [response_server.attach(make_event("Create", "Custom::Greeting", {"Name": f"n{i}"})) for i in range(4)]
    queue = make_queue(name)
    for event in events:
        queue.send_message(Message(json.dumps(event)))
    started = time.monotonic()
    start_worker(greeting_provider(providers, calls, sleep=1.0), name, concurrency=4)
    for event in events:
        response_server.wait_for(event["RequestId"], timeout=5)
    elapsed = time.monotonic() - started
    assert elapsed < 1.9, f"4 handlers of 1 s took {elapsed:.2f} s with concurrency 4"
    wait_until(lambda: queue_empty(local_mns, name))


def test_a_freed_thread_takes_the_next_message_while_the_others_still_run(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any, store_url: str,
    start_worker: Any
) -> None:
    """The receiver is woken when a thread frees up, not only when all are idle: a quick message queued
    behind a slow and a quick one is answered long before the slow one ends."""
    provider = providers()

    @provider.create("Custom::Greeting")
    def create(props: dict, request: Any) -> Result:
        time.sleep(float(props["Seconds"]))
        return Result(physical_id=f"p-{props['Seconds']}")

    slow, quick, behind = (response_server.attach(make_event("Create", "Custom::Greeting", {"Seconds": s}))
                           for s in ("3", "0.1", "0.1"))
    queue = make_queue(name)
    queue.batch_send_message([Message(json.dumps(slow)), Message(json.dumps(quick))])
    started = time.monotonic()
    start_worker(provider, name, concurrency=2, prefetch=0)
    response_server.wait_for(quick["RequestId"], timeout=5)
    queue.send_message(Message(json.dumps(behind)))
    response_server.wait_for(behind["RequestId"], timeout=5)
    elapsed = time.monotonic() - started
    assert elapsed < 2.5, f"the third message waited {elapsed:.2f} s: for the slow handler (3 s) to end"
    response_server.wait_for(slow["RequestId"], timeout=5)
    wait_until(lambda: queue_empty(local_mns, name))


def test_concurrency_is_bounded(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any, store_url: str,
    start_worker: Any
) -> None:
    running, peak, lock = [0], [0], threading.Lock()
    provider = providers()

    @provider.create("Custom::Greeting")
    def create(props: dict, request: Any) -> Result:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.3)
        with lock:
            running[0] -= 1
        return Result(physical_id="p")

    events = [response_server.attach(make_event("Create", "Custom::Greeting", {})) for _ in range(6)]
    queue = make_queue(name)
    for event in events:
        queue.send_message(Message(json.dumps(event)))
    start_worker(provider, name, concurrency=2)
    for event in events:
        response_server.wait_for(event["RequestId"], timeout=5)
    assert peak[0] == 2


def test_messages_received_ahead_are_released_not_run_when_stopping(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any, store_url: str,
    start_worker: Any
) -> None:
    """With one thread and a prefetch of 3, the worker holds messages beyond the running one; stopping
    finishes that one and hands the waiting ones back at once (visible within seconds), unrun."""
    calls: list = []
    events = [response_server.attach(make_event("Create", "Custom::Greeting", {"Name": f"p{i}"})) for i in range(4)]
    queue = make_queue(name)
    queue.batch_send_message([Message(json.dumps(event)) for event in events])
    worker = start_worker(greeting_provider(providers, calls, sleep=0.8), name, concurrency=1, prefetch=3)
    wait_until(lambda: calls and worker.stats()["received"] >= 3)
    assert worker.stop(grace=5) is True
    stats = worker.stats()
    assert len(calls) == 1 and stats["deleted"] == 1 and stats["released"] == stats["received"] - 1 >= 2
    assert len(response_server.captures) == 1  # only the message that ran was answered
    wait_until(lambda: queue_counts(local_mns, name)["active"] == 3, timeout=5)  # back for another worker


def test_messages_finishing_together_are_all_deleted_in_batches(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any, store_url: str,
    start_worker: Any
) -> None:
    events = [response_server.attach(make_event("Create", "Custom::Greeting", {"Name": f"b{i}"})) for i in range(12)]
    queue = make_queue(name)
    queue.batch_send_message([Message(json.dumps(event)) for event in events])
    worker = start_worker(greeting_provider(providers), name, concurrency=12)
    for event in events:
        assert response_server.wait_for(event["RequestId"], timeout=5)["Status"] == "SUCCESS"
    wait_until(lambda: queue_empty(local_mns, name))
    assert worker.stats()["deleted"] == 12
    assert all(len(response_server.responses_for(e["RequestId"])) == 1 for e in events)


def test_graceful_stop_finishes_in_flight_work(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any, store_url: str,
    start_worker: Any
) -> None:
    calls: list = []
    event = response_server.attach(make_event("Create", "Custom::Greeting", {"Name": "stop"}))
    make_queue(name).send_message(Message(json.dumps(event)))
    worker = start_worker(greeting_provider(providers, calls, sleep=0.8), name)
    wait_until(lambda: calls)
    assert worker.stop(grace=5) is True
    assert response_server.responses_for(event["RequestId"])[0]["Status"] == "SUCCESS"
    assert queue_empty(local_mns, name)


def test_a_handler_raising_system_exit_does_not_kill_a_worker_thread(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any, store_url: str,
    start_worker: Any
) -> None:
    provider = greeting_provider(providers)

    @provider.create("Custom::Exit")
    def create_exit(props: dict, request: Any) -> Result:
        raise SystemExit(3)  # a user bug that escapes `except Exception`

    exiting = response_server.attach(make_event("Create", "Custom::Exit", {}))
    good = response_server.attach(make_event("Create", "Custom::Greeting", {"Name": "after"}))
    queue = make_queue(name, visibility=2)
    queue.send_message(Message(json.dumps(exiting)))
    worker = start_worker(provider, name, concurrency=1, visibility_timeout=2, extend_every=0.5)
    # The framework answers it FAILED like any other handler error, and the single thread lives on.
    assert response_server.wait_for(exiting["RequestId"], timeout=5)["Reason"] == "SystemExit: 3"
    queue.send_message(Message(json.dumps(good)))
    assert response_server.wait_for(good["RequestId"], timeout=5)["Status"] == "SUCCESS"
    assert worker.stats()["lost"] == 0


def test_disposition_rules() -> None:
    assert disposition(None, False)[0] is Action.DELETE
    assert disposition({"Status": "SUCCESS"}, True)[0] is Action.DELETE
    assert disposition({"Status": "SUCCESS"}, False)[0] is Action.KEEP


def test_first_extension_respects_a_shorter_queue_timeout() -> None:
    now = 1_000.0
    assert first_extension_delay(None, 20.0, now) == 20.0
    assert first_extension_delay(int((now + 4) * 1000), 20.0, now) == pytest.approx(2.0)
    assert first_extension_delay(int((now + 100) * 1000), 20.0, now) == 20.0
    assert first_extension_delay(int((now - 5) * 1000), 20.0, now) == 0.0
