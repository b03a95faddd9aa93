"""The unpatched `alibabacloud-ecs20140526` SDK against the local endpoint (cloud-apis.md "Test
cases worth writing" 1-5): signatures both ways, encodings, the exceptions the SDK raises, the
instance lifecycle, paging. Slow: the SDK's import alone takes about a second."""

from __future__ import annotations

import socket
import time
from typing import Any, Callable

import pytest
from ecs_support import REGION, sdk

from crhelper.local.ecs_server import EcsTimings, LocalECS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def m() -> Any:
    return sdk("alibabacloud_ecs20140526.models")


@pytest.fixture(scope="module")
def errors() -> Any:
    return sdk("alibabacloud_tea_openapi.exceptions")


def _raises(kind: type[BaseException], call: Callable[[], object]) -> Any:
    with pytest.raises(kind) as caught:
        call()
    return caught.value


def _statuses(client: Any, m: Any, ids: list[str]) -> dict[str, str]:
    body = client.describe_instance_status(m.DescribeInstanceStatusRequest(region_id=REGION, instance_id=ids)).body
    return {row.instance_id: row.status for row in body.instance_statuses.instance_status}


# ---------------------------------------------------------------------- 1. signatures
def test_acs3_and_rpc_signed_calls_verify(ecs: LocalECS, m: Any) -> None:
    instance_id = ecs.add_instance("a")
    ecs.client().start_instances(m.StartInstancesRequest(region_id=REGION, instance_id=[instance_id]))
    rpc = ecs.client(signature_algorithm="v2")
    assert _statuses(rpc, m, [instance_id])[instance_id] in ("Starting", "Running")
    assert [(r.action, r.signature_method, r.status) for r in ecs.requests] == [
        ("StartInstances", "ACS3-HMAC-SHA256", 200), ("DescribeInstanceStatus", "HMAC-SHA1", 200)]


@pytest.mark.parametrize("algorithm", ["ACS3-HMAC-SHA256", "v2"])
def test_a_wrong_secret_or_unknown_key_is_refused(ecs: LocalECS, m: Any, errors: Any, algorithm: str) -> None:
    request = m.DescribeInstancesRequest(region_id=REGION)
    wrong = ecs.client(access_key_secret="not-the-secret", signature_algorithm=algorithm)
    error = _raises(errors.ClientException, lambda: wrong.describe_instances(request))
    assert (error.status_code, error.code) == (400, "SignatureDoesNotMatch") and error.request_id
    unknown = ecs.client(access_key_id="LTAIunknown", signature_algorithm=algorithm)
    error = _raises(errors.ClientException, lambda: unknown.describe_instances(request))
    assert (error.status_code, error.code) == (404, "InvalidAccessKeyId.NotFound")


# ---------------------------------------------------------------------- 2. encodings
def test_booleans_lists_and_json_strings_survive(ecs: LocalECS, m: Any) -> None:
    ids = [ecs.add_instance(f"n{k}", status="Running") for k in range(3)]
    order = [ids[2], ids[0], ids[1]]
    client = ecs.client()
    body = client.stop_instances(m.StopInstancesRequest(region_id=REGION, instance_id=order, force_stop=True,
                                                        stopped_mode="StopCharging")).body
    assert [row.instance_id for row in body.instance_responses.instance_response] == order
    assert ecs.requests[-1].parameters["ForceStop"] == "True"
    assert ecs.wait_for_status(ids[0], "Stopped", 5)
    found = client.describe_instances(m.DescribeInstancesRequest(region_id=REGION, instance_ids=f'["{ids[1]}"]')).body
    assert [(i.instance_id, i.stopped_mode) for i in found.instances.instance] == [(ids[1], "StopCharging")]


# ---------------------------------------------------------------------- 3. errors
def test_sdk_exceptions(ecs: LocalECS, m: Any, errors: Any) -> None:
    darabonba = sdk("darabonba.exceptions")
    instance_id = ecs.add_instance("a", status="Running")
    client = ecs.client()
    start = m.StartInstancesRequest(region_id=REGION, instance_id=[instance_id])
    error = _raises(errors.ClientException, lambda: client.start_instances(start))
    assert (error.code, error.status_code) == ("IncorrectInstanceStatus", 403) and error.request_id
    ecs.inject_fault("StartInstances", status=500, code="InternalError")
    error = _raises(errors.ServerException, lambda: client.start_instances(start))
    assert (error.code, error.status_code) == ("InternalError", 500)
    ecs.inject_fault("StartInstances", status=400, code="Throttling.User", message="too fast", retry_after=2)
    error = _raises(errors.ThrottlingException, lambda: client.start_instances(start))
    assert (error.retry_after, error.code) == (2, "Throttling.User")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{probe.getsockname()[1]}"
    _raises(darabonba.UnretryableException, lambda: ecs.client(endpoint=closed).start_instances(start))


