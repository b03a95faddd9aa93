"""RPC v1 HMAC-SHA1: requests signed by the real Tea SDKs in `signature_algorithm="v2"` mode (a
POST with only a query, a POST with a form body and an STS token, a GET), captured on a real
socket, verify; changes, stale timestamps, reused nonces and wrong keys get the gateway's errors."""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

import pytest
from cloud_support import ALIBABA_KEYS, CaptureServer, refused, tea, tea_config

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing import rpc
from crhelper.cloud.signing.core import SignatureRejected, WireRequest
from crhelper.cloud.signing.replay import nonce_cache

SDK = pytest.mark.slow  # the SDKs' import alone takes over a second

KEYS = ALIBABA_KEYS


def config(endpoint: str, key_id: str = "AKIDTEST", secret: str = "SECRETTEST", **extra: Any) -> Any:
    return tea_config(endpoint, key_id, secret, signature_algorithm="v2", **extra)


@pytest.fixture(scope="module")
def signed(capture_server: CaptureServer) -> dict[str, WireRequest]:
    server, out = capture_server, {}
    server.requests.clear()
    tea.ecs.Client(config(server.endpoint)).start_instances(tea.ecs_models.StartInstancesRequest(
        region_id="cn-hangzhou", instance_id=["i-1", "i 2*~+é"]))
    out["post-query"] = server.take()
    tea.ros.Client(config(server.endpoint, "STS.ROLE", "ROLESECRET", security_token="role-token")).create_stack(
        tea.ros_models.CreateStackRequest(region_id="cn-hangzhou", stack_name="s",
                                      template_body='{"ROSTemplateFormatVersion": "2015-09-01", "x": "a+b é"}'))
    out["post-form-sts"] = server.take()
    params = tea.util_models.Params(action="DescribeRegions", version="2014-05-26", protocol="HTTP", pathname="/",
                                method="GET", auth_type="AK", style="RPC", req_body_type="formData", body_type="json")
    request = tea.util_models.OpenApiRequest(query={"RegionId": "cn-hangzhou", "AcceptLanguage": "zh-CN"})
    tea.openapi.Client(config(server.endpoint)).call_api(params, request, tea.runtime.RuntimeOptions())
    out["get"] = server.take()
    return out


def verify(request: WireRequest, now: float | None = None, keys: dict[str, Credentials] = KEYS) -> str:
    return rpc.verify(request, keys, now=time.time() if now is None else now, nonces=nonce_cache(900))


def rejected(request: WireRequest, keys: dict[str, Credentials] = KEYS, **kw: Any) -> SignatureRejected:
    return refused(rpc.verify, request, keys, nonces=nonce_cache(900), **kw)


def with_query_value(request: WireRequest, name: str, value: str) -> WireRequest:
    target = re.sub(rf"([?&]){re.escape(name)}=[^&]*", lambda m: f"{m.group(1)}{name}={value}", request.target)
    assert target != request.target
    return dataclasses.replace(request, target=target)


def test_the_documented_vector_reproduces() -> None:
    parameters = {"AccessKeyId": "AKIDTEST", "Action": "StartInstances", "Format": "json", "InstanceId.1": "i-1",
                  "RegionId": "cn-hangzhou", "SignatureMethod": "HMAC-SHA1", "SignatureNonce": "nonce-1",
                  "SignatureVersion": "1.0", "Timestamp": "2024-01-01T00:00:00Z", "Version": "2014-05-26"}
    assert rpc.compute_signature("SECRETTEST", rpc.string_to_sign("POST", parameters)) == "LrK7cJw5jehNoHEkucnn+Z0YadA="


@SDK
@pytest.mark.parametrize("name,signer", [("post-query", "AKIDTEST"), ("post-form-sts", "STS.ROLE"), ("get", "AKIDTEST")])
def test_every_captured_sdk_request_verifies(signed: dict[str, WireRequest], name: str, signer: str) -> None:
    assert verify(signed[name]) == signer
    assert signed["get"].method == "GET" and signed["post-form-sts"].body.startswith(b"TemplateBody=")


@SDK
def test_form_body_parameters_are_signed(signed: dict[str, WireRequest]) -> None:
    request = signed["post-form-sts"]
    assert rpc.request_parameters(request)["TemplateBody"].endswith('"x": "a+b é"}')
    flipped = bytearray(request.body)
    flipped[-5] ^= 0x01
    error = rejected(dataclasses.replace(request, body=bytes(flipped)))
    assert (error.status, error.code) == (400, "SignatureDoesNotMatch")
    both = dataclasses.replace(request, target=request.target + "&TemplateBody=x")
    assert rejected(both).reason == "parameter 'TemplateBody' appears more than once."


