"""The endpoint's wire behaviour without the SDK (quick): the §1.4 vectors verify through the
endpoint's own API, any change to what was signed is refused with the gateway's code, faults are
queued per action, DryRun and BatchOptimization answer as ECS does, every request is recorded."""

from __future__ import annotations

import calendar
import time
from typing import Iterator

import pytest
from ecs_support import REGION, acs3_request, rpc_request, send

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing.core import WireRequest
from crhelper.cloud.signing.replay import nonce_cache
from crhelper.local.ecs_api import EcsApi
from crhelper.local.ecs_server import LocalECS
from crhelper.local.ecs_state import Fleet, InstanceSpec

VECTOR_TIME = calendar.timegm(time.strptime("2024-01-01T00:00:00Z", "%Y-%m-%dT%H:%M:%SZ"))
VECTOR_KEYS = {"AKIDTEST": Credentials("AKIDTEST", "SECRETTEST")}


@pytest.fixture()
def vector_api() -> Iterator[EcsApi]:
    """The endpoint's API at the vectors' time, with instance i-1 Stopped."""
    fleet = Fleet()
    fleet.add(InstanceSpec(), instance_id="i-1")
    yield EcsApi(fleet, VECTOR_KEYS, effects=lambda t: None, launch=lambda i, t: None,
                 nonces=nonce_cache(900), wall_clock=lambda: VECTOR_TIME)


def _vector_acs3(signature: str = "e4d43a5802ec9049e1929a570a9b63c0f36494a48ace959f6cd8392216743cdd",
                 query: str = "InstanceId.1=i-1&RegionId=cn-hangzhou") -> WireRequest:
    names = "host;x-acs-action;x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version"
    return WireRequest.of("POST", "/?" + query, {
        "host": "127.0.0.1:16101", "x-acs-action": "StartInstances",
        "x-acs-content-sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "x-acs-date": "2024-01-01T00:00:00Z", "x-acs-signature-nonce": "nonce-1", "x-acs-version": "2014-05-26",
        "authorization": f"ACS3-HMAC-SHA256 Credential=AKIDTEST,SignedHeaders={names},Signature={signature}"})


def test_the_acs3_vector_verifies_and_starts_the_instance(vector_api: EcsApi) -> None:
    response = vector_api.handle(_vector_acs3())
    assert response.status == 200, response.body
    assert b'"CurrentStatus": "Starting"' in response.body
    assert vector_api.records()[0].signature_method == "ACS3-HMAC-SHA256"


def test_the_rpc_vector_verifies(vector_api: EcsApi) -> None:
    query = ("AccessKeyId=AKIDTEST&Action=StartInstances&Format=json&InstanceId.1=i-1&RegionId=cn-hangzhou"
             "&SignatureMethod=HMAC-SHA1&SignatureNonce=nonce-1&SignatureVersion=1.0"
             "&Timestamp=2024-01-01T00%3A00%3A00Z&Version=2014-05-26&Signature=LrK7cJw5jehNoHEkucnn%2BZ0YadA%3D")
    response = vector_api.handle(WireRequest.of("POST", "/?" + query, {"host": "127.0.0.1:16101"}))
    assert response.status == 200, response.body
    record = vector_api.records()[0]
    assert (record.action, record.signature_method, record.access_key_id) == ("StartInstances", "HMAC-SHA1", "AKIDTEST")
    assert "Signature" not in record.parameters and record.parameters["InstanceId.1"] == "i-1"


@pytest.mark.parametrize("request_, code", [
    (_vector_acs3(query="InstanceId.1=i-2&RegionId=cn-hangzhou"), "SignatureDoesNotMatch"),
    (_vector_acs3(signature="0" * 64), "SignatureDoesNotMatch"),
])
def test_a_changed_request_is_refused(vector_api: EcsApi, request_: WireRequest, code: str) -> None:
    response = vector_api.handle(request_)
    assert response.status == 400 and f'"Code": "{code}"' in response.body.decode()
    assert vector_api.fleet.get("i-1").status == "Stopped"


