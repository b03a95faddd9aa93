"""Long-running handlers continued through MNS: MnsQueueReentry sends delayed continuation messages and
the queue worker resumes the operation from the sqlite store."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from mns.queue import Message

from crhelper import InProgress, Provider, Result
from crhelper.local.mns_server import LocalMNS
from crhelper.reentry import CONTINUATION_FIELD
from crhelper.reentry_mns import MAX_MNS_DELAY, MnsQueueReentry, mns_delay_seconds
from crhelper.testing import make_event
from worker_support import queue_counts, queue_empty, wait_until

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _reentry(local_mns: LocalMNS, queue_name: str) -> MnsQueueReentry:
    return MnsQueueReentry(endpoint=local_mns.endpoint, queue=queue_name, access_key_id=local_mns.access_key_id,
                           access_key_secret=local_mns.access_key_secret)


def polling_provider(providers: Any, polls: int, calls: list) -> Provider:
    provider = providers()

    @provider.create("Custom::Slow")
    def create(props: dict, request: Any) -> Any:
        calls.append((time.monotonic(), request.attempt, request.state))
        step = (request.state or {}).get("step", 0) + 1
        if step < polls:
            return InProgress(state={"step": step}, delay=1)
        return Result(physical_id="slow-1", data={"Steps": step})

    return provider


@pytest.mark.slow
def test_in_progress_resumes_through_the_queue_with_one_response(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, providers: Any, store_url: str,
    start_worker: Any,
) -> None:
    calls: list = []
    queue = make_queue(name)
    event = response_server.attach(make_event("Create", "Custom::Slow", {"Size": 3}))
    queue.send_message(Message(json.dumps(event)))
    worker = start_worker(polling_provider(providers, 3, calls), name)
    body = response_server.wait_for(event["RequestId"], timeout=10)
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Steps": 3}
    assert [(attempt, state) for _, attempt, state in calls] == [(0, None), (1, {"step": 1}), (2, {"step": 2})]
    gaps = [b[0] - a[0] for a, b in zip(calls, calls[1:])]
    assert all(0.9 <= gap < 2.5 for gap in gaps), gaps  # DelaySeconds=1 between polls
    wait_until(lambda: queue_empty(local_mns, name))
    time.sleep(0.3)
    stats = worker.stats()
    assert stats["received"] == 3 and stats["deleted"] == 3 and stats["poison"] == 0
    assert len(response_server.captures) == 1


@pytest.mark.slow
def test_continuation_message_carries_only_the_id_with_its_delay(
    local_mns: LocalMNS, make_queue: Any, name: str
) -> None:
    queue = make_queue(name)
    _reentry(local_mns, name).schedule("op-123", 0.2)
    assert queue_counts(local_mns, name)["delay"] == 1  # rounded up to 1 s: never early
    started = time.monotonic()
    message = queue.receive_message(3)
    assert 0.8 <= time.monotonic() - started < 2.0
    assert json.loads(message.message_body) == {CONTINUATION_FIELD: "op-123"}


def test_delay_is_clamped_to_the_mns_range() -> None:
    assert mns_delay_seconds(-5) == 0
    assert mns_delay_seconds(0) == 0
    assert mns_delay_seconds(2.01) == 3
    assert mns_delay_seconds(10**9) == MAX_MNS_DELAY == 604_800


def test_from_env_names_the_missing_setting() -> None:
    with pytest.raises(ValueError, match="CRHELPER_MNS_REENTRY_QUEUE"):
        MnsQueueReentry.from_env({})
    reentry = MnsQueueReentry.from_env({
        "CRHELPER_MNS_REENTRY_QUEUE": "acs:mns:cn-beijing:42:queues/continue",
        "ALIBABA_CLOUD_ACCESS_KEY_ID": "id", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret",
    })
    assert (reentry.endpoint, reentry.queue, reentry.name) == ("https://42.mns.cn-beijing.aliyuncs.com", "continue", "mns")
    with pytest.raises(ValueError, match="credentials"):
        MnsQueueReentry.from_env({"CRHELPER_MNS_REENTRY_QUEUE": "q", "CRHELPER_MNS_ENDPOINT": "http://127.0.0.1:1"})
