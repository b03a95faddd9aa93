"""CloudStack: requests signed by the real `cs` client (GET query, POST form, `signatureVersion=3`),
captured on a real socket, verify as the Java server would; a `~`, an expired or too distant
`expires`, a wrong key or secret get CloudStack's one 401 with a precise reason."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from cloud_support import CaptureServer, refused, sdk

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing import cloudstack
from crhelper.cloud.signing.core import SignatureRejected, WireRequest

KEYS = {"K": Credentials("K", "S")}
DOC_KEY = "plgWJfZK4gyS3mOMTVmjUVg-X-jlWlnfaUJ9GAbBbf9EdM-kAYMmAiLqzzq1ElZLYq_u38zCm0bewzGUdP66mg"
DOC_SECRET = "VDaACYb0LV9eNjTetIOElcVQkvJck_J_QljX_FcHRj87ZKiy0z0ty0ZsYBkoXkY9b7eq1EhwJaw7FF3akA3KBQ"


def client(server: CaptureServer, key: str = "K", secret: str = "S", **kw: Any) -> Any:
    return sdk("cs").CloudStack(endpoint=f"{server.url}/client/api", key=key, secret=secret, **kw)


def captured(server: CaptureServer, name: str = "a b*c'(x)!", **kw: Any) -> WireRequest:
    server.requests.clear()
    client(server, **kw).listUsers(name=name, listall=True)
    return server.take()


def rejected(request: WireRequest, keys: dict[str, Credentials] = KEYS, **kw: Any) -> SignatureRejected:
    error = refused(cloudstack.verify, request, keys, **kw)
    assert (error.status, error.code, error.message) == (401, "401", cloudstack.UNAUTHORIZED_TEXT)
    return error


def test_the_documented_vectors_reproduce() -> None:
    plain = {"command": "listUsers", "apiKey": DOC_KEY, "response": "json"}
    assert cloudstack.compute_signature(DOC_SECRET, cloudstack.string_to_sign(plain)) == "TTpdDq/7j/J58XCRHomKoQXEQds="
    v3 = {**plain, "expires": "2024-01-01T00:10:00+0000", "signatureVersion": "3"}
    assert cloudstack.compute_signature(DOC_SECRET, cloudstack.string_to_sign(v3)) == "173/EufWWSlkO2lVtp7KHoSI/JI="


def test_java_encoding_escapes_what_python_keeps() -> None:
    assert cloudstack.java_url_encode("a b*c~d/é") == "a%20b*c%7Ed%2F%C3%A9"


@pytest.mark.parametrize("method", ["get", "post"])
def test_get_and_post_sign_alike_and_verify(capture: CaptureServer, method: str) -> None:
    request = captured(capture, method=method)
    assert request.method == method.upper() and ("signature=" in (request.query if method == "get" else request.body.decode()))
    assert cloudstack.verify(request, KEYS, now=time.time()) == "K"
    assert cloudstack.request_parameters(request)["name"] == "a b*c'(x)!"


def test_a_tilde_signed_by_cs_fails_as_on_a_java_server(capture: CaptureServer) -> None:
    error = rejected(captured(capture, name="a~b"))
    assert error.reason.startswith("signature: does not match")


def test_an_expired_request_or_a_changed_parameter_is_refused(capture: CaptureServer) -> None:
    request = captured(capture, expiration=60)
    assert "has passed" in rejected(request, now=time.time() + 120).reason
    changed = dataclasses.replace(request, target=request.target.replace("listall=true", "listall=false"))
    assert rejected(changed).reason.startswith("signature: does not match")


def test_enforced_timestamps_need_a_near_expires(capture: CaptureServer) -> None:
    unversioned = captured(capture, expiration=-1)
    assert cloudstack.verify(unversioned, KEYS, now=time.time()) == "K"
    assert rejected(unversioned, require_expires=True).reason.startswith("signatureVersion: must be 3")
    distant = captured(capture, expiration=3600)
    assert cloudstack.verify(distant, KEYS, now=time.time()) == "K"
    assert "more than 900 s ahead" in rejected(distant, require_expires=True).reason
    assert cloudstack.verify(captured(capture), KEYS, now=time.time(), require_expires=True) == "K"


def test_a_wrong_key_secret_or_missing_signature_is_refused(capture: CaptureServer) -> None:
    request = captured(capture)
    assert rejected(request, keys={"other": KEYS["K"]}).reason == "apiKey: 'K' is not a known key"
    assert "does not match" in rejected(request, keys={"K": Credentials("K", "T")}).reason
    bare = dataclasses.replace(request, target=request.target.split("&signature=")[0])
    assert rejected(bare).reason == "apiKey and signature: both required"


def test_cs_reports_the_401_it_gets(capture: CaptureServer) -> None:
    capture.check = lambda request: None if cloudstack.verify(request, KEYS, now=time.time()) else None
    assert client(capture).listUsers() == {"count": 0}
    with pytest.raises(sdk("cs").CloudStackApiException) as info:
        client(capture, secret="wrong").listUsers()
    assert info.value.error["errorcode"] == 401
    assert info.value.error["errortext"] == "unable to verify user credentials and/or request signature"
