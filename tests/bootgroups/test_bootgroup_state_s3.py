"""The boot-group state on OSS/S3 (`state_s3.S3GroupStore`) against moto's server on loopback, and
the behaviour every `GroupStore` shares, run on SQLite, plain S3 and the OSS-emulating bucket.

The moto server is the store suite's (`tests/store/conftest.py`): serialised conditional writes,
as real S3 and OSS make them atomic, OSS's `x-oss-forbid-overwrite` on `oss-*` buckets, and every
request recorded, so what goes on the wire is asserted at the server."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from crhelper.store.base import StoreError

from handlers.bootgroups.events import START, Event
from handlers.bootgroups.state import (
    MAX_EVENTS, GroupRecord, GroupStore, InstanceRecord, SqliteGroupStore, StateConflict, local_owner,
    open_group_store,
)
from handlers.bootgroups.state_s3 import S3GroupStore, open_s3_group_store

_STORE_TESTS = Path(__file__).resolve().parents[1] / "store"
sys.path.insert(0, str(_STORE_TESTS))
from store_support import CREDS, OSS_BUCKET, PLAIN_BUCKET, FakeClock, s3_url, store_suite_conftest  # noqa: E402


slow = pytest.mark.slow
#: The stores a shared test runs on: SQLite, the OSS-emulating bucket, plain S3 (a request costs a few
#: ms at moto, so the S3 kinds of the longer tests run only in the full suite).
QUICK = ["sqlite", "oss", pytest.param("s3", marks=slow)]
HEAVY = ["sqlite", pytest.param("oss", marks=slow), pytest.param("s3", marks=slow)]


@pytest.fixture(scope="module")
def moto() -> Iterator[Any]:
    with store_suite_conftest().serving_buckets() as server:
        yield server


def _env() -> dict[str, str]:
    return {**os.environ, **CREDS}


@pytest.fixture
def url_for(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str], str]:
    """kind -> a fresh CRHELPER_BOOTGROUP_STORE URL (moto starts only for the S3 kinds)."""

    def make(kind: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{tmp_path / 'groups.sqlite'}"
        return s3_url(request.getfixturevalue("moto").endpoint, kind)

    return make


@pytest.fixture
def url(request: pytest.FixtureRequest, url_for: Callable[[str], str]) -> str:
    return url_for(str(request.param))


@pytest.fixture
def store(url: str) -> GroupStore:
    return open_group_store(url, _env())


def _keys(moto: Any, bucket: str, prefix: str) -> list[str]:
    listing = moto.raw.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for item in listing.get("Contents", [])]


# --- what every store does ------------------------------------------------------------------------

@pytest.mark.parametrize("url", QUICK, indirect=True)
def test_the_factory_opens_each_kind_and_a_group_round_trips(store: GroupStore, url: str) -> None:
    assert isinstance(store, S3GroupStore if url.startswith("s3://") else SqliteGroupStore)
    assert store.owner == local_owner(_env())
    store.create_group(GroupRecord("g-db", "db", members=[], power_changes={"i-db": 3.25}), {"instance:i-db": "Members[0].Instance"})
    stored = store.get_group("g-db")
    assert stored is not None and stored.owner == store.owner and stored.power_changes == {"i-db": 3.25}
    stored.desired_state = "Stopped"
    store.save_group(stored)
    found = store.find_group("db")
    assert found is not None and found.desired_state == "Stopped" and found.created > 0
    assert [g.name for g in store.list_groups()] == ["db"] and store.find_group("nope") is None


@pytest.mark.parametrize("url", QUICK, indirect=True)
def test_names_and_items_are_unique_and_a_refused_write_leaves_nothing(store: GroupStore) -> None:
    store.create_group(GroupRecord("g-a", "alpha"), {"group:tier": "Members[0].InstanceGroup", "instance:i-7": "Members[0].InstanceGroup"})
    with pytest.raises(StateConflict) as item_taken:
        store.create_group(GroupRecord("g-b", "beta"), {"instance:i-8": "Members[0].Instance", "instance:i-7": "Members[2].Instance"})
    assert item_taken.value.path == "Members[2].Instance" and "instance 'i-7' is already a member of boot group 'alpha'" in str(item_taken.value)
    with pytest.raises(StateConflict, match="already named 'alpha'") as name_taken:
        store.create_group(GroupRecord("g-b", "alpha"), {"instance:i-8": "Members[0].Instance"})
    assert name_taken.value.path == "Name"
    assert store.get_group("g-b") is None and store.claims(["instance:i-8"]) == {} and store.names() == ["alpha"]
    with pytest.raises(StateConflict, match="exists already"):
        store.create_group(GroupRecord("g-a", "other"), {})
    assert store.claims(["group:tier", "instance:i-7", "instance:i-0"]) == {"group:tier": "alpha", "instance:i-7": "alpha"}
    assert store.claims(["group:tier"], besides="g-a") == {} and store.names(besides="g-a") == []


@pytest.mark.parametrize("url", HEAVY, indirect=True)
def test_reclaim_moves_claims_and_remove_releases_them(store: GroupStore) -> None:
    store.create_group(GroupRecord("g-a", "alpha"), {"instance:i-1": "Members[0].Instance", "instance:i-2": "Members[1].Instance"})
    alpha = store.get_group("g-a")
    assert alpha is not None
    alpha.name = "alpha-2"
    store.reclaim(alpha, {"instance:i-2": "Members[0].Instance"})
    assert store.claims(["instance:i-1", "instance:i-2"]) == {"instance:i-2": "alpha-2"}
    store.create_group(GroupRecord("g-b", "alpha"), {"instance:i-1": "Members[0].Instance"})  # the old name and i-1 are free
    beta = store.get_group("g-b")
    assert beta is not None
    beta.name = "alpha-2"
    with pytest.raises(StateConflict, match="already named 'alpha-2'"):
        store.reclaim(beta, {"instance:i-1": "Members[0].Instance"})
    store.remove_group("g-a")
    assert store.get_group("g-a") is None and store.claims(["instance:i-2"]) == {}
    assert sorted(store.names()) == ["alpha"]
    store.create_group(GroupRecord("g-c", "alpha-2"), {"instance:i-2": "Members[0].Instance"})
    assert [g.group_id for g in store.list_groups()] == ["g-b", "g-c"]


@pytest.mark.parametrize("url", HEAVY, indirect=True)
def test_names_and_claims_are_per_owner_while_ids_are_found_by_anyone(store: GroupStore) -> None:
    cloud = store.for_owner("ecs:1234567890")
    assert cloud.owner == "ecs:1234567890" and store.owner == str(Path(os.environ["CRHELPER_HOME"]))
    store.create_group(GroupRecord("g-l", "web"), {"instance:i-9": "Members[0].Instance"})
    cloud.create_group(GroupRecord("g-e", "web"), {"instance:i-9": "Members[0].Instance"})  # another owner: no clash
    with pytest.raises(StateConflict, match="already named 'web'"):  # the record's owner counts, whoever writes it
        store.create_group(GroupRecord("g-x", "web", owner="ecs:1234567890"), {})
    assert store.claims(["instance:i-9"]) == {"instance:i-9": "web"} and cloud.names() == ["web"]
    found = store.find_group("web")
    assert found is not None and found.group_id == "g-l"
    ecs_group = store.get_group("g-e")
    assert ecs_group is not None and ecs_group.owner == "ecs:1234567890"
    store.save_group(ecs_group)  # saved through another owner's view, it keeps its owner
    again = cloud.find_group("web")
    assert again is not None and again.group_id == "g-e" and again.owner == "ecs:1234567890"
    assert [g.group_id for g in store.list_groups()] == ["g-e", "g-l"]
    cloud.create_group(GroupRecord("g-db", "db"), {})
    only = store.find_group("db")  # no group of this owner has the name, one of another owner has
    assert only is not None and only.group_id == "g-db"
    store.for_owner("cloudstack:x").create_group(GroupRecord("g-db2", "db"), {})
    assert store.find_group("db") is None  # two owners have one: ambiguous
    store.remove_group("g-e")  # releases the owner's claims, whichever view removes it
    assert cloud.claims(["instance:i-9"]) == {} and store.claims(["instance:i-9"]) == {"instance:i-9": "web"}


@pytest.mark.parametrize("url", QUICK, indirect=True)
def test_events_are_ordered_bounded_and_survive_the_group(store: GroupStore) -> None:
    for batch in range(4):
        store.append_events("g-ev", [Event(START, float(batch * 300 + i), f"m{batch * 300 + i}") for i in range(300)])
    store.append_events("g-ev", [])
    kept = store.events("g-ev")
    assert len(kept) == MAX_EVENTS and kept[0].message == "m200" and kept[-1].message == "m1199"
    assert [e.message for e in store.events("g-ev", limit=3)] == ["m1197", "m1198", "m1199"]
    store.append_events("g-one", [Event(START, float(i), f"x{i}", ok=i % 2 == 0, subject="db") for i in range(MAX_EVENTS + 7)])
    one = store.events("g-one")
    assert len(one) == MAX_EVENTS and one[0].message == "x7" and one[0].ok is False and one[0].subject == "db"
    assert store.events("g-none") == []


@pytest.mark.parametrize("url", HEAVY, indirect=True)
def test_local_instances_round_trip(store: GroupStore) -> None:
    store.put_instance(InstanceRecord("li-b", ["python3", "-m", "http.server"], ports=[8000], environment={"K": "v"}))
    store.put_instance(InstanceRecord("li-a", ["echo hi"], shell=True))
    first = store.get_instance("li-b")
    assert first is not None and first.ports == [8000] and first.environment == {"K": "v"} and first.created > 0
    first.ports = [8001]
    store.put_instance(first)
    assert [(i.instance_id, i.ports) for i in store.list_instances()] == [("li-a", []), ("li-b", [8001])]
    store.delete_instance("li-b")
    assert store.get_instance("li-b") is None and [i.instance_id for i in store.list_instances()] == ["li-a"]
    store.put_instance(InstanceRecord("li-b", ["true"]))  # an id may be registered again
    assert store.get_instance("li-b") is not None


@pytest.mark.parametrize("url", HEAVY, indirect=True)
@pytest.mark.parametrize("same", ["item", "name"])
def test_concurrent_creates_from_several_instances_let_exactly_one_win(url: str, same: str) -> None:
    """Eight writers, each with its own store (connections, S3 client), race for one item or one Name."""
    barrier = threading.Barrier(8)
    stores = [open_group_store(url, _env()) for _ in range(8)]

    def create(index: int) -> str:
        name = "shared" if same == "name" else f"group-{index}"
        item = "instance:i-shared" if same == "item" else f"instance:i-{index}"
        barrier.wait()
        try:
            stores[index].create_group(GroupRecord(f"g{index}", name), {item: "Members[0].Instance"})
        except StateConflict:
            return "refused"
        return "won"

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(create, range(8)))
    assert sorted(outcomes) == ["refused"] * 7 + ["won"]
    (winner,) = stores[0].list_groups()
    assert stores[0].names() == [winner.name]
    if same == "item":
        assert stores[0].claims(["instance:i-shared"]) == {"instance:i-shared": winner.name}


@pytest.mark.parametrize("url", QUICK, indirect=True)
def test_a_run_is_taken_in_one_compare_and_set_and_never_over_a_write_in_between(store: GroupStore) -> None:
    store.create_group(GroupRecord("g-run", "run", run_id="req-1:update"), {})
    seen = store.get_group("g-run")
    step = store.get_group("g-run")
    assert seen is not None and step is not None
    step.resumed = 1
    store.save_group(step)  # the stack step makes progress after the command judged the group free
    seen.run_id = "cli:start:1@me"
    assert not store.save_group_if(seen, run_id="req-1:update", updated=seen.updated)
    stored = store.get_group("g-run")
    assert stored is not None and stored.run_id == "req-1:update" and stored.resumed == 1
    before = stored.updated
    stored.run_id = "cli:start:2@me"
    assert store.save_group_if(stored, run_id="req-1:update", updated=before)
    stored.resumed = 5  # the command's checkpoints go on while it holds the run...
    assert store.save_group_if(stored, run_id="cli:start:2@me")
    taken = store.get_group("g-run")
    assert taken is not None and (taken.run_id, taken.resumed) == ("cli:start:2@me", 5)
    taken.run_id = "req-2:update"
    store.reclaim(taken, {})  # ...until a stack step takes the group over
    stored.resumed = 9
    assert not store.save_group_if(stored, run_id="cli:start:2@me")
    after = store.get_group("g-run")
    assert after is not None and (after.run_id, after.resumed) == ("req-2:update", 5)
    store.remove_group("g-run")
    assert not store.save_group_if(after, run_id="req-2:update") and store.get_group("g-run") is None


@pytest.mark.parametrize("url", HEAVY, indirect=True)
def test_of_eight_takers_of_one_run_exactly_one_wins(url: str) -> None:
    """Each with its own store reads the free group, then all try to take its run at once."""
    open_group_store(url, _env()).create_group(GroupRecord("g-race", "race", run_id="req-0:create"), {})
    barrier = threading.Barrier(8)
    stores = [open_group_store(url, _env()) for _ in range(8)]

    def take(index: int) -> bool:
        record = stores[index].get_group("g-race")
        assert record is not None
        free, updated = record.run_id, record.updated
        record.run_id = f"cli:start:{index}@me"
        barrier.wait()
        return stores[index].save_group_if(record, run_id=free, updated=updated)

    with ThreadPoolExecutor(max_workers=8) as pool:
        won = list(pool.map(take, range(8)))
    assert won.count(True) == 1
    stored = stores[0].get_group("g-race")
    assert stored is not None and stored.run_id == f"cli:start:{won.index(True)}@me"


# --- what only the OSS store has to get right -----------------------------------------------------

def _s3_store(moto: Any, kind: str = "oss", clock: FakeClock | None = None, prefix: str | None = None) -> S3GroupStore:
    return open_s3_group_store(s3_url(moto.endpoint, kind, prefix=prefix), _env(), clock=clock or FakeClock())


def test_on_oss_every_write_is_create_only_and_keys_name_no_owner(moto: Any) -> None:
    store = _s3_store(moto, prefix="bg-wire")
    store.create_group(GroupRecord("g-w", "wire"), {"instance:i-w": "Members[0].Instance"})
    store.append_events("g-w", [Event(START, 1.0, "m")])
    store.put_instance(InstanceRecord("li-w", ["true"]))
    store.remove_group("g-w")
    puts = [r for r in moto.gate.puts(OSS_BUCKET) if "/bg-wire/" in r.path]
    # index (pending), group, index (live); the event batch; the instance; index (pending), tombstone, index
    assert len(puts) == 8
    assert all(p.headers.get("x-oss-forbid-overwrite") == "true" for p in puts)
    keys = _keys(moto, OSS_BUCKET, "bg-wire/")
    assert all(k.startswith("bg-wire/bootgroups/") for k in keys)
    assert not any(store.owner.strip("/") in k for k in keys)  # the owner is a digest in key names
    assert len([k for k in keys if "/groups/g-w/" in k]) == 1  # compacted to the tombstone
    assert store.get_group("g-w") is None and store.claims(["instance:i-w"]) == {}


@slow
def test_event_objects_stay_bounded(moto: Any) -> None:
    store = _s3_store(moto, kind="s3", prefix="bg-events")
    for batch in range(12):
        store.append_events("g", [Event(START, float(i), f"b{batch}-{i}") for i in range(100)])
    keys = [k for k in _keys(moto, PLAIN_BUCKET, "bg-events/") if "/events/g/" in k]
    assert len(keys) == MAX_EVENTS // 100
    assert store.events("g")[0].message == "b2-0"


@slow
def test_a_create_cut_short_after_its_index_entry_holds_until_the_orphan_time(moto: Any) -> None:
    clock = FakeClock()
    url = s3_url(moto.endpoint, "oss", prefix="bg-orphan")
    dying, other = (open_s3_group_store(url, _env(), clock=clock) for _ in range(2))

    def refuse_the_group_write(path: str) -> None:
        if "/groups/" in path:
            moto.gate.refuse_puts_with = "403 Forbidden"

    moto.gate.before_put = refuse_the_group_write
    try:
        with pytest.raises(StoreError, match="AccessDenied"):
            dying.create_group(GroupRecord("g-dead", "orphan"), {"instance:i-o": "Members[0].Instance"})
    finally:
        moto.gate.before_put, moto.gate.refuse_puts_with = None, None
    assert dying.get_group("g-dead") is None
    with pytest.raises(StateConflict, match="already a member of boot group 'orphan'"):
        other.create_group(GroupRecord("g-new", "fresh"), {"instance:i-o": "Members[0].Instance"})
    assert other.names() == ["orphan"]  # it may still be a Create in flight
    clock.advance(601)
    assert other.names() == [] and other.claims(["instance:i-o"]) == {}
    other.create_group(GroupRecord("g-new", "orphan"), {"instance:i-o": "Members[0].Instance"})
    assert other.claims(["instance:i-o"]) == {"instance:i-o": "orphan"}


@slow
def test_a_removal_cut_short_after_its_tombstone_holds_nothing(moto: Any) -> None:
    url = s3_url(moto.endpoint, "s3", prefix="bg-removal")
    store = open_s3_group_store(url, _env())
    store.create_group(GroupRecord("g-r", "going"), {"instance:i-r": "Members[0].Instance"})
    seen: list[str] = []

    def refuse_after_the_tombstone(path: str) -> None:
        if "/owners/" in path and any("/groups/" in earlier for earlier in seen):
            moto.gate.refuse_puts_with = "403 Forbidden"
        seen.append(path)

    moto.gate.before_put = refuse_after_the_tombstone
    try:
        with pytest.raises(StoreError, match="AccessDenied"):
            store.remove_group("g-r")
    finally:
        moto.gate.before_put, moto.gate.refuse_puts_with = None, None
    assert ["/owners/" in p for p in seen] == [True, False, True]
    assert store.get_group("g-r") is None and store.names() == [] and store.claims(["instance:i-r"]) == {}
    store.create_group(GroupRecord("g-s", "going"), {"instance:i-r": "Members[0].Instance"})


def test_a_late_save_does_not_bring_a_removed_group_back(moto: Any) -> None:
    store = _s3_store(moto, kind="s3")
    store.create_group(GroupRecord("g-late", "late"), {})
    record = store.get_group("g-late")
    assert record is not None
    store.remove_group("g-late")
    store.save_group(record)  # a checkpoint from a run still going when the group was deleted
    assert store.get_group("g-late") is None and store.list_groups() == []


def test_bad_store_urls_name_the_setting_and_never_the_query() -> None:
    with pytest.raises(ValueError, match="CRHELPER_BOOTGROUP_STORE: unknown s3 parameter") as info:
        open_group_store("s3://bucket/p?endpoint=http://127.0.0.1:1&secret=zz-hidden")
    assert "zz-hidden" not in str(info.value)
    with pytest.raises(ValueError, match="CRHELPER_BOOTGROUP_STORE: 'ftp://h/x[?]…' is not sqlite") as other:
        open_group_store("ftp://h/x?token=zz-hidden")
    assert "zz-hidden" not in str(other.value)