def test_a_reused_nonce_is_refused(vector_api: EcsApi) -> None:
    assert vector_api.handle(_vector_acs3()).status == 200
    replay = vector_api.handle(_vector_acs3())
    assert replay.status == 400 and b"SignatureNonceUsed" in replay.body


def test_wrong_secret_and_unknown_key_over_the_socket(ecs: LocalECS) -> None:
    wrong = acs3_request(ecs.endpoint, "DescribeInstanceStatus", {"RegionId": REGION}, ecs.access_key_id, "nope")
    status, _, body = send(ecs.endpoint, wrong)
    assert (status, body["Code"]) == (400, "SignatureDoesNotMatch") and body["RequestId"] and body["HostId"]
    unknown = rpc_request(ecs.endpoint, "DescribeInstanceStatus", {"RegionId": REGION}, "LTAIunknown", "x")
    status, _, body = send(ecs.endpoint, unknown)
    assert (status, body["Code"]) == (404, "InvalidAccessKeyId.NotFound")
    assert ecs.access_key_secret not in str(body)


def _call(ecs: LocalECS, action: str, **params: str) -> tuple[int, dict[str, str], dict[str, object]]:
    request = acs3_request(ecs.endpoint, action, {"RegionId": REGION, **params}, ecs.access_key_id,
                           ecs.access_key_secret)
    return send(ecs.endpoint, request)


def test_a_queued_fault_answers_the_next_calls_then_stops(ecs: LocalECS) -> None:
    ecs.inject_fault("DescribeInstanceStatus", status=400, code="Throttling.User", message="slow down",
                     times=2, retry_after=2)
    for _ in range(2):
        status, headers, body = _call(ecs, "DescribeInstanceStatus")
        assert (status, body["Code"], headers["x-acs-retry-after"]) == (400, "Throttling.User", "2")
    assert _call(ecs, "DescribeInstances")[0] == 200  # another action is untouched
    assert _call(ecs, "DescribeInstanceStatus")[0] == 200


@pytest.mark.parametrize("action, params, status, code", [
    ("DescribeNothing", {}, 404, "InvalidAction.NotFound"),
    ("StartInstances", {}, 400, "MissingParameter"),
    ("StartInstances", {"InstanceId.1": "i-missing"}, 404, "InvalidInstanceId.NotFound"),
    ("StopInstances", {"InstanceId.1": "i-x", "ForceStop": "maybe"}, 400, "InvalidParameter"),
    ("DescribeInstances", {"InstanceIds": "i-1,i-2"}, 400, "InvalidInstanceIds.Malformed"),
    ("DescribeInstanceStatus", {"PageSize": "51"}, 400, "InvalidParameter"),
])
def test_errors_name_the_rule(ecs: LocalECS, action: str, params: dict[str, str], status: int, code: str) -> None:
    got_status, _, body = _call(ecs, action, **params)
    assert (got_status, body["Code"]) == (status, code), body


def test_an_unknown_region_and_a_wrong_version(ecs: LocalECS) -> None:
    request = acs3_request(ecs.endpoint, "DescribeInstances", {"RegionId": "eu-west-9"}, ecs.access_key_id,
                           ecs.access_key_secret)
    assert send(ecs.endpoint, request)[2]["Code"] == "InvalidRegionId.NotFound"
    request = acs3_request(ecs.endpoint, "DescribeInstances", {"RegionId": REGION}, ecs.access_key_id,
                           ecs.access_key_secret, version="2016-03-14")
    assert send(ecs.endpoint, request)[2]["Code"] == "InvalidVersion"


def test_dry_run_checks_and_changes_nothing(ecs: LocalECS) -> None:
    instance_id = ecs.add_instance("a")
    status, _, body = _call(ecs, "StartInstances", **{"InstanceId.1": instance_id, "DryRun": "True"})
    assert (status, body["Code"]) == (400, "DryRunOperation")
    assert ecs.status(instance_id) == "Stopped"
    status, _, body = _call(ecs, "StopInstances", **{"InstanceId.1": instance_id, "DryRun": "true"})
    assert body["Code"] == "IncorrectInstanceStatus"


