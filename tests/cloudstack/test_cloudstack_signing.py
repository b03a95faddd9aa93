"""Requests from the unpatched `cs` client against the local endpoint's Java-faithful verifier:
the documented vector, `%20` for spaces, GET and POST alike, v3 `expires`, and the `~` defect."""

from __future__ import annotations

import http.client
import json
import time
from types import ModuleType
from typing import Any, Callable

from crhelper.cloud.signing import cloudstack as signing
from crhelper.local.cloudstack_server import LocalCloudStack

DOC_KEY = "plgWJfZK4gyS3mOMTVmjUVg-X-jlWlnfaUJ9GAbBbf9EdM-kAYMmAiLqzzq1ElZLYq_u38zCm0bewzGUdP66mg"
DOC_SECRET = "VDaACYb0LV9eNjTetIOElcVQkvJck_J_QljX_FcHRj87ZKiy0z0ty0ZsYBkoXkY9b7eq1EhwJaw7FF3akA3KBQ"
#: boot-groups.md §8 (its string to sign is cloud-apis.md's order: names sorted, then lower-cased).
DOC_STRING = ("apikey=plgwjfzk4gys3momtvmjuvg-x-jlwlnfauj9gabbbf9edm-kaymmailqzzq1elzlyq_u38zcm0bewzgudp66mg"
              "&command=listusers&response=json")


def test_the_documented_vector_is_what_cs_sends_and_the_server_verifies(
        cs: ModuleType, make_cloud: Callable[..., LocalCloudStack], api_error: Callable[..., Any]) -> None:
    cloud = make_cloud(api_key=DOC_KEY, secret=DOC_SECRET)
    error = api_error(lambda: cloud.client(expiration=-1).listUsers())
    assert error.error["errorcode"] == 432  # verified, then refused as a command we do not serve
    [request] = cloud.requests
    assert request.signature == "TTpdDq/7j/J58XCRHomKoQXEQds=" and request.status == 432
    assert signing.string_to_sign(request.parameters) == DOC_STRING
    assert "signature=TTpdDq%2F7j%2FJ58XCRHomKoQXEQds%3D" in error.response.request.url


def test_spaces_are_signed_as_percent_20(cs: ModuleType, cloud: LocalCloudStack) -> None:
    vm = cloud.add_vm("web tier 1")
    answer = cloud.client().listVirtualMachines(name="web tier 1")
    assert [found["id"] for found in answer["virtualmachine"]] == [vm.id]
    [request] = cloud.requests
    assert request.parameters["name"] == "web tier 1" and request.status == 200
    assert "name=web%20tier%201" in signing.string_to_sign(request.parameters)


def test_get_and_post_sign_alike(cs: ModuleType, cloud: LocalCloudStack) -> None:
    cloud.add_vm("web tier 1")
    for method in ("get", "post"):
        assert cloud.client(method=method, expiration=-1).listVirtualMachines(name="web tier 1")["count"] == 1
    get, post = cloud.requests
    assert (get.method, post.method) == ("GET", "POST")
    assert get.parameters == post.parameters and get.signature == post.signature


def test_an_expired_v3_request_is_refused_with_cloudstacks_401(
        cs: ModuleType, make_cloud: Callable[..., LocalCloudStack], api_error: Callable[..., Any]) -> None:
    cloud = make_cloud(clock=lambda: time.time() + 3600)  # cs signs expires = now + 600 s
    error = api_error(lambda: cloud.client().listVirtualMachines())
    assert error.error == {"uuidList": [], "errorcode": 401, "cserrorcode": 9999,
                           "errortext": "unable to verify user credentials and/or request signature"}
    assert error.response.status_code == 401
    assert error.response.headers["Content-Type"] == "application/json; charset=UTF-8"
    assert "has passed" in cloud.requests[0].reason


def test_a_tilde_signed_by_cs_is_refused_as_by_a_java_server(
        cs: ModuleType, cloud: LocalCloudStack, api_error: Callable[..., Any]) -> None:
    """The recorded defect: Python's quote keeps `~`, Java's URLEncoder sends `%7E`, so `cs`'s
    signature over a value with `~` never matches a real CloudStack's."""
    assert cloud.client().listVirtualMachines(name="a-b") == {}
    error = api_error(lambda: cloud.client().listVirtualMachines(name="a~b"))
    assert error.error["errorcode"] == 401
    assert cloud.requests[-1].reason.startswith("signature: does not match")


def test_a_wrong_secret_or_an_unsigned_request_is_refused(
        cs: ModuleType, cloud: LocalCloudStack, api_error: Callable[..., Any]) -> None:
    assert api_error(lambda: cloud.client(secret="wrong").listVirtualMachines()).error["errorcode"] == 401
    unsigned = cs.CloudStack(endpoint=cloud.endpoint, key=cloud.api_key)
    assert api_error(lambda: unsigned.listVirtualMachines()).error["errorcode"] == 401
    assert [r.reason for r in cloud.requests][-1] == "apiKey and signature: both required"


def test_answers_are_cloudstack_json_and_unreadable_bodies_are_refused(cloud: LocalCloudStack) -> None:
    host_port = cloud.endpoint.split("/")[2]
    conn = http.client.HTTPConnection(host_port, timeout=5)
    conn.putrequest("POST", "/client/api")
    conn.putheader("Content-Length", "abc")
    conn.endheaders()
    answer = conn.getresponse()
    assert answer.status == 431 and answer.getheader("Content-Type") == "application/json; charset=UTF-8"
    assert "Content-Length" in json.loads(answer.read())["errorresponse"]["errortext"]
    conn.close()
    conn = http.client.HTTPConnection(host_port, timeout=5)
    conn.request("GET", "/other")
    assert conn.getresponse().status == 404
    conn.close()
