"""Async invocations: 202 + request id, x-fc-async-delay, at-least-once retries."""
from __future__ import annotations

import json
import time
from pathlib import Path

import fc2
import pytest
from fc_local_catalog import SERVICE

from crhelper.local.fc_server import LocalFunctionCompute

ASYNC = {"x-fc-invocation-type": "Async"}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_async_accepts_then_runs(fc: LocalFunctionCompute, client: fc2.Client,
                                 tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    response = client.invoke_function(SERVICE, "touch", payload=json.dumps({"path": str(out)}).encode(),
                                      headers=ASYNC)
    request_id = response.headers["x-fc-request-id"]
    assert response.data == b""
    assert fc.wait_idle(10)
    assert [run["request_id"] for run in _lines(out)] == [request_id]
    record = fc.record(request_id)
    assert (record.invocation_type, record.status, len(record.attempts)) == ("Async", "succeeded", 1)


@pytest.mark.slow
def test_async_returns_before_the_handler_runs(fc: LocalFunctionCompute, client: fc2.Client,
                                               tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    headers = dict(ASYNC, **{"x-fc-async-delay": "1"})
    client.invoke_function(SERVICE, "touch", payload=json.dumps({"path": str(out)}).encode(),
                           headers=headers)
    assert not out.exists()
    assert fc.wait_idle(10)
    assert len(_lines(out)) == 1


@pytest.mark.slow
def test_async_delay_is_honoured(fc: LocalFunctionCompute, client: fc2.Client,
                                 tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    sent = time.time()
    response = client.invoke_function(
        SERVICE, "touch", payload=json.dumps({"path": str(out)}).encode(),
        headers=dict(ASYNC, **{"x-fc-async-delay": "2"}))
    assert not fc.wait_idle(0.5)  # still delayed
    assert fc.wait_idle(10)
    record = fc.record(response.headers["x-fc-request-id"])
    assert record.delay == 2
    assert record.first_started is not None and record.first_started - record.received >= 2.0
    assert _lines(out)[0]["time"] - sent >= 2.0


@pytest.mark.slow
def test_failing_async_is_retried_max_times(fc: LocalFunctionCompute, client: fc2.Client) -> None:
    response = client.invoke_function(SERVICE, "boom", payload=b"{}", headers=ASYNC)
    assert fc.wait_idle(15)
    record = fc.record(response.headers["x-fc-request-id"])
    assert record.status == "failed"
    assert [a.number for a in record.attempts] == [1, 2, 3, 4]  # first try + 3 retries
    assert {(a.outcome, a.error_type) for a in record.attempts} == {("error", "ValueError")}
    gaps = [b.started - a.ended for a, b in zip(record.attempts, record.attempts[1:])]
    assert all(gap >= 0.04 for gap in gaps)  # back-off between retries


def test_async_retry_stops_at_first_success(fc: LocalFunctionCompute, client: fc2.Client,
                                            tmp_path: Path) -> None:
    counter = tmp_path / "count"
    payload = json.dumps({"counter": str(counter), "fail": 2}).encode()
    response = client.invoke_function(SERVICE, "fail_times", payload=payload, headers=ASYNC)
    assert fc.wait_idle(15)
    record = fc.record(response.headers["x-fc-request-id"])
    assert record.status == "succeeded"
    assert [a.outcome for a in record.attempts] == ["error", "error", "success"]
    assert counter.read_text() == "3"
    assert b"failure 2" in record.attempts[1].log_tail


def test_retry_count_is_configurable(tmp_path: Path) -> None:
    with LocalFunctionCompute(max_async_retries=1, async_retry_delay=0.01) as fc:
        fc.register("s", "boom", "fc_local_handlers:boom")
        response = fc.client().invoke_function("s", "boom", payload=b"{}", headers=ASYNC)
        assert fc.wait_idle(10)
        assert len(fc.record(response.headers["x-fc-request-id"]).attempts) == 2


@pytest.mark.slow
def test_async_timeout_counts_as_failure(tmp_path: Path) -> None:
    with LocalFunctionCompute(max_async_retries=1, async_retry_delay=0.01) as fc:
        fc.register("s", "sleeper", "fc_local_handlers:sleeper", timeout=0.5)
        payload = json.dumps({"pid_file": str(tmp_path / "pid")}).encode()
        response = fc.client().invoke_function("s", "sleeper", payload=payload, headers=ASYNC)
        assert fc.wait_idle(10)
        record = fc.record(response.headers["x-fc-request-id"])
        assert [a.outcome for a in record.attempts] == ["timeout", "timeout"]
        assert record.status == "failed"


@pytest.mark.parametrize("delay", ["3601", "-1", "soon", "1.5"])
def test_invalid_async_delay_is_rejected(client: fc2.Client, delay: str) -> None:
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, "echo", payload=b"{}",
                               headers=dict(ASYNC, **{"x-fc-async-delay": delay}))
    assert (excinfo.value.status_code, excinfo.value.err_code) == (400, "InvalidArgument")
    assert "x-fc-async-delay" in json.loads(excinfo.value.message)["ErrorMessage"]


def test_invalid_invocation_type_is_rejected(client: fc2.Client) -> None:
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, "echo", payload=b"{}",
                               headers={"x-fc-invocation-type": "Later"})
    assert (excinfo.value.status_code, excinfo.value.err_code) == (400, "InvalidArgument")


def test_async_payload_limit_is_128kb(client: fc2.Client) -> None:
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, "echo", payload=b"x" * (128 * 1024 + 1), headers=ASYNC)
    assert (excinfo.value.status_code, excinfo.value.err_code) == (400, "EntityTooLarge")
    big = b"x" * (128 * 1024 + 1)
    assert client.invoke_function(SERVICE, "echo", payload=big).data == big  # sync allows 32 MB


@pytest.mark.slow
def test_handler_reinvokes_itself_with_context_credentials(fc: LocalFunctionCompute,
                                                           client: fc2.Client,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    event = {"target": "touch", "payload": {"path": str(out)}, "delay": 1}
    child_id = client.invoke_function(SERVICE, "self_invoke",
                                      payload=json.dumps(event).encode()).data.decode()
    assert fc.wait_idle(10)
    child = fc.record(child_id)
    assert (child.function, child.invocation_type, child.delay, child.status) == \
        ("touch", "Async", 1, "succeeded")
    assert [run["request_id"] for run in _lines(out)] == [child_id]


def test_stop_drops_queued_invocations(tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    fc = LocalFunctionCompute()
    fc.register("s", "touch", "fc_local_handlers:touch")
    with fc:
        response = fc.client().invoke_function(
            "s", "touch", payload=json.dumps({"path": str(out)}).encode(),
            headers=dict(ASYNC, **{"x-fc-async-delay": "3600"}))
    assert fc.record(response.headers["x-fc-request-id"]).status == "dropped"
    assert not out.exists()
