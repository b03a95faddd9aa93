"""The shared store suite: every backend (sqlite, s3 on moto, oss-emulating moto) must pass it."""

from __future__ import annotations

import dataclasses

import pytest

from crhelper.store import (
    DEFAULT_TTL_SECONDS,
    ClaimStatus,
    Continuation,
    IdempotencyKey,
    RecordState,
    Store,
    StoreConflict,
    new_continuation_id,
)

KEY = IdempotencyKey("arn:acs:ros:cn-hangzhou:1:stacks/s/abc", "req-1", "MyResource")
URLS = {
    "ResponseURL": "https://ros.example/callback?Signature=secret-sig",
    "IntranetResponseURL": "https://ros-vpc.example/callback?Signature=secret-sig",
}


def test_store_satisfies_protocol(store: Store) -> None:
    assert isinstance(store, Store)


def test_first_claim_acquires_with_defaults(store: Store, clock) -> None:
    result = store.claim(KEY, "owner-a", lease_seconds=30, response_urls=URLS)
    assert result.status is ClaimStatus.ACQUIRED and result.owns
    record = result.record
    assert record.state is RecordState.IN_PROGRESS
    assert record.owner == "owner-a"
    assert record.created_at == clock.now
    assert record.lease_expires_at == clock.now + 30
    assert record.expires_at == clock.now + DEFAULT_TTL_SECONDS
    stored = store.get(KEY)
    assert stored is not None and stored.response_urls == URLS and stored.response is None


def test_urls_never_appear_in_repr(store: Store) -> None:
    result = store.claim(KEY, "owner-a", response_urls=URLS)
    assert "secret-sig" not in repr(result)
    assert "secret-sig" not in repr(store.get(KEY))


@pytest.mark.slow
def test_duplicate_while_in_flight_does_not_own(store: Store, clock) -> None:
    store.claim(KEY, "owner-a", lease_seconds=30)
    clock.advance(29)
    result = store.claim(KEY, "owner-b", lease_seconds=30)
    assert result.status is ClaimStatus.IN_FLIGHT and not result.owns
    assert result.record.owner == "owner-a"


def test_same_owner_reclaim_extends_its_lease(store: Store, clock) -> None:
    store.claim(KEY, "owner-a", lease_seconds=30)
    clock.advance(20)
    result = store.claim(KEY, "owner-a", lease_seconds=30)
    assert result.status is ClaimStatus.ACQUIRED
    assert result.record.lease_expires_at == clock.now + 30


def test_complete_then_duplicate_gets_stored_response(store: Store, clock) -> None:
    store.claim(KEY, "owner-a", response_urls=URLS)
    response = {"Status": "SUCCESS", "PhysicalResourceId": "p-1", "Data": {"Nested": [1, "x"]}}
    assert store.complete(KEY, "owner-a", response) is True
    clock.advance(3600)
    again = store.claim(KEY, "owner-b")
    assert again.status is ClaimStatus.COMPLETED and not again.owns
    assert again.record.response == response
    assert again.record.response_urls == URLS
    record = store.get(KEY)
    assert record is not None and record.state is RecordState.COMPLETED


def test_only_the_holder_may_complete(store: Store) -> None:
    store.claim(KEY, "owner-a")
    assert store.complete(KEY, "owner-b", {"Status": "SUCCESS"}) is False
    assert store.complete(KEY, "owner-a", {"Status": "FAILED"}) is True
    assert store.complete(KEY, "owner-a", {"Status": "SUCCESS"}) is False
    record = store.get(KEY)
    assert record is not None and record.response == {"Status": "FAILED"}


def test_complete_without_claim_is_refused(store: Store) -> None:
    assert store.complete(KEY, "owner-a", {"Status": "SUCCESS"}) is False
    assert store.get(KEY) is None


def test_renew_keeps_others_out_past_the_first_lease(store: Store, clock) -> None:
    store.claim(KEY, "owner-a", lease_seconds=30)
    clock.advance(25)
    assert store.renew(KEY, "owner-a", 30) is True
    clock.advance(25)
    assert store.claim(KEY, "owner-b").status is ClaimStatus.IN_FLIGHT
    assert store.renew(KEY, "owner-b", 30) is False