@SDK
def test_a_mismatch_echoes_the_string_to_sign_unless_a_token_was_sent(signed: dict[str, WireRequest]) -> None:
    """The V1.0 SDK compares what follows the first ':' with its own string to sign."""
    request = signed["post-query"]
    error = rejected(request, keys={"AKIDTEST": Credentials("AKIDTEST", "another-secret")})
    echoed = error.message.split(":", 1)[1]
    presented = rpc.request_parameters(request)["Signature"]
    assert rpc.compute_signature("SECRETTEST", echoed) == presented  # exactly what the client signed
    assert "another-secret" not in error.message and "SECRETTEST" not in error.message
    error = rejected(signed["post-form-sts"], keys={"STS.ROLE": Credentials("STS.ROLE", "x", "role-token")})
    assert error.code == "SignatureDoesNotMatch" and "role-token" not in error.message
    assert "string to sign" not in error.message


@SDK
def test_a_stale_timestamp_is_expired_and_a_malformed_one_named(signed: dict[str, WireRequest]) -> None:
    request = signed["get"]
    error = rejected(with_query_value(request, "Timestamp", "2024-01-01T00%3A00%3A00Z"))
    assert (error.code, error.status) == ("InvalidTimeStamp.Expired", 400)
    assert "Timestamp '2024-01-01T00:00:00Z'" in error.message
    assert rejected(request, now=time.time() + 960).code == "InvalidTimeStamp.Expired"
    assert rejected(with_query_value(request, "Timestamp", "yesterday")).code == "InvalidTimeStamp.Format"


@SDK
def test_a_reused_nonce_is_refused_across_both_alibaba_schemes(signed: dict[str, WireRequest]) -> None:
    request, nonces = signed["post-query"], nonce_cache(900)
    assert rpc.verify(request, KEYS, now=time.time(), nonces=nonces) == "AKIDTEST"
    with pytest.raises(SignatureRejected) as info:
        rpc.verify(request, KEYS, now=time.time(), nonces=nonces)
    assert info.value.code == "SignatureNonceUsed"
    nonce = rpc.request_parameters(request)["SignatureNonce"]
    assert nonces.claim(("alibaba", "AKIDTEST", nonce)) is False  # ACS3 nonces share these keys


@SDK
@pytest.mark.parametrize("name,value,code,rule", [
    ("SignatureMethod", "HMAC-SHA256", "IncompleteSignature", "SignatureMethod must be HMAC-SHA1, got 'HMAC-SHA256'."),
    ("SignatureVersion", "2.0", "IncompleteSignature", "SignatureVersion must be 1.0, got '2.0'."),
    ("SignatureNonce", "", "MissingParameter", "SignatureNonce: required"),
    ("AccessKeyId", "AKIDNOBODY", "InvalidAccessKeyId.NotFound", "AccessKeyId 'AKIDNOBODY' is not a known access key."),
])
def test_each_signature_parameter_rule_is_named(signed: dict[str, WireRequest], name: str, value: str,
                                                code: str, rule: str) -> None:
    error = rejected(with_query_value(signed["post-query"], name, value))
    assert (error.code, error.reason) == (code, rule)
    assert error.status == (404 if code == "InvalidAccessKeyId.NotFound" else 400)


@SDK
def test_an_sts_key_needs_its_token(signed: dict[str, WireRequest]) -> None:
    error = rejected(signed["post-form-sts"], keys={"STS.ROLE": Credentials("STS.ROLE", "ROLESECRET", "other")})
    assert error.code == "InvalidSecurityToken.MismatchWithAccessKey" and "role-token" not in error.message


@SDK
def test_the_sdk_reports_the_gateway_errors_it_gets(capture: CaptureServer) -> None:
    nonces = nonce_cache(900)
    capture.check = lambda request: None if rpc.verify(request, KEYS, now=time.time(), nonces=nonces) else None
    call = tea.ecs_models.DescribeInstanceStatusRequest(region_id="cn-hangzhou")
    assert tea.ecs.Client(config(capture.endpoint)).describe_instance_status(call).body.request_id == "req-1"
    with pytest.raises(tea.exceptions.ClientException) as info:
        tea.ecs.Client(config(capture.endpoint, secret="wrong")).describe_instance_status(call)
    assert (info.value.status_code, info.value.code) == (400, "SignatureDoesNotMatch")
