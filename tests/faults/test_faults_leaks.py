"""A FAILED Create whose handler did create something leaves no leak: the Delete that follows (with
the failed-Create marker or with no id, as ROS may send it) deletes what the handler produced."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from crhelper import Provider, Result
from crhelper.constants import CREATE_FAILED_MARKER
from crhelper.testing import make_event


def fc_context(timeout: float) -> SimpleNamespace:
    return SimpleNamespace(request_id="r", credentials=None, function=SimpleNamespace(timeout=timeout, name="f"),
                           service=SimpleNamespace(name="svc", qualifier=None))


class Ledger:
    def __init__(self) -> None:
        self.live: set[str] = set()
        self.deleted: list[str] = []
        self.lock = threading.Lock()

    def create(self, physical_id: str) -> str:
        with self.lock:
            self.live.add(physical_id)
        return physical_id

    def delete(self, physical_id: str | None) -> None:
        with self.lock:
            self.deleted.append(str(physical_id))
            self.live.discard(str(physical_id))


@pytest.fixture
def ledger_provider(tmp_path, monkeypatch):
    monkeypatch.setenv("CRHELPER_STORE", f"sqlite:///{tmp_path / 'state.sqlite'}")
    ledger = Ledger()
    provider = Provider()

    @provider.create("Custom::Leaky")
    def create(props, request):
        time.sleep(float(props.get("Sleep", 0)))
        physical_id = ledger.create(f"res-{request.logical_resource_id}")
        kind = props.get("Data")
        if kind == "unserialisable":
            return Result(physical_id=physical_id, data={"When": object()})
        if kind == "huge":
            return Result(physical_id=physical_id, data={"Blob": "é" * 3000})
        return Result(physical_id=physical_id)

    @provider.delete("Custom::Leaky")
    def delete(props, request):
        ledger.delete(request.physical_resource_id)

    yield provider, ledger
    provider.close()


def _delete_after(response_server, provider, create_event, physical_id, context=None):
    delete = make_event("Delete", "Custom::Leaky", create_event["ResourceProperties"],
                        physical_resource_id=physical_id, stack_id=create_event["StackId"],
                        logical_resource_id=create_event["LogicalResourceId"])
    delete = response_server.attach(delete)
    provider.handle(delete, context)
    return response_server.wait_for(delete["RequestId"], timeout=15)


def _create_that_times_out(response_server, provider, sleep: float) -> dict:
    """A Create whose handler outlives its 2 s function timeout: answered FAILED "timed out"."""
    create = response_server.attach(make_event("Create", "Custom::Leaky", {"Sleep": sleep}))
    provider.handle(create, fc_context(2))
    failed = response_server.wait_for(create["RequestId"])
    assert failed["Status"] == "FAILED" and failed["Reason"].startswith("timed out")
    return create


@pytest.mark.parametrize("data", ["unserialisable", "huge"])
@pytest.mark.parametrize("delete_id", [CREATE_FAILED_MARKER, "", None], ids=["marker", "empty", "absent"])
def test_create_with_unsendable_data_is_cleaned_up_by_the_delete_that_follows(ledger_provider, response_server, data, delete_id):
    provider, ledger = ledger_provider
    create = response_server.attach(make_event("Create", "Custom::Leaky", {"Data": data}))
    provider.handle(create)
    failed = response_server.wait_for(create["RequestId"])
    assert failed["Status"] == "FAILED" and failed["PhysicalResourceId"] == CREATE_FAILED_MARKER
    assert ledger.live == {"res-Res"}
    body = _delete_after(response_server, provider, create, delete_id)
    assert body["Status"] == "SUCCESS"
    assert body["PhysicalResourceId"] == (delete_id or body["PhysicalResourceId"])
    assert ledger.deleted == ["res-Res"] and ledger.live == set()


@pytest.mark.slow
def test_create_that_finishes_after_its_timeout_is_deleted_by_a_delete_that_waits_for_it(ledger_provider, response_server):
    provider, ledger = ledger_provider
    create = _create_that_times_out(response_server, provider, sleep=2.5)
    assert ledger.live == set()  # the handler is still running: nothing created yet
    started = time.monotonic()
    body = _delete_after(response_server, provider, create, CREATE_FAILED_MARKER, fc_context(10))
    assert body["Status"] == "SUCCESS", body
    assert time.monotonic() - started < 8
    assert ledger.deleted == ["res-Res"] and ledger.live == set()


@pytest.mark.slow
def test_a_delete_that_cannot_wait_long_enough_fails_instead_of_leaking(ledger_provider, response_server):
    provider, ledger = ledger_provider
    create = _create_that_times_out(response_server, provider, sleep=6)
    body = _delete_after(response_server, provider, create, CREATE_FAILED_MARKER, fc_context(2))
    assert body["Status"] == "FAILED" and "still running" in body["Reason"]
    assert ledger.deleted == []


def test_a_failed_create_that_produced_nothing_is_not_deleted(ledger_provider, response_server):
    provider, ledger = ledger_provider

    @provider.create("Custom::Broken")
    def broken(props, request):
        raise RuntimeError("nothing made")

    provider.delete("Custom::Broken")(lambda props, request: ledger.delete(request.physical_resource_id))
    create = response_server.attach(make_event("Create", "Custom::Broken"))
    provider.handle(create)
    assert response_server.wait_for(create["RequestId"])["Status"] == "FAILED"
    delete = response_server.attach(make_event("Delete", "Custom::Broken", physical_resource_id=CREATE_FAILED_MARKER,
                                               stack_id=create["StackId"]))
    provider.handle(delete)
    assert response_server.wait_for(delete["RequestId"])["Status"] == "SUCCESS"
    assert ledger.deleted == []