def test_renew_past_the_ttl_keeps_the_record_until_the_lease_ends(store: Store, clock) -> None:
    # An operation longer than the record TTL (deadline 2 h, TTL 1 h) must still complete once.
    store.claim(KEY, "owner-a", lease_seconds=30, ttl_seconds=3600)
    assert store.renew(KEY, "owner-a", 7200) is True
    clock.advance(5400)
    assert store.claim(KEY, "owner-b").status is ClaimStatus.IN_FLIGHT
    assert store.complete(KEY, "owner-a", {"Status": "SUCCESS"}) is True
    assert store.claim(KEY, "owner-b").status is ClaimStatus.COMPLETED


def test_expired_lease_is_taken_over_and_old_owner_is_fenced(store: Store, clock) -> None:
    store.claim(KEY, "owner-a", lease_seconds=30, response_urls=URLS)
    clock.advance(31)
    result = store.claim(KEY, "owner-b", lease_seconds=30)
    assert result.status is ClaimStatus.TAKEN_OVER and result.owns
    assert result.record.owner == "owner-b"
    assert result.record.response_urls == URLS
    assert store.renew(KEY, "owner-a", 30) is False
    assert store.complete(KEY, "owner-a", {"Status": "SUCCESS"}) is False
    assert store.complete(KEY, "owner-b", {"Status": "SUCCESS"}) is True


def test_lapsed_owner_may_still_complete_if_nobody_took_over(store: Store, clock) -> None:
    store.claim(KEY, "owner-a", lease_seconds=30)
    clock.advance(60)
    assert store.complete(KEY, "owner-a", {"Status": "SUCCESS"}) is True


def test_records_expire_after_ttl(store: Store, clock) -> None:
    store.claim(KEY, "owner-a", ttl_seconds=100)
    store.complete(KEY, "owner-a", {"Status": "SUCCESS"})
    clock.advance(99)
    assert store.get(KEY) is not None
    clock.advance(1)
    assert store.get(KEY) is None
    fresh = store.claim(KEY, "owner-b")
    assert fresh.status is ClaimStatus.ACQUIRED
    assert fresh.record.created_at == clock.now and fresh.record.response is None


def test_release_lets_a_redelivery_run_at_once(store: Store) -> None:
    store.claim(KEY, "owner-a", lease_seconds=300)
    assert store.release(KEY, "owner-b") is False
    assert store.release(KEY, "owner-a") is True
    assert store.get(KEY) is None
    assert store.release(KEY, "owner-a") is False
    assert store.claim(KEY, "owner-b").status is ClaimStatus.ACQUIRED


def test_completed_record_cannot_be_released(store: Store) -> None:
    store.claim(KEY, "owner-a")
    store.complete(KEY, "owner-a", {"Status": "SUCCESS"})
    assert store.release(KEY, "owner-a") is False
    assert store.claim(KEY, "owner-b").status is ClaimStatus.COMPLETED


def test_purge_expired_removes_only_expired_records(store: Store, clock) -> None:
    other = dataclasses.replace(KEY, logical_resource_id="Other")
    store.claim(KEY, "owner-a", ttl_seconds=10)
    store.claim(other, "owner-a", ttl_seconds=1000)
    clock.advance(10)
    assert store.purge_expired() == 1
    assert store.purge_expired() == 0
    assert store.get(other) is not None
    assert store.claim(KEY, "owner-b").status is ClaimStatus.ACQUIRED


def test_keys_are_independent(store: Store) -> None:
    store.claim(KEY, "owner-a")
    for changed in (
        dataclasses.replace(KEY, logical_resource_id="Other"),
        dataclasses.replace(KEY, request_id="req-2"),
        dataclasses.replace(KEY, stack_id="arn:acs:ros:cn-hangzhou:1:stacks/t/def"),
    ):
        assert store.claim(changed, "owner-b").status is ClaimStatus.ACQUIRED


