"""ACS3-HMAC-SHA256: requests signed by the real Tea SDKs (ECS 7.x, ROS, FC 3.0), captured on a
real socket, verify; any change to what was signed, a stale date, a reused nonce or a wrong key
is refused with the gateway's precise error."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from cloud_support import ALIBABA_KEYS, CaptureServer, refused, tea, tea_config

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing import acs3, rpc
from crhelper.cloud.signing.core import SignatureRejected, WireRequest
from crhelper.cloud.signing.replay import nonce_cache

#: Driven by the real SDKs, whose import alone takes over a second.
SDK = pytest.mark.slow

KEYS = ALIBABA_KEYS


@pytest.fixture(scope="module")
def signed(capture_server: CaptureServer) -> dict[str, WireRequest]:
    """One request per SDK and shape, signed by the SDK itself and captured as received."""
    server, out = capture_server, {}
    server.requests.clear()
    client = tea.ecs.Client(tea_config(server.endpoint))
    client.start_instances(tea.ecs_models.StartInstancesRequest(
        region_id="cn-hangzhou", instance_id=["i-1", "i 2*~+é"], dry_run=False))
    out["ecs-start"] = server.take()
    client.run_command(tea.ecs_models.RunCommandRequest(
        region_id="cn-hangzhou", type="RunShellScript", instance_id=["i-1"],
        command_content="echo 'a b' && ls ~ * | grep +x ü", parameters={"name": "x y"}))
    out["ecs-command"] = server.take()
    role = tea.ros.Client(tea_config(server.endpoint, "STS.ROLE", "ROLESECRET", security_token="role-token"))
    role.create_stack(tea.ros_models.CreateStackRequest(
        region_id="cn-hangzhou", stack_name="s", template_body='{"ROSTemplateFormatVersion": "2015-09-01", "x": "a+b é"}',
        parameters=[tea.ros_models.CreateStackRequestParameters(parameter_key="A", parameter_value="1 2")]))
    out["ros-sts-form"] = server.take()
    functions = tea.fc.Client(tea_config(server.endpoint))
    functions.get_function("my fn", tea.fc_models.GetFunctionRequest(qualifier="LATEST"))
    out["fc-get"] = server.take()
    functions.invoke_function("fn", tea.fc_models.InvokeFunctionRequest(body=b'{"x": 1}'))
    out["fc-invoke"] = server.take()
    return out


def verify(request: WireRequest, now: float | None = None, keys: dict[str, Credentials] = KEYS) -> str:
    return acs3.verify(request, keys, now=time.time() if now is None else now, nonces=nonce_cache(900))


def rejected(request: WireRequest, keys: dict[str, Credentials] = KEYS, **kw: Any) -> SignatureRejected:
    return refused(acs3.verify, request, keys, nonces=nonce_cache(900), **kw)


def test_the_documented_vector_reproduces() -> None:
    empty = hashlib.sha256(b"").hexdigest()
    request = WireRequest.of("POST", "/?InstanceId.1=i-1&RegionId=cn-hangzhou", {
        "host": "127.0.0.1:16101", "x-acs-action": "StartInstances", "x-acs-content-sha256": empty,
        "x-acs-date": "2024-01-01T00:00:00Z", "x-acs-signature-nonce": "nonce-1", "x-acs-version": "2014-05-26"})
    canonical = acs3.canonical_request(request, sorted(request.headers))
    assert hashlib.sha256(canonical.encode()).hexdigest() == "a3040313e9bb4404caacf4cf22804d70341b09e9377d1b45be7896a99e115408"
    assert acs3.compute_signature("SECRETTEST", acs3.string_to_sign(canonical)) == \
        "e4d43a5802ec9049e1929a570a9b63c0f36494a48ace959f6cd8392216743cdd"


@SDK
@pytest.mark.parametrize("name,signer", [("ecs-start", "AKIDTEST"), ("ecs-command", "AKIDTEST"),
                                         ("ros-sts-form", "STS.ROLE"), ("fc-get", "AKIDTEST"),
                                         ("fc-invoke", "AKIDTEST")])
def test_every_captured_sdk_request_verifies(signed: dict[str, WireRequest], name: str, signer: str) -> None:
    assert verify(signed[name]) == signer


@SDK
def test_the_wire_query_is_not_the_signed_one(signed: dict[str, WireRequest]) -> None:
    """The SDK sends `+` for a space, unsorted; the verifier re-encodes it as it was signed."""
    request = signed["ecs-start"]
    assert "i+2%2A~%2B%C3%A9" in request.query
    assert "InstanceId.2=i%202%2A~%2B%C3%A9" in acs3.canonical_query(request.query)


def _with_header(request: WireRequest, name: str, value: str) -> WireRequest:
    return dataclasses.replace(request, headers={**request.headers, name: value})


@SDK
@pytest.mark.parametrize("name,change", [
    ("ecs-start", lambda r: dataclasses.replace(r, target=r.target.replace("i-1", "i-9"))),
    ("ecs-start", lambda r: _with_header(r, "x-acs-action", "StopInstances")),
    ("fc-get", lambda r: dataclasses.replace(r, target=r.target.replace("my%20fn", "my%20fo"))),
    ("fc-get", lambda r: dataclasses.replace(r, method="DELETE")),
    ("fc-invoke", lambda r: _with_header(r, "content-type", "application/json")),
])
def test_one_changed_signed_part_is_refused(signed: dict[str, WireRequest], name: str, change: Any) -> None:
    error = rejected(change(signed[name]))
    assert (error.status, error.code) == (400, "SignatureDoesNotMatch")
    assert "canonical request" in error.message


@SDK
@pytest.mark.parametrize("name", ["ros-sts-form", "fc-invoke"])
def test_one_flipped_body_byte_is_refused(signed: dict[str, WireRequest], name: str) -> None:
    request = signed[name]
    flipped = bytearray(request.body)
    flipped[len(flipped) // 2] ^= 0x01
    error = rejected(dataclasses.replace(request, body=bytes(flipped)))
    assert (error.code, error.reason) == ("SignatureDoesNotMatch", "x-acs-content-sha256 must be the hex SHA-256 of the request body.")


@SDK
def test_a_stale_or_future_date_is_expired(signed: dict[str, WireRequest]) -> None:
    request = signed["ecs-start"]
    for offset in (-960, 960):  # the request was signed a few seconds ago
        error = rejected(request, now=time.time() + offset)
        assert (error.status, error.code) == (400, "InvalidTimeStamp.Expired")
        assert "x-acs-date" in error.message and "at most 900 s" in error.message
    assert verify(request, now=time.time() + 850) == "AKIDTEST"
    moved = _with_header(request, "x-acs-date", "2024-01-01T00:00:00Z")
    assert rejected(moved).code == "InvalidTimeStamp.Expired"
    assert rejected(_with_header(request, "x-acs-date", "Mon, 01 Jan 2024 00:00:00 GMT")).code == "InvalidTimeStamp.Format"
    unsent = dataclasses.replace(request, headers={k: v for k, v in request.headers.items() if k != "x-acs-date"})
    error = rejected(unsent)
    assert (error.code, error.reason) == ("MissingParameter", "x-acs-date: required")


@SDK
def test_a_reused_nonce_is_refused_and_a_refused_request_burns_none(signed: dict[str, WireRequest]) -> None:
    request, nonces = signed["fc-get"], nonce_cache(900)
    wrong = {"AKIDTEST": Credentials("AKIDTEST", "not-the-secret")}
    with pytest.raises(SignatureRejected):
        acs3.verify(request, wrong, now=time.time(), nonces=nonces)
    assert acs3.verify(request, KEYS, now=time.time(), nonces=nonces) == "AKIDTEST"
    with pytest.raises(SignatureRejected) as info:
        acs3.verify(request, KEYS, now=time.time(), nonces=nonces)
    assert (info.value.status, info.value.code) == (400, "SignatureNonceUsed")
    assert request.headers["x-acs-signature-nonce"] in info.value.message


@SDK
def test_an_unknown_key_or_a_wrong_secret_is_refused(signed: dict[str, WireRequest]) -> None:
    request = signed["ecs-start"]
    error = rejected(request, keys={"OTHER": KEYS["AKIDTEST"]})
    assert (error.status, error.code) == (404, "InvalidAccessKeyId.NotFound")
    assert "'AKIDTEST'" in error.message
    error = rejected(request, keys={"AKIDTEST": Credentials("AKIDTEST", "SECRETTESU")})
    assert (error.status, error.code) == (400, "SignatureDoesNotMatch")
    assert "SECRETTES" not in error.message


@SDK
def test_an_sts_key_needs_exactly_its_token(signed: dict[str, WireRequest]) -> None:
    request = signed["ros-sts-form"]
    other_token = {"STS.ROLE": Credentials("STS.ROLE", "ROLESECRET", "another-token")}
    error = rejected(request, keys=other_token)
    assert (error.code, error.status) == ("InvalidSecurityToken.MismatchWithAccessKey", 400)
    assert "role-token" not in error.message and "another-token" not in error.message
    permanent = {"STS.ROLE": Credentials("STS.ROLE", "ROLESECRET")}
    assert "permanent access key" in rejected(request, keys=permanent).message
    dropped = dataclasses.replace(request, headers={k: v for k, v in request.headers.items() if k != "x-acs-security-token"})
    error = rejected(dropped)
    assert (error.code, error.reason) == ("IncompleteSignature",
                                          "SignedHeaders names 'x-acs-security-token', which the request does not carry.")


@SDK
def test_an_unsigned_acs_header_or_a_repeated_parameter_is_refused(signed: dict[str, WireRequest]) -> None:
    request = signed["ecs-start"]
    error = rejected(_with_header(request, "x-acs-region-id", "cn-beijing"))
    assert (error.code, error.reason) == ("IncompleteSignature", "SignedHeaders must include x-acs-region-id.")
    error = rejected(dataclasses.replace(request, target=request.target + "&RegionId=cn-beijing"))
    assert (error.code, error.reason) == ("IncompleteSignature", "query parameter 'RegionId' appears more than once.")


@SDK
@pytest.mark.parametrize("authorization,rule", [
    ("Bearer abc", "Authorization must start with ACS3-HMAC-SHA256, got 'Bearer'."),
    ("ACS3-HMAC-SHA256 Credential=AKIDTEST,SignedHeaders=host",
     "Authorization must have Credential=, SignedHeaders= and Signature=; Signature missing or empty."),
])
def test_a_malformed_authorization_names_the_rule(signed: dict[str, WireRequest], authorization: str, rule: str) -> None:
    error = rejected(_with_header(signed["ecs-start"], "authorization", authorization))
    assert (error.code, error.reason) == ("IncompleteSignature", rule)


@SDK
def test_the_sdk_reports_the_gateway_errors_it_gets(capture: CaptureServer) -> None:
    """End to end: a verifying server answers in the gateway's shape and the SDK maps it."""
    nonces = nonce_cache(900)
    capture.check = lambda request: None if acs3.verify(request, KEYS, now=time.time(), nonces=nonces) else None
    call = tea.ecs_models.DescribeInstanceStatusRequest(region_id="cn-hangzhou")
    assert tea.ecs.Client(tea_config(capture.endpoint)).describe_instance_status(call).body.request_id == "req-1"
    for key_id, secret, status, code in [("AKIDTEST", "wrong", 400, "SignatureDoesNotMatch"),
                                         ("AKIDNOBODY", "SECRETTEST", 404, "InvalidAccessKeyId.NotFound")]:
        with pytest.raises(tea.exceptions.ClientException) as info:
            tea.ecs.Client(tea_config(capture.endpoint, key_id, secret)).describe_instance_status(call)
        assert (info.value.status_code, info.value.code) == (status, code)