def test_all_together_fails_whole_and_success_first_reports_each(ecs: LocalECS) -> None:
    stopped, running = ecs.add_instance("s"), ecs.add_instance("r", status="Running")
    both = {"InstanceId.1": stopped, "InstanceId.2": running}
    status, _, body = _call(ecs, "StartInstances", **both)
    assert (status, body["Code"]) == (403, "IncorrectInstanceStatus")
    assert ecs.status(stopped) == "Stopped"
    status, _, body = _call(ecs, "StartInstances", BatchOptimization="SuccessFirst", **both)
    rows = body["InstanceResponses"]["InstanceResponse"]  # type: ignore[index]
    assert status == 200
    assert [(r["InstanceId"], r["Code"], r["CurrentStatus"]) for r in rows] == [
        (stopped, "200", "Starting"), (running, "IncorrectInstanceStatus", "Running")]


def test_requests_are_recorded_without_the_password(ecs: LocalECS) -> None:
    _call(ecs, "RunInstances", Password="Secret-1234", DryRun="true")
    record = ecs.requests[-1]
    assert (record.action, record.status, record.code) == ("RunInstances", 400, "DryRunOperation")
    assert record.parameters["Password"] == "******" and "Secret-1234" not in repr(ecs.requests)


def test_describe_instance_status_filters_by_id_pages_and_lists_an_unknown_id_nowhere(ecs: LocalECS) -> None:
    """As ECS: InstanceId.N (1 to 100) filters, PageSize (1 to 50, default 10) pages what matched,
    and an id that does not exist is simply not listed (no error)."""
    ids = [ecs.add_instance(f"n{k}") for k in range(12)]
    ecs.add_instance("not-asked-for")
    asked = {f"InstanceId.{n}": vm for n, vm in enumerate(["i-unknown", *ids], start=1)}
    pages = [_call(ecs, "DescribeInstanceStatus", PageNumber=str(n), **asked)[2] for n in (1, 2, 3)]
    rows = [[row["InstanceId"] for row in page["InstanceStatuses"]["InstanceStatus"]] for page in pages]  # type: ignore[index]
    assert [len(r) for r in rows] == [10, 2, 0] and sum(rows, []) == ids
    assert {(p["TotalCount"], p["PageSize"]) for p in pages} == {(12, 10)}
    status, _, body = _call(ecs, "DescribeInstanceStatus", PageSize="50", **asked)
    assert status == 200 and len(body["InstanceStatuses"]["InstanceStatus"]) == 12  # type: ignore[index]
    too_many = {f"InstanceId.{n}": f"i-{n}" for n in range(1, 102)}
    status, _, body = _call(ecs, "DescribeInstanceStatus", **too_many)
    assert (status, body["Code"]) == (400, "InvalidParameter") and "between 1 and 100, got 101" in str(body["Message"])


def test_system_tags_are_set_by_services_only(ecs: LocalECS) -> None:
    """RunInstances refuses tag keys starting with acs: or aliyun (Alibaba's services set those:
    Auto Scaling's acs:autoscaling:scalingGroupId); the harness tags like a service does."""
    for key in ("acs:autoscaling:scalingGroupId", "aliyun-x", "see http://x"):
        status, _, body = _call(ecs, "RunInstances", **{"Tag.1.Key": key, "Tag.1.Value": "v"})
        assert (status, body["Code"]) == (400, "InvalidTagKey.Malformed"), key
    assert ecs.fleet.instances() == []
    vm = ecs.add_instance("scaled", tags={"tier": "web"})
    ecs.tag_instance(vm, {"acs:autoscaling:scalingGroupId": "asg-1", "tier": "app"})
    status, _, body = _call(ecs, "DescribeInstances", **{"Tag.1.Key": "acs:autoscaling:scalingGroupId"})
    (listed,) = body["Instances"]["Instance"]  # type: ignore[index]
    assert listed["Tags"]["Tag"] == [{"TagKey": "tier", "TagValue": "app"},
                                     {"TagKey": "acs:autoscaling:scalingGroupId", "TagValue": "asg-1"}]
