"""Signature verification: the server must agree with fc2's signer bit for bit."""
from __future__ import annotations

import email.utils
import json
import time

import fc2
import fc2.auth
import pytest
import requests
from fc_local_catalog import SERVICE

from crhelper.local.fc_auth import AccessKey, compute_signature, string_to_sign, verify_request
from crhelper.local.fc_protocol import FcApiError
from crhelper.local.fc_server import LocalFunctionCompute

PATH = f"/2016-08-15/services/{SERVICE}/functions/echo/invocations"


def _send(fc: LocalFunctionCompute, headers: dict[str, str], *, method: str = "POST",
          path: str = PATH, secret: str | None = None, date: str | None = None,
          sign: bool = True, body: bytes = b"hi") -> requests.Response:
    """Build a request the way fc2 does, signed by fc2's own Auth."""
    full = {"date": date or email.utils.formatdate(usegmt=True),
            "content-type": "application/json", "content-length": str(len(body)), **headers}
    if sign:
        auth = fc2.auth.Auth(fc.access_key_id, secret or fc.access_key_secret)
        full["authorization"] = auth.sign_request(method, path, full)
    return requests.request(method, fc.endpoint + path, headers=full, data=body, timeout=30)


@pytest.mark.parametrize("headers", [
    {},
    {"x-fc-invocation-type": "Async", "x-fc-async-delay": "20", "X-Fc-Trace-Id": "t"},
    {"x-fc-security-token": "tok", "content-md5": "abc", "x-fc-log-type": "Tail"},
])
def test_string_to_sign_matches_fc2(headers: dict[str, str]) -> None:
    signed = {"date": "Mon, 30 Nov 2026 10:00:00 GMT", "content-type": "application/json",
              "host": "h", **headers}
    expected = fc2.auth.Auth("ak", "secret").sign_request("POST", PATH, signed)
    lowered = {k.lower(): v for k, v in signed.items()}
    text = string_to_sign("POST", PATH, lowered)
    assert expected == "FC ak:" + compute_signature("secret", text)


def test_verify_request_rejects_changed_path() -> None:
    keys = {"ak": AccessKey("ak", "secret")}
    headers = {"date": email.utils.formatdate(usegmt=True), "content-type": "application/json"}
    headers["authorization"] = fc2.auth.Auth("ak", "secret").sign_request("POST", PATH, headers)
    assert verify_request("POST", PATH, headers, keys, time.time()) == keys["ak"]
    with pytest.raises(FcApiError) as excinfo:
        verify_request("POST", PATH.replace("echo", "boom"), headers, keys, time.time())
    assert excinfo.value.code == "SignatureNotMatch"


def test_wrong_secret_is_rejected(fc: LocalFunctionCompute) -> None:
    client = fc2.Client(endpoint=fc.endpoint, accessKeyID=fc.access_key_id,
                        accessKeySecret="not-the-secret")
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, "echo", payload=b"{}")
    assert (excinfo.value.status_code, excinfo.value.err_code) == (403, "SignatureNotMatch")
    assert fc.access_key_secret not in excinfo.value.message


def test_unknown_access_key_is_rejected(fc: LocalFunctionCompute) -> None:
    client = fc2.Client(endpoint=fc.endpoint, accessKeyID="LTAInobody",
                        accessKeySecret=fc.access_key_secret)
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, "echo", payload=b"{}")
    assert (excinfo.value.status_code, excinfo.value.err_code) == (403, "InvalidAccessKeyID")


def test_configured_access_keys_are_accepted() -> None:
    with LocalFunctionCompute(access_keys={"LTAIfixed": "fixed-secret"}) as fc:
        fc.register("s", "echo", "fc_local_handlers.echo")
        client = fc2.Client(endpoint=fc.endpoint, accessKeyID="LTAIfixed",
                            accessKeySecret="fixed-secret")
        assert client.invoke_function("s", "echo", payload=b"ok").data == b"ok"


def test_valid_raw_request_passes(fc: LocalFunctionCompute) -> None:
    response = _send(fc, {"x-fc-invocation-type": "Sync"})
    assert (response.status_code, response.content) == (200, b"hi")