def test_bad_arguments_are_rejected(store: Store) -> None:
    with pytest.raises(ValueError, match="lease_seconds"):
        store.claim(KEY, "owner-a", lease_seconds=0)
    with pytest.raises(ValueError, match="ttl_seconds"):
        store.claim(KEY, "owner-a", ttl_seconds=-1)
    with pytest.raises(ValueError, match="owner"):
        store.claim(KEY, "")
    assert store.get(KEY) is None


# -- continuations ---------------------------------------------------------------------------


def make_continuation(clock, **changes) -> Continuation:
    base = Continuation(
        id=new_continuation_id(),
        request={"RequestType": "Create", "ResponseURL": URLS["ResponseURL"], "StackId": "s"},
        state={"step": 1, "ids": ["i-1", "i-2"], "nested": {"ok": True}},
        attempt=1,
        started_at=clock.now,
        deadline=clock.now + 3600,
        next_run_at=clock.now + 10,
    )
    return dataclasses.replace(base, **changes)


def test_continuation_round_trip(store: Store, clock) -> None:
    c = make_continuation(clock)
    store.put_continuation(c)
    assert store.get_continuation(c.id) == c
    assert "secret-sig" not in repr(c)
    assert store.get_continuation(new_continuation_id()) is None


def test_continuation_ids_are_unique_and_unguessable() -> None:
    ids = {new_continuation_id() for _ in range(200)}
    assert len(ids) == 200 and all(len(i) >= 32 for i in ids)


def test_continuation_id_must_be_url_safe(clock) -> None:
    with pytest.raises(ValueError, match="Continuation.id"):
        make_continuation(clock, id="../escape")


def test_put_continuation_refuses_an_existing_id(store: Store, clock) -> None:
    c = make_continuation(clock)
    store.put_continuation(c)
    with pytest.raises(StoreConflict):
        store.put_continuation(dataclasses.replace(c, state={"other": 1}))
    assert store.get_continuation(c.id) == c


def test_update_continuation_is_compare_and_set(store: Store, clock) -> None:
    c = make_continuation(clock)
    store.put_continuation(c)
    advanced = dataclasses.replace(c, state={"step": 2}, attempt=2, next_run_at=clock.now + 20)
    assert store.update_continuation(advanced, expected_version=1) is True
    stored = store.get_continuation(c.id)
    assert stored == dataclasses.replace(advanced, version=2)
    assert store.update_continuation(dataclasses.replace(c, state={"step": "stale"}), 1) is False
    assert store.get_continuation(c.id) == stored
    assert store.update_continuation(dataclasses.replace(stored, attempt=3), 2) is True
    final = store.get_continuation(c.id)
    assert final is not None and final.version == 3 and final.attempt == 3


def test_update_of_unknown_continuation_fails(store: Store, clock) -> None:
    assert store.update_continuation(make_continuation(clock), 1) is False


def test_delete_continuation(store: Store, clock) -> None:
    c = make_continuation(clock)
    store.put_continuation(c)
    assert store.delete_continuation(c.id) is True
    assert store.get_continuation(c.id) is None
    assert store.delete_continuation(c.id) is False
    assert store.update_continuation(c, 1) is False
    assert store.get_continuation(c.id) is None


def test_due_continuations_are_ordered_filtered_and_limited(store: Store, clock) -> None:
    now = clock.now
    late = make_continuation(clock, next_run_at=now + 100)
    first = make_continuation(clock, next_run_at=now - 5)
    second = make_continuation(clock, next_run_at=now)
    gone = make_continuation(clock, next_run_at=now - 50)
    for c in (late, first, second, gone):
        store.put_continuation(c)
    store.delete_continuation(gone.id)
    assert [c.id for c in store.due_continuations(now)] == [first.id, second.id]
    assert [c.id for c in store.due_continuations(now, limit=1)] == [first.id]
    assert [c.id for c in store.due_continuations(now + 100)] == [first.id, second.id, late.id]
    moved = dataclasses.replace(first, next_run_at=now + 500)
    assert store.update_continuation(moved, 1)
    assert [c.id for c in store.due_continuations(now)] == [second.id]