def test_the_v1_sdk_sees_server_exceptions(ecs: LocalECS) -> None:
    core = pytest.importorskip("aliyunsdkcore.client", reason="aliyun-python-sdk-core (V1.0) is not installed")
    exceptions = pytest.importorskip("aliyunsdkcore.acs_exception.exceptions")
    start = pytest.importorskip("aliyunsdkecs.request.v20140526.StartInstancesRequest")
    client = core.AcsClient(ecs.access_key_id, ecs.access_key_secret, REGION, auto_retry=False)
    request = start.StartInstancesRequest()
    request.set_InstanceIds(["i-missing"])
    request.set_endpoint(ecs.endpoint)
    request.set_protocol_type("http")
    error = _raises(exceptions.ServerException, lambda: client.do_action_with_exception(request))
    assert error.get_error_code() == "InvalidInstanceId.NotFound"


# ---------------------------------------------------------------------- 4. lifecycle
def _poll_until(client: Any, m: Any, instance_id: str, target: str, seen: list[str], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _statuses(client, m, [instance_id])[instance_id]
        if not seen or seen[-1] != status:
            seen.append(status)
        if status == target:
            return
        time.sleep(0.01)
    pytest.fail(f"{instance_id} never reached {target}; saw {seen}")


def test_start_stop_reboot_through_the_transitory_states(m: Any, errors: Any) -> None:
    with LocalECS(timings=EcsTimings(pending=0.2, starting=0.2, stopping=0.2, forced_stopping=0.1)) as ecs:
        client = ecs.client()
        instance_id = ecs.add_instance("a")
        client.start_instances(m.StartInstancesRequest(region_id=REGION, instance_id=[instance_id]))
        stop = m.StopInstancesRequest(region_id=REGION, instance_id=[instance_id])
        error = _raises(errors.ClientException, lambda: client.stop_instances(stop))
        assert error.code == "IncorrectInstanceStatus"
        seen: list[str] = []
        _poll_until(client, m, instance_id, "Running", seen)
        assert seen == ["Starting", "Running"]
        client.stop_instances(stop)  # retried once Running
        seen = []
        _poll_until(client, m, instance_id, "Stopped", seen)
        assert seen == ["Stopping", "Stopped"]
        client.start_instances(m.StartInstancesRequest(region_id=REGION, instance_id=[instance_id]))
        _poll_until(client, m, instance_id, "Running", [])
        client.reboot_instances(m.RebootInstancesRequest(region_id=REGION, instance_id=[instance_id]))
        seen = []
        _poll_until(client, m, instance_id, "Running", seen)
        assert seen == ["Stopping", "Starting", "Running"]


def test_run_instances_is_idempotent_and_delete_needs_force(ecs: LocalECS, m: Any, errors: Any) -> None:
    client = ecs.client()
    request = m.RunInstancesRequest(region_id=REGION, amount=2, client_token="token-1", instance_name="web",
                                    unique_suffix=True, tag=[m.RunInstancesRequestTag(key="tier", value="web")])
    first = client.run_instances(request).body.instance_id_sets.instance_id_set
    assert client.run_instances(request).body.instance_id_sets.instance_id_set == first
    assert len(ecs.fleet.instances()) == 2
    tagged = client.describe_instances(m.DescribeInstancesRequest(
        region_id=REGION, tag=[m.DescribeInstancesRequestTag(key="tier", value="web")])).body
    assert sorted(i.instance_name for i in tagged.instances.instance) == ["web001", "web002"]
    assert ecs.wait_for_status(first[0], "Running", 5)
    delete = m.DeleteInstancesRequest(region_id=REGION, instance_id=[first[0]])
    assert _raises(errors.ClientException, lambda: client.delete_instances(delete)).code == "IncorrectInstanceStatus"
    delete.force = True
    client.delete_instances(delete)
    assert [i.instance_id for i in ecs.fleet.instances()] == first[1:]


# ---------------------------------------------------------------------- 5. paging
def test_paging_over_many_instances(ecs: LocalECS, m: Any) -> None:
    client = ecs.client()
    for amount in (100, 20):
        client.run_instances(m.RunInstancesRequest(region_id=REGION, amount=amount))
    everyone = [i.instance_id for i in ecs.fleet.instances()]
    found, token = [], None
    while True:
        body = client.describe_instances(m.DescribeInstancesRequest(region_id=REGION, max_results=50,
                                                                    next_token=token)).body
        found += [i.instance_id for i in body.instances.instance]
        token = body.next_token
        if not token:
            break
    assert found == everyone
    pages = [client.describe_instance_status(m.DescribeInstanceStatusRequest(
        region_id=REGION, page_number=n, page_size=50)).body for n in (1, 2, 3, 4)]
    assert [len(p.instance_statuses.instance_status) for p in pages] == [50, 50, 20, 0]
    assert {p.total_count for p in pages} == {120}
