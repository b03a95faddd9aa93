"""The boot-group provider's own state on OSS (or S3) for deployed providers: the `GroupStore` of
`state.py` under a bucket prefix, with the SQLite store's guarantees and nothing that expires.

OSS documents a create-only PutObject (`x-oss-forbid-overwrite`) but no `If-Match`, so, as in the
framework's `crhelper.store.s3`, every record is a short log of immutable numbered objects and a
change is the create of the next number (of two racers exactly one wins; the log is compacted
after each win). This module reuses that log (`S3Store`'s create-only primitives); it adds no
signing and no other conditional write. Layout under `<prefix>bootgroups/`:

* `owners/<sha256(owner)>/<seq>.json`: the owner's index, one document holding every group's
  Name and claimed items. Unique names and one group per item are checked and written in ONE
  create, so concurrent Creates from several instances serialise on it like a transaction;
* `groups/<group id>/<seq>.json`: the group (a tombstone once removed: a stale writer cannot bring
  it back);
* `events/<group id>/<seq>-<count>.json`: append-only batches, the oldest deleted past MAX_EVENTS;
* `instances/<instance id>/<seq>.json`: the `Custom::LocalInstance` definitions.

A group is written after its index entry, which is `pending` until then: a Create that died between
the two leaves an entry with no group, which stops holding its name and items after
`orphan_seconds`; a removal sets its entry `pending` again, then writes the tombstone, then drops
the entry, and a pending entry whose group is a tombstone holds nothing. Reads trust `live`
entries and look at the group of a pending one (one GET each; pending entries are rare).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import random
import secrets
import time
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote

from crhelper.operations.codec import dump
from crhelper.store.base import StoreError
from crhelper.store.s3 import MAX_RACE_ROUNDS, S3Store

from .events import Event
from .records import (
    MAX_EVENTS, STORE_ENV, GroupRecord, InstanceRecord, StateConflict, describe_item, group_from_json,
    instance_from_json, local_owner,
)

ROOT = "bootgroups/"
#: Seconds after which a pending index entry whose group was never written stops holding anything.
ORPHAN_SECONDS = 600.0
#: Upper bound of the random pause (s, times the round) between two lost index races.
BACKOFF_SECONDS = 0.01
_INDEX, _GROUP, _INSTANCE, _TOMBSTONE = "index", "group", "instance", "tombstone"
_PENDING, _LIVE = "pending", "live"
_SEQ_DIGITS, _COUNT_DIGITS = 12, 6


def _segment(identifier: str) -> str:
    """An id as one key segment (no `/`), readable for the ids the provider makes."""
    if not identifier:
        raise ValueError("an empty id names no boot-group object")
    return quote(identifier, safe="")


@dataclasses.dataclass(frozen=True)
class _Batch:
    """One stored batch of events: its number, how many events it holds, its key."""

    seq: int
    count: int
    key: str


class S3GroupStore:
    """`GroupStore` on an S3-compatible bucket (OSS in production), for one owner."""

    def __init__(self, client: Any, bucket: str, prefix: str = "", *, owner: str | None = None,
                 clock: Callable[[], float] = time.time, orphan_seconds: float = ORPHAN_SECONDS) -> None:
        self.owner = owner or local_owner()
        self._objects = S3Store(client, bucket, f"{prefix}{ROOT}", clock=clock)
        self._clock = clock
        self._orphan_seconds = orphan_seconds

    def for_owner(self, owner: str) -> "S3GroupStore":
        view = copy.copy(self)
        view.owner = owner
        return view

    def close(self) -> None:
        self._objects.close()

    # --- documents in logs ---------------------------------------------------------------------
    def _group_dir(self, group_id: str) -> str:
        return self._objects.log_dir("groups", _segment(group_id))

    def _index_dir(self, owner: str) -> str:
        return self._objects.log_dir("owners", hashlib.sha256(owner.encode()).hexdigest()[:40])

    def _replace(self, log_dir: str, doc: dict[str, Any], *, over_tombstone: bool) -> bool:
        """Write `doc` as the log's newest entry whatever the head is (a replace), retrying lost
        races; False (nothing written) when the head is a tombstone and `over_tombstone` is off."""
        for _ in range(MAX_RACE_ROUNDS):
            head = self._objects.head(log_dir)
            if head.doc is not None and head.doc.get("kind") == _TOMBSTONE and not over_tombstone:
                return False
            if self._objects.advance_log(log_dir, head.seq + 1, doc):
                return True
        raise StoreError(f"boot-group store: writing '{log_dir}' lost too many races in a row")

    def _group_doc(self, group_id: str) -> dict[str, Any] | None:
        """The group's newest document: a group, a tombstone, or None (never written)."""
        return self._objects.head(self._group_dir(group_id)).doc

    def _current_records(self, kind: str, doc_kind: str) -> list[Any]:
        """The record of every log under `kind` whose newest document is a `doc_kind` (one listing,
        one GET per log)."""
        found = []
        for _, newest in self._objects.heads_under(kind).values():
            raw = self._objects.get_bytes(newest)
            doc = json.loads(raw) if raw is not None else None
            if doc is not None and doc.get("kind") == doc_kind:
                found.append(doc["record"])
        return found

    def _write_group(self, record: GroupRecord) -> dict[str, Any]:
        record.updated = self._clock()
        return {"kind": _GROUP, "record": dump(record)}

    # --- the owner's index: names and claims ---------------------------------------------------
    def _index(self, owner: str) -> tuple[int, dict[str, dict[str, Any]]]:
        head = self._objects.head(self._index_dir(owner))
        entries = head.doc.get("groups", {}) if head.doc is not None else {}
        return head.seq, dict(entries)

    def _holds(self, group_id: str, entry: Mapping[str, Any], *, trust_live: bool) -> bool:
        """Whether an index entry still holds its name and items (see the module docstring)."""
        if trust_live and entry.get("state") == _LIVE:
            return True
        doc = self._group_doc(group_id)
        if doc is not None:
            return doc.get("kind") == _GROUP
        return self._clock() - float(entry.get("at", 0.0)) < self._orphan_seconds

    def _held(self, entries: Mapping[str, dict[str, Any]], besides: str, *, trust_live: bool) -> dict[str, dict[str, Any]]:
        return {gid: entry for gid, entry in entries.items()
                if gid != besides and self._holds(gid, entry, trust_live=trust_live)}

    def _update_index(self, owner: str, change: Callable[[dict[str, dict[str, Any]]], bool]) -> None:
        """Apply `change` to the owner's entries (it edits them in place and says whether anything
        changed, or raises StateConflict) and store the result with one create; retried on a lost race."""
        log_dir = self._index_dir(owner)
        for attempt in range(MAX_RACE_ROUNDS):
            seq, entries = self._index(owner)
            if not change(entries):
                return
            doc = {"kind": _INDEX, "owner": owner, "groups": entries}
            if self._objects.advance_log(log_dir, seq + 1, doc):
                return
            time.sleep(random.uniform(0, BACKOFF_SECONDS * (attempt + 1)))
        raise StoreError("boot-group store: the owner's index lost too many races in a row")

    def _check_and_enter(self, record: GroupRecord, items: Mapping[str, str], state: str) -> Callable[[dict[str, dict[str, Any]]], bool]:
        """The index change of a create (`pending`) or a reclaim (`live`): the SQLite store's checks."""

        def change(entries: dict[str, dict[str, Any]]) -> bool:
            # Every other entry in conflict is checked for staleness (a GET each; conflicts are rare).
            for gid, entry in list(entries.items()):
                if gid == record.group_id:
                    continue
                clash_name = entry.get("name") == record.name
                clash_items = [item for item in items if item in entry.get("items", {})]
                if not (clash_name or clash_items):
                    continue
                if not self._holds(gid, entry, trust_live=False):
                    del entries[gid]
                    continue
                if clash_name:
                    raise StateConflict(f"another boot group of this owner is already named {record.name!r} "
                                        f"({gid}; a Name is unique per owner)", "Name")
                item = clash_items[0]
                raise StateConflict(f"{describe_item(item)} is already a member of boot group {entry.get('name') or gid!r} "
                                    "(one boot group per instance or instance group)", items[item])
            entries[record.group_id] = {"name": record.name, "items": dict(items), "state": state, "at": self._clock()}
            return True

        return change

    def _set_state(self, group_id: str, state: str) -> Callable[[dict[str, dict[str, Any]]], bool]:
        def change(entries: dict[str, dict[str, Any]]) -> bool:
            entry = entries.get(group_id)
            if entry is None or entry.get("state") == state:
                return False
            entry["state"] = state
            return True

        return change

    # --- groups --------------------------------------------------------------------------------
    def create_group(self, record: GroupRecord, items: Mapping[str, str]) -> None:
        group_dir = self._group_dir(record.group_id)
        head = self._objects.head(group_dir)
        if head.doc is not None and head.doc.get("kind") == _GROUP:
            raise StateConflict(f"boot group {record.group_id} exists already")
        record.owner = record.owner or self.owner
        self._update_index(record.owner, self._check_and_enter(record, items, _PENDING))
        record.created = record.created or self._clock()
        if not self._objects.advance_log(group_dir, head.seq + 1, self._write_group(record)):
            raise StateConflict(f"boot group {record.group_id} exists already")
        self._update_index(record.owner, self._set_state(record.group_id, _LIVE))

    def get_group(self, group_id: str) -> GroupRecord | None:
        doc = self._group_doc(group_id)
        return group_from_json(doc["record"]) if doc is not None and doc.get("kind") == _GROUP else None

    def find_group(self, name: str) -> GroupRecord | None:
        _, entries = self._index(self.owner)
        for gid, entry in entries.items():
            found = self.get_group(gid) if entry.get("name") == name else None
            if found is not None:
                return found
        named = [group for group in self.list_groups() if group.name == name]
        return named[0] if len(named) == 1 else None

    def list_groups(self) -> list[GroupRecord]:
        found = [group_from_json(raw) for raw in self._current_records("groups", _GROUP)]
        return sorted(found, key=lambda group: (group.name, group.group_id))

    def save_group(self, record: GroupRecord) -> None:
        """A removed group is not brought back by a late save (it would hold no claims)."""
        record.owner = record.owner or self.owner
        self._replace(self._group_dir(record.group_id), self._write_group(record), over_tombstone=False)

    def save_group_if(self, record: GroupRecord, *, run_id: str, updated: float | None = None) -> bool:
        """The compare on the group log's head, the write as its next create-only entry: of two
        racers one wins, and the loser compares again against what the winner wrote."""
        log_dir = self._group_dir(record.group_id)
        for _ in range(MAX_RACE_ROUNDS):
            head = self._objects.head(log_dir)
            if head.doc is None or head.doc.get("kind") != _GROUP:
                return False
            stored = head.doc["record"]
            if stored.get("run_id", "") != run_id or (updated is not None and stored.get("updated") != updated):
                return False
            record.owner = record.owner or self.owner
            if self._objects.advance_log(log_dir, head.seq + 1, self._write_group(record)):
                return True
        raise StoreError(f"boot-group store: saving group {record.group_id} lost too many races in a row")

    def reclaim(self, record: GroupRecord, items: Mapping[str, str]) -> None:
        record.owner = record.owner or self.owner
        self._update_index(record.owner, self._check_and_enter(record, items, _LIVE))
        self._replace(self._group_dir(record.group_id), self._write_group(record), over_tombstone=True)

    def remove_group(self, group_id: str) -> None:
        """Entry `pending`, then the tombstone, then no entry: a removal cut short anywhere leaves
        claims that hold exactly while the group still reads as existing."""
        doc = self._group_doc(group_id)
        exists = doc is not None and doc.get("kind") == _GROUP
        owner = str(doc["record"].get("owner") or self.owner) if exists and doc is not None else self.owner
        if exists:
            self._update_index(owner, self._set_state(group_id, _PENDING))
            self._replace(self._group_dir(group_id), {"kind": _TOMBSTONE, "at": self._clock()}, over_tombstone=False)

        def drop(entries: dict[str, dict[str, Any]]) -> bool:
            return entries.pop(group_id, None) is not None

        self._update_index(owner, drop)

    def claims(self, items: Sequence[str], *, besides: str = "") -> dict[str, str]:
        _, entries = self._index(self.owner)
        wanted = set(items)
        holding = {gid: entry for gid, entry in entries.items() if wanted & set(entry.get("items", {}))}
        found: dict[str, str] = {}
        for gid, entry in self._held(holding, besides, trust_live=False).items():
            for item in wanted & set(entry.get("items", {})):
                found[item] = str(entry.get("name") or gid)
        return found

    def names(self, *, besides: str = "") -> list[str]:
        _, entries = self._index(self.owner)
        return [str(entry.get("name")) for entry in self._held(entries, besides, trust_live=True).values()]

    # --- events --------------------------------------------------------------------------------
    def _event_dir(self, group_id: str) -> str:
        return self._objects.log_dir("events", _segment(group_id))

    def _batches(self, group_id: str) -> list[_Batch]:
        found = []
        for key in self._objects.list_keys(self._event_dir(group_id)):
            stem = key.rsplit("/", 1)[-1].removesuffix(".json")
            seq, _, count = stem.partition("-")
            if seq.isdigit() and count.isdigit():
                found.append(_Batch(int(seq), int(count), key))
        return sorted(found, key=lambda batch: batch.seq)

    def append_events(self, group_id: str, events: Sequence[Event]) -> None:
        kept = list(events)[-MAX_EVENTS:]
        if not kept:
            return
        body = json.dumps({"write_id": secrets.token_hex(16), "events": [dataclasses.asdict(e) for e in kept]}).encode()
        for _ in range(MAX_RACE_ROUNDS):
            batches = self._batches(group_id)
            seq = batches[-1].seq + 1 if batches else 1
            key = f"{self._event_dir(group_id)}{seq:0{_SEQ_DIGITS}d}-{len(kept):0{_COUNT_DIGITS}d}.json"
            if self._objects.create_object(key, body):
                self._trim(batches + [_Batch(seq, len(kept), key)])
                return
        raise StoreError("boot-group store: appending events lost too many races in a row")

    def _trim(self, batches: list[_Batch]) -> None:
        """Delete the oldest batches the newest MAX_EVENTS events do not need."""
        total, dropped = sum(batch.count for batch in batches), []
        for batch in batches:
            if total - batch.count < MAX_EVENTS:
                break
            total -= batch.count
            dropped.append(batch.key)
        if dropped:
            self._objects.delete_keys(dropped)

    def events(self, group_id: str, limit: int = MAX_EVENTS) -> list[Event]:
        if limit <= 0:
            return []
        newest_first: list[list[Event]] = []
        seen = 0
        for batch in reversed(self._batches(group_id)):
            raw = self._objects.get_bytes(batch.key)
            if raw is None:  # trimmed meanwhile: everything older is too
                break
            loaded = [Event(**item) for item in json.loads(raw)["events"]]
            newest_first.append(loaded)
            seen += len(loaded)
            if seen >= limit:
                break
        ordered = [event for loaded in reversed(newest_first) for event in loaded]
        return ordered[-limit:]

    # --- local instances -----------------------------------------------------------------------
    def _instance_dir(self, instance_id: str) -> str:
        return self._objects.log_dir("instances", _segment(instance_id))

    def put_instance(self, record: InstanceRecord) -> None:
        record.created = record.created or self._clock()
        self._replace(self._instance_dir(record.instance_id), {"kind": _INSTANCE, "record": dump(record)},
                      over_tombstone=True)

    def get_instance(self, instance_id: str) -> InstanceRecord | None:
        doc = self._objects.head(self._instance_dir(instance_id)).doc
        return instance_from_json(doc["record"]) if doc is not None and doc.get("kind") == _INSTANCE else None

    def delete_instance(self, instance_id: str) -> None:
        self._replace(self._instance_dir(instance_id), {"kind": _TOMBSTONE, "at": self._clock()}, over_tombstone=False)

    def list_instances(self) -> list[InstanceRecord]:
        found = [instance_from_json(raw) for raw in self._current_records("instances", _INSTANCE)]
        return sorted(found, key=lambda instance: instance.instance_id)


def open_s3_group_store(url: str, env: Mapping[str, str] | None = None, *, owner: str | None = None,
                        clock: Callable[[], float] = time.time) -> S3GroupStore:
    """`s3://bucket/prefix?endpoint=…&region=…` (the parameters of CRHELPER_STORE) -> the store."""
    from crhelper.store.s3_client import client_for_url

    client, settings = client_for_url(url, STORE_ENV, env)
    env = os.environ if env is None else env
    return S3GroupStore(client, settings.bucket, settings.prefix, owner=owner or local_owner(env),
                        clock=clock)