def test_one_nonce_cache_serves_both_alibaba_schemes() -> None:
    """A nonce accepted over RPC is refused over ACS3 for the same key (signed here with the verifier's
    own canonical form, so this runs without the SDKs)."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    nonces = nonce_cache(900)
    parameters = {"AccessKeyId": "AKIDTEST", "Action": "DescribeRegions", "SignatureMethod": "HMAC-SHA1",
                  "SignatureNonce": "shared-nonce", "SignatureVersion": "1.0", "Timestamp": stamp}
    parameters["Signature"] = rpc.compute_signature("SECRETTEST", rpc.string_to_sign("GET", parameters))
    assert rpc.verify(WireRequest.of("GET", "/?" + urlencode(parameters), {}), KEYS, now=now, nonces=nonces) == "AKIDTEST"
    headers = {"host": "h", "x-acs-action": "DescribeRegions", "x-acs-date": stamp, "x-acs-version": "2014-05-26",
               "x-acs-signature-nonce": "shared-nonce", "x-acs-content-sha256": hashlib.sha256(b"").hexdigest()}
    unsigned = WireRequest.of("POST", "/?RegionId=cn-hangzhou", headers)
    names = sorted(unsigned.headers)
    signature = acs3.compute_signature("SECRETTEST", acs3.string_to_sign(acs3.canonical_request(unsigned, names)))
    headers["authorization"] = f"ACS3-HMAC-SHA256 Credential=AKIDTEST,SignedHeaders={';'.join(names)},Signature={signature}"
    request = WireRequest.of("POST", "/?RegionId=cn-hangzhou", headers)
    assert acs3.verify(request, KEYS, now=now, nonces=nonce_cache(900)) == "AKIDTEST"
    with pytest.raises(SignatureRejected) as info:
        acs3.verify(request, KEYS, now=now, nonces=nonces)
    assert info.value.code == "SignatureNonceUsed"
