"""FC 2.0 and MNS: requests the real `fc2` and `aliyun-mns-sdk` clients put on a real socket verify
with the shared verifiers; tampering, skew and wrong keys get FC's and MNS's own codes. (The local
endpoints' adapters are tested end to end in tests/fc_local and tests/mns.)"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from cloud_support import CaptureServer, refused, sdk

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing import fc, mns
from crhelper.cloud.signing.core import WireRequest

KEYS = {"LTAIkey": Credentials("LTAIkey", "fc-secret"), "STS.role": Credentials("STS.role", "role-secret", "tok")}


def fc_request(server: CaptureServer, key_id: str = "LTAIkey", secret: str = "fc-secret", **kw: Any) -> WireRequest:
    client = sdk("fc2").Client(endpoint=server.url, accessKeyID=key_id, accessKeySecret=secret, **kw)
    client.invoke_function("svc", "echo fn", payload=b'{"a": 1}', headers={"x-fc-invocation-type": "Async",
                                                                           "x-fc-async-delay": "20"})
    return server.take()


def test_fc2_requests_verify_and_changes_are_refused(capture: CaptureServer) -> None:
    request = fc_request(capture)
    assert request.path == "/2016-08-15/services/svc/functions/echo%20fn/invocations"
    assert fc.verify(request, KEYS, now=time.time()) == "LTAIkey"
    delayed = dataclasses.replace(request, headers={**request.headers, "x-fc-async-delay": "3000"})
    error = refused(fc.verify, delayed, KEYS)
    assert (error.status, error.code) == (403, "SignatureNotMatch")
    assert refused(fc.verify, request, KEYS, now=time.time() + 16 * 60).code == "RequestTimeTooSkewed"
    assert refused(fc.verify, request, {"other": KEYS["LTAIkey"]}).code == "InvalidAccessKeyID"
    sts = fc_request(capture, "STS.role", "role-secret", securityToken="tok")
    assert fc.verify(sts, KEYS, now=time.time()) == "STS.role"
    error = refused(fc.verify, sts, {"STS.role": Credentials("STS.role", "role-secret", "other")})
    assert error.code == "InvalidSecurityToken" and "'tok'" not in error.message


def mns_request(server: CaptureServer, secret: str = "mns-secret") -> WireRequest:
    account = sdk("mns.account").Account(server.url, "LTAImns", secret)
    with pytest.raises(Exception):  # our capture server answers JSON, which the SDK cannot parse
        account.get_queue("jobs").send_message(sdk("mns.queue").Message("hello é"))
    return server.take()


def test_mns_requests_verify_and_changes_are_refused(capture: CaptureServer) -> None:
    keys = {"LTAImns": Credentials("LTAImns", "mns-secret")}
    request = mns_request(capture)
    assert request.target == "/queues/jobs/messages"
    assert mns.verify(request, keys, now=time.time()) == "LTAImns"
    body = bytearray(request.body)
    body[len(body) // 2] ^= 0x01
    error = refused(mns.verify, dataclasses.replace(request, body=bytes(body)), keys)
    assert (error.status, error.code) == (400, "InvalidDegist")
    assert refused(mns.verify, request, keys, now=time.time() + 16 * 60).code == "TimeExpired"
    error = refused(mns.verify, mns_request(capture, "wrong"), keys)
    assert (error.status, error.code) == (403, "SignatureDoesNotMatch")
    assert refused(mns.verify, request, {"other": keys["LTAImns"]}).code == "InvalidAccessKeyId"
