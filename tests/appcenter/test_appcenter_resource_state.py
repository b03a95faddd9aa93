"""The AppCluster provider's state on SQLite and on OSS/S3 (a moto server; OSS's create-only
PutObject emulated): the same calls, a record round trip, and no resurrection after a removal."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

from handlers.appcenter.state import ClusterRecord, ClusterStore
from handlers.appcenter.store_for import open_cluster_store

_STORE_TESTS = Path(__file__).resolve().parents[1] / "store"
sys.path.insert(0, str(_STORE_TESTS))
from store_support import CREDS, s3_url, store_suite_conftest  # noqa: E402


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with store_suite_conftest().serving_buckets() as server:
        yield server.endpoint


@pytest.fixture(params=["sqlite", pytest.param("oss", marks=pytest.mark.slow), pytest.param("s3", marks=pytest.mark.slow)])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ClusterStore:
    if request.param == "sqlite":
        return open_cluster_store(f"sqlite:///{tmp_path / 'clusters.sqlite'}")
    for name, value in CREDS.items():
        monkeypatch.setenv(name, value)
    return open_cluster_store(s3_url(request.getfixturevalue("moto"), request.param), dict(os.environ))


def test_a_cluster_round_trips_lists_and_stays_removed(store: ClusterStore) -> None:
    record = ClusterRecord(cluster_id="cl-a-1", stack_id="s", package="/p", values={"env.port": 8080},
                           nodes=[{"node_id": "web-1", "role": "web", "sid": 1, "ip": "127.0.0.2"}],
                           run={"key": "r", "phases": [], "finished": False}, journal=[{"service": "init"}] * 600)
    store.save(record)
    store.save(ClusterRecord(cluster_id="cl-b-2"))
    found = store.get("cl-a-1")
    assert found is not None and found.nodes == record.nodes and found.run == record.run
    assert found.values == {"env.port": 8080} and len(found.journal) == 500  # the newest entries kept
    found.desired_state = "Stopped"
    store.save(found)
    assert store.get("cl-a-1").desired_state == "Stopped"  # type: ignore[union-attr]
    assert [r.cluster_id for r in store.list()] == ["cl-a-1", "cl-b-2"]
    store.remove("cl-a-1")
    assert store.get("cl-a-1") is None and [r.cluster_id for r in store.list()] == ["cl-b-2"]
    store.save(found)  # a late checkpoint of the operation that removed it
    assert store.get("cl-a-1") is None and [r.cluster_id for r in store.list()] == ["cl-b-2"]


def test_a_bad_store_url_names_the_setting() -> None:
    with pytest.raises(ValueError, match="CRHELPER_APPCENTER_STORE: 'redis://x' is not sqlite"):
        open_cluster_store("redis://x?secret=1")
