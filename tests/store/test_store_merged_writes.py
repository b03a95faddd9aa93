"""The merged writes of a plain request: `claim_with_continuation` (the claim and the stored request)
and `mark_delivered_and_delete` (the delivery and the end of the continuation), on every backend;
and what a plain request costs in store writes, counted by a wrapper around a real store."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest

from crhelper import Provider, Result
from crhelper.store import ClaimStatus, Continuation, IdempotencyKey, RecordState, Store, StoreConflict, open_store
from crhelper.store import new_continuation_id
from crhelper.testing import make_event

KEY = IdempotencyKey("arn:acs:ros:cn-hangzhou:1:stacks/s/abc", "Create:req-1", "MyResource")

#: The calls of `Store` that write (each one transaction on SQLite, one lock on memory://).
WRITES = frozenset({
    "claim", "claim_with_continuation", "renew", "complete", "release", "mark_delivered",
    "mark_delivered_and_delete", "adopt", "purge_expired", "put_continuation", "update_continuation",
    "delete_continuation",
})


@pytest.fixture(params=["sqlite", "memory", pytest.param("s3", marks=pytest.mark.slow),
                        pytest.param("oss", marks=pytest.mark.slow)])
def backend(request: pytest.FixtureRequest) -> str:
    """Every backend; the object-store ones (a moto server, ~0.5 s a test) in the slow set."""
    return str(request.param)


def _continuation(clock: Any, **changes: Any) -> Continuation:
    base = Continuation(
        id=new_continuation_id(), request={"RequestType": "Create", "ResponseURL": "https://ros.example/cb?Signature=x"},
        state=None, attempt=0, started_at=clock.now, deadline=clock.now + 60, next_run_at=clock.now + 10,
        holder="host:1:1",
    )
    return dataclasses.replace(base, **changes)


def test_claim_with_continuation_stores_both_when_it_owns(store: Store, clock) -> None:
    mine = _continuation(clock)
    result = store.claim_with_continuation(KEY, mine, lease_seconds=30, ttl_seconds=600)
    assert result.status is ClaimStatus.ACQUIRED and result.record.owner == mine.id
    record = store.get(KEY)
    assert record is not None and record.owner == mine.id and record.lease_expires_at == clock.now + 30
    assert record.expires_at == clock.now + 600
    assert store.get_continuation(mine.id) == mine


def test_claim_with_continuation_stores_nothing_when_it_does_not_own(store: Store, clock) -> None:
    first = _continuation(clock)
    store.claim_with_continuation(KEY, first, lease_seconds=30, ttl_seconds=600)
    duplicate = _continuation(clock)
    in_flight = store.claim_with_continuation(KEY, duplicate, lease_seconds=30, ttl_seconds=600)
    assert in_flight.status is ClaimStatus.IN_FLIGHT and in_flight.record.owner == first.id
    assert store.get_continuation(duplicate.id) is None
    assert store.complete(KEY, first.id, {"Status": "SUCCESS"})
    late = _continuation(clock)
    completed = store.claim_with_continuation(KEY, late, lease_seconds=30, ttl_seconds=600)
    assert completed.status is ClaimStatus.COMPLETED and completed.record.response == {"Status": "SUCCESS"}
    assert store.get_continuation(late.id) is None
    assert [c.id for c in store.due_continuations(clock.now + 100)] == [first.id]


def test_claim_with_continuation_takes_a_lapsed_claim_over(store: Store, clock) -> None:
    first = _continuation(clock)
    store.claim_with_continuation(KEY, first, lease_seconds=30, ttl_seconds=600)
    clock.advance(31)
    second = _continuation(clock)
    result = store.claim_with_continuation(KEY, second, lease_seconds=30, ttl_seconds=600)
    assert result.status is ClaimStatus.TAKEN_OVER and result.owns
    assert store.get_continuation(second.id) == second
    assert not store.complete(KEY, first.id, {"Status": "SUCCESS"})  # the first owner lost it


def test_claim_with_an_existing_continuation_id_claims_nothing(store: Store, clock) -> None:
    taken = _continuation(clock)
    store.put_continuation(taken)
    with pytest.raises(StoreConflict):
        store.claim_with_continuation(KEY, dataclasses.replace(taken, state={"other": 1}), lease_seconds=30)
    assert store.get(KEY) is None
    assert store.get_continuation(taken.id) == taken


def test_mark_delivered_and_delete(store: Store, clock) -> None:
    mine = _continuation(clock)
    store.claim_with_continuation(KEY, mine, lease_seconds=30, ttl_seconds=600)
    assert not store.mark_delivered_and_delete(KEY, mine.id, mine.id + "-other")  # not completed yet
    assert store.get_continuation(mine.id) == mine
    assert store.complete(KEY, mine.id, {"Status": "SUCCESS"})
    assert store.mark_delivered_and_delete(KEY, mine.id, mine.id)
    record = store.get(KEY)
    assert record is not None and record.state is RecordState.DELIVERED
    assert store.get_continuation(mine.id) is None
    # Again (a re-sent answer): already delivered, and nothing left to delete.
    assert not store.mark_delivered_and_delete(KEY, mine.id, mine.id)


def test_mark_delivered_and_delete_removes_the_continuation_of_an_answer_it_no_longer_owns(store: Store, clock) -> None:
    mine = _continuation(clock)
    store.claim_with_continuation(KEY, mine, lease_seconds=30, ttl_seconds=600)
    store.complete(KEY, mine.id, {"Status": "SUCCESS"})
    assert store.adopt(KEY, mine.id, "duplicate-1")  # a duplicate re-sends it
    assert not store.mark_delivered_and_delete(KEY, mine.id, mine.id)
    assert store.get_continuation(mine.id) is None
    record = store.get(KEY)
    assert record is not None and record.state is RecordState.COMPLETED and record.owner == "duplicate-1"


class CountingStore:
    """A real store, with every write call counted by name (what the test asserts on)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.writes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._store, name)
        if name not in WRITES:
            return target

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.writes.append(name)
            return target(*args, **kwargs)

        return counted