def test_tampered_header_is_rejected(fc: LocalFunctionCompute) -> None:
    headers = {"x-fc-invocation-type": "Async", "x-fc-async-delay": "1",
               "date": email.utils.formatdate(usegmt=True), "content-type": "application/json"}
    headers["authorization"] = fc2.auth.Auth(fc.access_key_id, fc.access_key_secret).sign_request(
        "POST", PATH, headers)
    headers["x-fc-async-delay"] = "3000"
    response = requests.post(fc.endpoint + PATH, headers=headers, data=b"{}", timeout=30)
    assert response.status_code == 403
    assert response.json()["ErrorCode"] == "SignatureNotMatch"


def test_missing_authorization_is_rejected(fc: LocalFunctionCompute) -> None:
    response = _send(fc, {}, sign=False)
    assert response.status_code == 400
    assert response.json() == {"ErrorCode": "MissingRequiredHeader",
                               "ErrorMessage": "required HTTP header Authorization was not specified"}


def test_malformed_authorization_is_rejected(fc: LocalFunctionCompute) -> None:
    response = _send(fc, {"authorization": "Bearer abc"}, sign=False)
    assert (response.status_code, response.json()["ErrorCode"]) == (400, "InvalidArgument")


@pytest.mark.parametrize("offset", [-16 * 60, 16 * 60])
def test_stale_or_future_date_is_rejected(fc: LocalFunctionCompute, offset: int) -> None:
    date = email.utils.formatdate(time.time() + offset, usegmt=True)
    response = _send(fc, {}, date=date)
    assert (response.status_code, response.json()["ErrorCode"]) == (403, "RequestTimeTooSkewed")
    ok = _send(fc, {}, date=email.utils.formatdate(time.time() - 14 * 60, usegmt=True))
    assert ok.status_code == 200


def test_sts_credential_needs_its_token(fc: LocalFunctionCompute) -> None:
    role = fc.role_credentials
    without = fc2.Client(endpoint=fc.endpoint, accessKeyID=role.access_key_id,
                         accessKeySecret=role.access_key_secret)
    with pytest.raises(fc2.FcError) as excinfo:
        without.invoke_function(SERVICE, "echo", payload=b"{}")
    assert (excinfo.value.status_code, excinfo.value.err_code) == (403, "InvalidSecurityToken")
    wrong = fc2.Client(endpoint=fc.endpoint, accessKeyID=role.access_key_id,
                       accessKeySecret=role.access_key_secret, securityToken="forged")
    with pytest.raises(fc2.FcError) as excinfo:
        wrong.invoke_function(SERVICE, "echo", payload=b"{}")
    assert excinfo.value.err_code == "InvalidSecurityToken"
    assert role.security_token not in excinfo.value.message
    right = fc2.Client(endpoint=fc.endpoint, accessKeyID=role.access_key_id,
                       accessKeySecret=role.access_key_secret, securityToken=role.security_token)
    assert right.invoke_function(SERVICE, "echo", payload=b"sts").data == b"sts"


def test_permanent_key_rejects_a_security_token(fc: LocalFunctionCompute) -> None:
    client = fc2.Client(endpoint=fc.endpoint, accessKeyID=fc.access_key_id,
                        accessKeySecret=fc.access_key_secret, securityToken="unexpected")
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, "echo", payload=b"{}")
    assert excinfo.value.err_code == "InvalidSecurityToken"


def test_other_routes_are_not_supported(fc: LocalFunctionCompute) -> None:
    response = _send(fc, {}, method="GET", path="/2016-08-15/custom-domains", body=b"")
    assert response.status_code == 400
    assert response.json() == {"ErrorCode": "PathNotSupported",
                               "ErrorMessage": "'GET' against '/2016-08-15/custom-domains' is not supported"}
    with pytest.raises(fc2.FcError) as excinfo:
        fc.client().list_custom_domains()
    assert excinfo.value.err_code == "PathNotSupported"
    assert json.loads(excinfo.value.message)["RequestId"] != "unknown"


def test_malformed_chunked_body_gets_an_fc_error_not_a_dropped_connection(fc: LocalFunctionCompute) -> None:
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(fc.endpoint)
    with socket.create_connection((where.hostname, where.port), timeout=10) as conn:
        conn.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhi\r\n0\r\n\r\n".encode())
        reply = b""
        while chunk := conn.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400"), reply[:80]
    assert b"InvalidArgument" in reply and b"chunk" in reply
