"""HttpConfig.SignKey: the algorithm (cross-checked by hand) and the endpoint refusing forged, unsigned,
stale and replayed requests with 401/409."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest
import requests

from crhelper.testing import ResponseServer, make_event
from crhelper.transports.http import encode_form
from crhelper.transports.http_config import EndpointConfig
from crhelper.transports.signature import (
    ReplayCache,
    SignatureError,
    SignatureVariant,
    format_date,
    sign,
    signed_body,
    string_to_sign,
    verify,
)

KEY = "s3cr3t-sign-key"


def test_signature_matches_the_documented_algorithm_computed_by_hand() -> None:
    data = {"RequestType": "Create", "ResourceProperties": {"Name": "é", "A": 1}, "StackId": "s"}
    date = "2021-03-11T13:32:02Z"
    md5 = hashlib.md5(json.dumps(data, sort_keys=True, ensure_ascii=True).encode("utf-8")).hexdigest()
    text = "\n".join(["POST", "application/json", md5, date, "X-A:1", "X-B:2", "https://abc.com"])
    expected = hmac.new(KEY.encode(), text.encode(), hashlib.sha1).hexdigest()
    headers = {"X-B": "2", "X-A": "1"}
    assert string_to_sign(data, date=date, url="https://abc.com", headers=headers) == text
    assert "\\u00e9" in json.dumps(data, sort_keys=True)  # non-ASCII is escaped before hashing
    assert sign(data, key=KEY, url="https://abc.com", date=date, headers=headers) == {"Date": date, "Value": expected}
    assert len(expected) == 40


def test_variants_change_the_value_and_round_trip() -> None:
    data = {"RequestId": "r", "StackId": "s"}
    values = set()
    key = "00ff" * 8  # valid as text and as hex, meaning different bytes
    for spec in ("", "digest=sha1-append", "md5=base64", "json=compact", "key=hex"):
        variant = SignatureVariant.named(spec)
        signature = sign(data, key=key, url="https://x", date=format_date(), variant=variant)
        values.add(signature["Value"])
        verify({**data, "Signature": signature}, key=key, urls=["https://x"], variant=variant)
    assert len(values) == 5
    with pytest.raises(ValueError, match="unknown setting"):
        SignatureVariant.named("digest=md5")


def test_verify_names_field_and_rule() -> None:
    body = signed_body({"RequestId": "r"}, key=KEY, url="https://x")
    cases = [
        ({"RequestId": "r"}, "Signature"),
        ({**body, "Signature": "abc"}, "Signature"),
        ({**body, "Signature": {"Value": "ab"}}, "Signature.Date"),
        ({**body, "Signature": {"Date": body["Signature"]["Date"]}}, "Signature.Value"),
        ({**body, "Signature": {**body["Signature"], "Date": "11 Mar 2021"}}, "Signature.Date"),
        ({**body, "RequestId": "tampered"}, "Signature.Value"),
    ]
    for candidate, field in cases:
        with pytest.raises(SignatureError) as caught:
            verify(candidate, key=KEY, urls=["https://x"])
        assert caught.value.field == field
    with pytest.raises(SignatureError, match="within 300 s"):
        verify(body, key=KEY, urls=["https://x"], now=time.time() + 301)
    assert verify(body, key=KEY, urls=["https://other", "https://x"]).value == body["Signature"]["Value"]


def test_replay_cache_forgets_after_window_and_stays_bounded() -> None:
    now = [0.0]
    cache = ReplayCache(window=10, max_entries=3, clock=lambda: now[0])
    assert cache.claim(("a",)) and not cache.claim(("a",))
    cache.release(("a",))
    assert cache.claim(("a",))
    for key in "bcd":
        assert cache.claim((key,))
    assert len(cache) == 3
    now[0] = 11
    assert cache.claim(("b",)) and len(cache) == 1


def _signed(event: dict, url: str, **options: object) -> dict:
    return signed_body(event, key=KEY, url=url, **options)  # type: ignore[arg-type]


def test_good_signature_is_accepted_and_answered(serve, response_server: ResponseServer) -> None:
    server = serve(EndpointConfig(sign_key=KEY))
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "signed"}))
    reply = requests.post(server.url + "/", json=_signed(event, server.url), timeout=10)
    assert reply.status_code == 200, reply.text
    answer = response_server.wait_for(event["RequestId"])
    assert answer["Status"] == "SUCCESS" and "Signature" not in json.dumps(answer)
    sync = requests.post(server.url + "/sync", json=_signed(event, server.url + "/sync"), timeout=10)
    assert sync.status_code == 200 and sync.json()["PhysicalResourceId"] == "echo-signed"


def test_unsigned_forged_and_stale_requests_are_refused_401(serve, response_server: ResponseServer) -> None:
    server = serve(EndpointConfig(sign_key=KEY))
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "x"}))
    unsigned = requests.post(server.url, json=event, timeout=10)
    assert unsigned.status_code == 401 and unsigned.json()["Field"] == "Signature"
    wrong_key = signed_body(event, key="another-key", url=server.url)
    assert requests.post(server.url, json=wrong_key, timeout=10).status_code == 401
    tampered = _signed(event, server.url)
    tampered["ResourceProperties"] = {"Name": "evil"}
    refused = requests.post(server.url, json=tampered, timeout=10)
    assert refused.status_code == 401 and refused.json()["Field"] == "Signature.Value"
    other_url = _signed(event, "https://elsewhere.example.com")
    assert requests.post(server.url, json=other_url, timeout=10).status_code == 401
    stale = _signed(event, server.url, date=format_date(time.time() - 301))
    old = requests.post(server.url, json=stale, timeout=10)
    assert old.status_code == 401 and old.json()["Field"] == "Signature.Date"
    future = _signed(event, server.url, date=format_date(time.time() + 400))
    assert requests.post(server.url, json=future, timeout=10).status_code == 401
    for reply in (unsigned, refused, old):
        assert KEY not in reply.text and "ResponseURL" not in reply.text
    time.sleep(0.2)
    assert response_server.captures == []


def test_replayed_signature_is_refused_409_but_a_resigned_retry_is_accepted(serve, response_server: ResponseServer) -> None:
    from http_providers import provider

    runs: list[str] = []

    def handle(event: dict) -> object:
        runs.append(event["RequestId"])
        return provider.handle(event)

    server = serve(EndpointConfig(sign_key=KEY), handle=handle)
    event = response_server.attach(make_event("Delete", "Custom::Echo", {"Name": "r"}, physical_resource_id="echo-r"))
    first = _signed(event, server.url, date=format_date(time.time() - 5))
    assert requests.post(server.url, json=first, timeout=10).status_code == 200
    replay = requests.post(server.url, json=first, timeout=10)
    assert replay.status_code == 409 and replay.json()["Error"] == "Replayed"
    retry = _signed(event, server.url)  # ROS re-delivering a Delete signs it again with a new Date
    assert requests.post(server.url, json=retry, timeout=10).status_code == 200
    assert response_server.wait_for(event["RequestId"])["Status"] == "SUCCESS"
    deadline = time.monotonic() + 5
    while len(runs) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert runs == [event["RequestId"]] * 2  # the first and the re-signed retry ran; the replay never did


def test_replay_with_a_respelled_signature_value_is_still_refused(serve, response_server: ResponseServer) -> None:
    """Signature is outside the signed data, so a replay may pad or re-case Value; it must still be caught."""
    server = serve(EndpointConfig(sign_key=KEY))
    event = response_server.attach(make_event("Delete", "Custom::Echo", {"Name": "p"}, physical_resource_id="echo-p"))
    first = _signed(event, server.url)
    assert requests.post(server.url, json=first, timeout=10).status_code == 200
    value = first["Signature"]["Value"]
    for spelled in (f" {value}", f"{value}\n", value.upper(), f"\t{value.upper()} "):
        replay = {**first, "Signature": {**first["Signature"], "Value": spelled}}
        reply = requests.post(server.url, json=replay, timeout=10)
        assert reply.status_code == 409, (repr(spelled), reply.text)
    response_server.wait_for(event["RequestId"])


def test_replays_allowed_when_configured(serve, response_server: ResponseServer) -> None:
    server = serve(EndpointConfig(sign_key=KEY, reject_replays=False))
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "again"}))
    body = _signed(event, server.url)
    assert [requests.post(server.url, json=body, timeout=10).status_code for _ in range(2)] == [200, 200]
    response_server.wait_for(event["RequestId"])


def test_public_url_signed_headers_and_form_body(serve, response_server: ResponseServer) -> None:
    public = "https://cr.example.com/ros"
    config = EndpointConfig(sign_key=KEY, public_url=public, signed_headers=("X-Ros-Tenant",))
    server = serve(config)
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "hdr"}))
    headers = {"X-Ros-Tenant": "t-1"}
    body = _signed(event, public + "/hooks", headers=headers)
    assert requests.post(server.url + "/hooks", json=body, headers=headers, timeout=10).status_code == 200
    response_server.wait_for(event["RequestId"])
    missing = requests.post(server.url + "/hooks", json=_signed(event, public + "/hooks", headers=headers), timeout=10)
    assert missing.status_code == 401 and missing.json()["Field"] == "header X-Ros-Tenant"
    changed = requests.post(server.url + "/hooks", json=_signed(event, public + "/hooks", headers=headers),
                            headers={"X-Ros-Tenant": "t-2"}, timeout=10)
    assert changed.status_code == 401

    form_event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "form"}))
    form_type = "application/x-www-form-urlencoded"
    signed = _signed(form_event, public + "/hooks", headers=headers, content_type=form_type)
    reply = requests.post(server.url + "/hooks", data=encode_form(signed), timeout=10,
                          headers={**headers, "Content-Type": form_type})
    assert reply.status_code == 200, reply.text
    assert response_server.wait_for(form_event["RequestId"])["PhysicalResourceId"] == "echo-form"
