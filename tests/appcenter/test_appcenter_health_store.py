"""The health book beside the cluster store (SQLite; OSS on a moto server, slow): what the
ecs backend's `watch`/`unwatch` write and `health` reads, a change that writes nothing, and a
node's health kept across a new plan while a node that left the plan is dropped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.ecs import EcsSettings
from handlers.appcenter.backend_ecs import EcsNodeBackend
from handlers.appcenter.health_store import HealthBook, health_book
from handlers.appcenter.state import STORE_ENV
from handlers.appcenter.store_for import open_cluster_store

import test_appcenter_resource_state as state_tests  # noqa: E402 - its moto server, and tests/store on the path
from store_support import CREDS, s3_url  # noqa: E402

moto = state_tests.moto


@pytest.fixture(params=["sqlite", pytest.param("oss", marks=pytest.mark.slow)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'clusters.sqlite'}"
    else:
        for name, value in CREDS.items():
            monkeypatch.setenv(name, value)
        url = s3_url(request.getfixturevalue("moto"), request.param)
    monkeypatch.setenv(STORE_ENV, url)
    return url


def _checks(*nodes: str) -> list[dict[str, object]]:
    return [{"node_id": node, "role": "web", "interval": 60.0, "check_cmd": "true"} for node in nodes]


def test_watch_keeps_the_plan_and_health_reads_what_the_rounds_wrote(store_url: str) -> None:
    backend = EcsNodeBackend(EcsSettings(region="cn-hangzhou", endpoint="127.0.0.1:1"), Credentials("id", "secret"))
    book: HealthBook = health_book(open_cluster_store(store_url, dict(os.environ)))
    assert backend.health("cl-1") is None
    backend.unwatch("cl-1")                                   # nothing watched: nothing written
    assert book.get("cl-1") is None

    backend.watch("cl-1", _checks("web-1", "web-2"), owner="stack/App")
    doc = book.get("cl-1")
    assert doc is not None and doc["watching"] and [c["node_id"] for c in doc["plan"]] == ["web-1", "web-2"]
    assert backend.health("cl-1") is None                     # no round yet

    def seen(doc: dict[str, object]) -> None:                 # what a timer round writes
        doc.update(nodes={"web-1": {"node_id": "web-1", "status": "Healthy"},
                          "web-2": {"node_id": "web-2", "status": "Unhealthy"}}, updated=123.0,
                   due={"web-1": 1.0, "web-2": 2.0})

    book.update("cl-1", seen)
    assert backend.health("cl-1") == {"updated": 123.0, "nodes": {"web-1": {"node_id": "web-1", "status": "Healthy"},
                                                                 "web-2": {"node_id": "web-2", "status": "Unhealthy"}}}
    assert book.update("cl-1", lambda doc: False)["updated"] == 123.0  # a change that writes nothing

    backend.unwatch("cl-1")
    doc = book.get("cl-1")
    assert doc is not None and not doc["watching"] and backend.health("cl-1") is not None  # kept for status

    backend.watch("cl-1", _checks("web-1", "web-3"), owner="stack/App")   # web-2 left the cluster
    doc = book.get("cl-1")
    assert doc is not None and doc["watching"] and doc["due"] == {"web-1": 1.0}
    assert backend.health("cl-1") == {"updated": 123.0, "nodes": {"web-1": {"node_id": "web-1", "status": "Healthy"}}}
    assert book.get("cl-other") is None
