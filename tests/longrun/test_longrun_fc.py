"""A long-running Create on the local Function Compute endpoint: the provider re-invokes itself
asynchronously with x-fc-async-delay through the real fc2 SDK, and answers once at the end."""

from __future__ import annotations

import json
import math
import textwrap
import time

import pytest

from crhelper.local.fc_server import LocalFunctionCompute
from crhelper.reentry import FC_LEAD
from crhelper.testing import make_event

PROVIDER = textwrap.dedent('''
    from crhelper import InProgress, Provider, Result

    provider = Provider()

    @provider.create("Custom::Cluster")
    def create(props, request):
        step = (request.state or 0) + 1
        if step < props["Polls"]:
            return InProgress(state=step, delay=1)
        return Result(physical_id="cluster-1", data={"Steps": step, "Attempt": request.attempt})

    @provider.create("Custom::Forever")
    def forever(props, request):
        return InProgress(state=None, delay=1)
''')


@pytest.mark.slow
def test_fc_self_invocation_with_delay_completes_once(response_server, tmp_path):
    (tmp_path / "fc_cluster_provider.py").write_text(PROVIDER)
    env = {"CRHELPER_STORE": f"sqlite:///{tmp_path / 'state.sqlite'}"}
    with LocalFunctionCompute(code_paths=[tmp_path], async_retry_delay=0.1) as fc:
        fc.register("crhelper", "cluster", "fc_cluster_provider:provider", timeout=20, env=env)
        event = response_server.attach(make_event("Create", "Custom::Cluster", {"Polls": 3}))
        started = time.monotonic()
        fc.client().invoke_function("crhelper", "cluster", payload=json.dumps(event).encode(),
                                    headers={"x-fc-invocation-type": "Async"})
        body = response_server.wait_for(event["RequestId"], timeout=30)
        elapsed = time.monotonic() - started
        assert body["Status"] == "SUCCESS" and body["Data"] == {"Steps": 3, "Attempt": 2}
        assert 2.0 <= elapsed < 10  # two 1 s delays honoured (the re-entries wait out what FC_LEAD took off)
        assert fc.wait_idle(10)
        records = [r for r in fc.records if r.function == "cluster"]
        assert len(records) == 3  # polls + 1: the request, then two delayed re-entries
        # Each step's re-invocation is sent FC_LEAD seconds early (1 s - 1 s = 0) to hide its overheads.
        assert [r.delay for r in records] == [0, math.ceil(1 - FC_LEAD), math.ceil(1 - FC_LEAD)]
        assert all(r.status == "succeeded" for r in records)
        for record in records[1:]:
            assert record.invocation_type == "Async"
    assert len(response_server.responses_for(event["RequestId"])) == 1


@pytest.mark.slow
def test_fc_operation_past_its_deadline_fails(response_server, tmp_path):
    (tmp_path / "fc_forever_provider.py").write_text(PROVIDER.replace(
        'provider = Provider()', 'provider = Provider()\nprovider.set_deadline("Custom::Forever", 2)'))
    env = {"CRHELPER_STORE": f"sqlite:///{tmp_path / 'state.sqlite'}"}
    with LocalFunctionCompute(code_paths=[tmp_path]) as fc:
        fc.register("crhelper", "forever", "fc_forever_provider:provider", timeout=20, env=env)
        event = response_server.attach(make_event("Create", "Custom::Forever"))
        fc.client().invoke_function("crhelper", "forever", payload=json.dumps(event).encode(),
                                    headers={"x-fc-invocation-type": "Async"})
        body = response_server.wait_for(event["RequestId"], timeout=30)
    assert body["Status"] == "FAILED" and body["Reason"].startswith("did not complete within 2 s")


@pytest.mark.parametrize("store", ["", "memory://", "sqlite://:memory:"])
def test_fc_default_store_refuses_long_running_with_advice(response_server, tmp_path, store):
    """The FC default store is private to one instance, as are the in-memory ones given explicitly:
    a re-entry landing on another instance would find nothing, so InProgress is refused up front."""
    (tmp_path / "fc_nostore_provider.py").write_text(PROVIDER)
    with LocalFunctionCompute(code_paths=[tmp_path]) as fc:
        fc.register("crhelper", "nostore", "fc_nostore_provider:provider", timeout=20, env={"CRHELPER_STORE": store})
        event = response_server.attach(make_event("Create", "Custom::Cluster", {"Polls": 3}))
        fc.client().invoke_function("crhelper", "nostore", payload=json.dumps(event).encode())
        body = response_server.wait_for(event["RequestId"], timeout=30)
    assert body["Status"] == "FAILED" and "CRHELPER_STORE=s3://" in body["Reason"]