@pytest.fixture(params=["sqlite", "memory"])
def counting(request: pytest.FixtureRequest, store_url_for: Callable[[str], str]):
    store = CountingStore(open_store(store_url_for(request.param)))
    yield store
    store.close()


@pytest.fixture
def provider(counting: CountingStore):
    """A provider of one plain type on the counting store."""
    made = Provider(store=counting)  # type: ignore[arg-type]  # a Store by duck typing
    made.create("Custom::Plain")(lambda props, request: Result(physical_id="plain-1"))
    yield made
    made.close()


def test_a_plain_request_costs_three_store_writes(provider: Provider, counting: CountingStore, response_server) -> None:
    event = response_server.attach(make_event("Create", "Custom::Plain"))
    outcome = provider.process(event)
    assert outcome.delivered and response_server.responses_for(event["RequestId"]) == [outcome.body]
    assert counting.writes == ["claim_with_continuation", "complete", "mark_delivered_and_delete"]
    # The duplicate that ROS may send is absorbed with one more (read-only claim) call, and no answer.
    counting.writes.clear()
    assert provider.process(event).body is None
    assert counting.writes == ["claim_with_continuation"]
    assert counting.due_continuations(1e12) == []
    assert len(response_server.responses_for(event["RequestId"])) == 1


def test_an_accepted_request_costs_three_store_writes_too(provider: Provider, counting: CountingStore,
                                                          response_server) -> None:
    """`serve` stores (and now claims) an async request before acknowledging it, and runs it later."""
    event = response_server.attach(make_event("Create", "Custom::Plain"))
    accepted = provider.accept(event)
    assert accepted is not None
    # A copy of it accepted meanwhile stores nothing: it is answered as a duplicate when run.
    assert provider.accept(event) is None
    assert provider.process(event).body is None
    outcome = provider.process(event, accepted=accepted)
    assert outcome.delivered and response_server.responses_for(event["RequestId"]) == [outcome.body]
    assert counting.writes.count("claim_with_continuation") == 3  # the request, its two copies
    assert [name for name in counting.writes if name != "claim_with_continuation"] == \
        ["complete", "mark_delivered_and_delete"]
    assert counting.due_continuations(1e12) == []


def test_a_discarded_accepted_request_can_run_at_once_elsewhere(provider: Provider, counting: CountingStore,
                                                                response_server) -> None:
    event = response_server.attach(make_event("Create", "Custom::Plain"))
    accepted = provider.accept(event)
    assert accepted is not None
    provider.discard(accepted)  # refused after all (the server is stopping)
    assert counting.due_continuations(1e12) == []
    outcome = provider.process(event)  # ROS's retry of a refused request
    assert outcome.delivered and outcome.body is not None and outcome.body["Status"] == "SUCCESS"
