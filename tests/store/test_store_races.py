"""N separate processes hit the same key and continuation at once: exactly one wins each race."""

from __future__ import annotations

import multiprocessing
import queue
import time
from typing import Callable

import pytest
from store_race_worker import race
from store_support import CREDS

from crhelper.store import (
    ClaimStatus,
    Continuation,
    IdempotencyKey,
    new_continuation_id,
    open_store,
)

pytestmark = pytest.mark.slow

PROCESSES = 8


@pytest.mark.parametrize("backend", ["sqlite", "s3", "oss"])
def test_concurrent_processes_exactly_one_wins(
    backend: str, store_url_for: Callable[[str], str]
) -> None:
    url = store_url_for(backend)
    key = IdempotencyKey("stack-race", f"req-{backend}", "Res")
    setup = open_store(url, env=CREDS)
    now = time.time()
    continuation = Continuation(
        id=new_continuation_id(),
        request={"RequestType": "Create"},
        state={"step": 0},
        attempt=0,
        started_at=now,
        deadline=now + 600,
        next_run_at=now,
    )
    setup.put_continuation(continuation)

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    args = (url, CREDS, (key.stack_id, key.request_id, key.logical_resource_id), continuation.id)
    procs = [ctx.Process(target=race, args=(*args, barrier, results)) for _ in range(PROCESSES)]
    try:
        for proc in procs:
            proc.start()
        outcomes = [results.get(timeout=45) for _ in procs]
    except queue.Empty:
        pytest.fail("a racing process did not report within 45 s")
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()

    errors = [o for o in outcomes if o[0] == "error"]
    assert not errors, errors
    statuses = sorted(status for _, status, _ in outcomes)
    assert statuses.count(ClaimStatus.ACQUIRED.value) == 1, statuses
    assert statuses.count(ClaimStatus.IN_FLIGHT.value) == PROCESSES - 1, statuses
    winners = [owner for owner, _, won in outcomes if won]
    assert len(winners) == 1, outcomes

    record = setup.get(key)
    acquired_owner = next(owner for owner, status, _ in outcomes if status == "acquired")
    assert record is not None and record.owner == acquired_owner
    final = setup.get_continuation(continuation.id)
    assert final is not None and final.version == 2 and final.attempt == 1
    assert final.state == {"advanced_by": winners[0]}
    setup.close()
