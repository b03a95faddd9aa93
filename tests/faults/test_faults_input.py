"""Hostile request input, end to end through a real provider and a real ResponseURL server:
nesting deep enough to blow Python's stack, lone surrogates, secrets in escaped forms, and the
exact size boundaries of ROS's rules. Every case ends in one precise answer, never a crash."""

from __future__ import annotations

import json
import re
from urllib.parse import quote, quote_plus

import pytest
from pydantic import BaseModel, SecretStr

from crhelper import Provider, Request, Result
from crhelper.constants import CREATE_FAILED_MARKER, MAX_NESTING_DEPTH, MAX_RESPONSE_BYTES
from crhelper.envelopes import decode_body, unwrap_event
from crhelper.errors import RequestError
from crhelper.logs import JsonFormatter, configure
from crhelper.request import decode_event, parse_request
from crhelper.response import data_problem, encode, failed_body_from_raw, mask_secrets
from crhelper.testing import make_event

DEEP = 100_000
TOO_DEEP = f"nested too deeply (limit {MAX_NESTING_DEPTH} levels)"


def deep_list(levels: int) -> str:
    return "[" * levels + "]" * levels


def deep_object(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def with_raw_field(event: dict, name: str, raw_json: str) -> bytes:
    """The event as ROS would send it, with one field's value spliced in as raw JSON text."""
    event = {k: v for k, v in event.items() if k != name}
    return (json.dumps(event)[:-1] + f', "{name}": {raw_json}}}').encode()


def echo_provider() -> Provider:
    provider = Provider()
    provider.create("Custom::Echo")(lambda props, request: Result(physical_id="echo-1", data={"Keys": sorted(props)}))
    return provider


# --- nesting -------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [deep_list(DEEP), deep_object(DEEP), "[" * DEEP, '{"a":' * DEEP])
def test_a_body_nested_100k_deep_is_a_precise_request_error(text):
    with pytest.raises(RequestError) as caught:
        parse_request(decode_event(text.encode()))
    assert "nested too deeply" in str(caught.value) or "not valid JSON" in str(caught.value)
    if text.endswith(("]", "}")):
        assert str(caught.value) == f"request body is {TOO_DEEP}" or "a: " + TOO_DEEP in str(caught.value)


def test_the_body_limit_is_exact():
    fields = json.dumps(make_event("Create", "Custom::Echo"))[:-1]
    at_limit = f'{fields}, "Extra": {deep_list(MAX_NESTING_DEPTH)}}}'
    assert parse_request(decode_event(at_limit)).extra == {"Extra": json.loads(deep_list(MAX_NESTING_DEPTH))}
    over = f'{fields}, "Extra": {deep_list(MAX_NESTING_DEPTH + 1)}}}'
    with pytest.raises(RequestError, match=re.escape(f"Extra: {TOO_DEEP}") + "$"):
        parse_request(decode_event(over))


@pytest.mark.parametrize("levels", [MAX_NESTING_DEPTH + 1, 5_000, DEEP])
@pytest.mark.parametrize("shape", [deep_list, deep_object])
def test_resource_properties_nested_absurdly_deep_get_a_failed_naming_the_field(response_server, levels, shape):
    event = response_server.attach(make_event("Create", "Custom::Echo"))
    body = echo_provider().handle(with_raw_field(event, "ResourceProperties", '{"P": ' + shape(levels) + "}"))
    answer = response_server.wait_for(event["RequestId"])
    assert answer == body
    assert answer["Status"] == "FAILED" and answer["PhysicalResourceId"] == CREATE_FAILED_MARKER
    assert answer["Reason"] == f"invalid request: ResourceProperties: {TOO_DEEP}"


def test_resource_properties_as_a_dict_nested_too_deeply_get_a_failed(response_server):
    nested: list = []
    for _ in range(2_000):
        nested = [nested]
    event = response_server.attach(make_event("Create", "Custom::Echo", {"P": nested}))
    body = echo_provider().handle(event)
    assert response_server.wait_for(event["RequestId"]) == body
    assert body["Reason"] == f"invalid request: ResourceProperties: {TOO_DEEP}"


def test_double_encoded_resource_properties_nested_too_deeply(response_server):
    event = response_server.attach(make_event("Create", "Custom::Echo"))
    event["ResourceProperties"] = '{"P": ' + deep_list(DEEP) + "}"
    body = echo_provider().handle(event)
    assert response_server.wait_for(event["RequestId"])["Reason"] == f"invalid request: ResourceProperties: {TOO_DEEP}"
    assert body["Status"] == "FAILED"


def test_resource_properties_at_the_limit_still_work(response_server):
    event = response_server.attach(make_event("Create", "Custom::Echo"))
    body = echo_provider().handle(with_raw_field(event, "ResourceProperties", '{"P": ' + deep_list(MAX_NESTING_DEPTH - 1) + "}"))
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Keys": ["P"]}


def test_envelopes_report_deep_nesting_and_never_raise():
    with pytest.raises(ValueError, match=r"^message body is nested too deeply \(limit 100 levels\)$"):
        decode_body(deep_list(DEEP))
    with pytest.raises(RequestError, match="^" + re.escape(f"a: {TOO_DEEP};")):  # salvaged: refused by field
        parse_request(decode_body(deep_object(DEEP)))
    (listed,) = unwrap_event(deep_list(DEEP).encode())
    assert listed.error == f"event is {TOO_DEEP}"
    (objected,) = unwrap_event(deep_object(DEEP).encode())
    assert objected.error is not None
    (batch,) = unwrap_event([[deep_list(10)]])
    assert batch.error == "batch element 0 is not an MNS CloudEvent"


def test_an_mns_message_with_deep_properties_can_still_be_answered(response_server):
    event = response_server.attach(make_event("Create", "Custom::Echo"))
    message = with_raw_field(event, "ResourceProperties", deep_list(DEEP)).decode()
    batch = [{"specversion": "1.0", "type": "mns:Queue:SendMessage", "id": "m-1",
              "data": {"messageId": "m-1", "messageBody": message}}]
    (envelope,) = unwrap_event(json.dumps(batch).encode())
    assert envelope.ok
    body = echo_provider().handle(envelope.body)
    assert response_server.wait_for(event["RequestId"])["Reason"] == f"invalid request: ResourceProperties: {TOO_DEEP}"
    assert body["Status"] == "FAILED"


def test_data_nested_too_deeply_is_a_precise_problem(response_server):
    nested: list = []
    for _ in range(5_000):
        nested = [nested]
    assert data_problem({"ok": 1, "Deep": nested}) == f"Data['Deep'] is {TOO_DEEP}"
    at_limit: list = []
    for _ in range(MAX_NESTING_DEPTH - 1):
        at_limit = [at_limit]
    assert data_problem({"Fine": at_limit}) is None
    provider = Provider()
    provider.create("Custom::Deep")(lambda props, request: Result(physical_id="d-1", data={"Deep": nested}))
    event = response_server.attach(make_event("Create", "Custom::Deep"))
    body = provider.handle(event)
    assert response_server.wait_for(event["RequestId"]) == body
    assert body["Status"] == "FAILED" and body["Reason"] == f"Data['Deep'] is {TOO_DEEP}"


def test_a_cyclic_data_value_is_a_problem_not_a_crash():
    cycle: list = []
    cycle.append(cycle)
    assert "Data['Loop']" in (data_problem({"Loop": cycle}) or "")


# --- lone surrogates -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["StackId", "RequestId", "LogicalResourceId", "ResourceType", "StackName",
                                  "PhysicalResourceId", "IntranetResponseURL"])
def test_a_lone_surrogate_in_an_identifier_is_refused_naming_the_field(name):
    event = make_event("Delete" if name == "PhysicalResourceId" else "Create", "Custom::Echo", physical_resource_id="p")
    event[name] = "abc\udc80"
    raw = decode_event(json.dumps(event).encode())  # the valid JSON escape ROS may send
    with pytest.raises(RequestError, match=f"{name}: contains a lone surrogate U\\+DC80, not valid Unicode"):
        parse_request(raw)


def test_a_lone_surrogate_stack_id_gets_a_failed_echoing_the_same_escape(response_server):
    event = response_server.attach(make_event("Create", "Custom::Echo"))
    event["StackId"] = "stack-\udc80"
    body = echo_provider().handle(json.dumps(event).encode())
    assert body["Status"] == "FAILED"
    assert body["Reason"] == "invalid request: StackId: contains a lone surrogate U+DC80, not valid Unicode"
    answer = response_server.wait_for(event["RequestId"])
    assert answer["StackId"] == "stack-\udc80"
    (capture,) = response_server.captures
    assert b'"StackId":"stack-\\udc80"' in capture.raw  # byte for byte the escape ROS sent
    capture.raw.decode("utf-8")  # strict UTF-8 on the wire


def test_encode_and_failed_body_from_raw_never_raise_on_surrogates():
    raw = {"StackId": "\ud800", "RequestId": "r\udfff", "LogicalResourceId": "汉\udc80", "PhysicalResourceId": "\udc80"}
    body = failed_body_from_raw(raw, "bad \udc81 reason")
    sent = encode(body)
    assert json.loads(sent) == json.loads(json.dumps(body))
    assert "汉".encode() in sent and b"\\udc80" in sent
    assert encode({"Data": {"\udc80": "é"}}) == '{"Data":{"\\udc80":"é"}}'.encode()


def test_the_json_log_formatter_survives_surrogates():
    import logging

    record = logging.LogRecord("crhelper.t", logging.ERROR, __file__, 1, "bad \udc80 %s", ("x\ud800",), None)
    record.fields = {"StackId": "\udc80"}
    line = JsonFormatter().format(record)
    line.encode("utf-8")
    assert json.loads(line)["StackId"] == "\udc80"


# --- secrets in escaped forms --------------------------------------------------------------------


class Login(BaseModel):
    User: str
    Password: SecretStr


SECRETS = ["it's a \"quote\"", "back\\slash", "new\nline", "tab\tand ünï", "p@ss/wörd&x=1+2", "a'b\"c\\d\n"]


def forms(secret: str) -> list[str]:
    found = [secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
             quote(secret, safe=""), quote_plus(secret), repr(json.dumps(secret))[1:-1],
             json.dumps(repr(secret))[1:-1]]
    return [form for form in found if len(form) > 3]


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("how", ["repr", "json", "quoted", "raw", "nested-repr"])
def test_escaped_secrets_never_reach_the_reason_or_the_log(response_server, capsys, secret, how):
    configure()
    provider = Provider()

    @provider.create("Custom::Login")
    def create(props: Login, request: Request) -> Result:
        value = props.Password.get_secret_value()
        message = {
            "repr": repr(value),
            "json": json.dumps({"p": value}),
            "quoted": f"https://h/x?password={quote_plus(value)}&p2={quote(value, safe='')}",
            "raw": f"login with {value} failed",
            "nested-repr": repr({"args": [value, json.dumps(value)]}),
        }[how]
        raise ValueError(message)

    event = response_server.attach(make_event("Create", "Custom::Login", {"User": "bob", "Password": secret}))
    body = provider.handle(event)
    reason = response_server.wait_for(event["RequestId"])["Reason"]
    assert reason == body["Reason"] and reason.startswith("ValueError: ") and "***" in reason
    logged = capsys.readouterr().err
    assert "handler raised" in logged
    decoded_lines = [json.loads(line) for line in logged.splitlines() if line.startswith("{")]
    texts = [reason, logged, *(json.dumps(line, ensure_ascii=False) for line in decoded_lines),
             *(str(line.get("traceback", "")) for line in decoded_lines)]
    for text in texts:
        for form in forms(secret):
            assert form not in text, (form, text)


def test_mask_secrets_masks_the_longest_form_first():
    assert mask_secrets("x 'a\\nb' y", ["a\nb"]) == "x '***' y"
    assert mask_secrets('{"p": "a\\"b"}', ['a"b']) == '{"p": "***"}'
    assert mask_secrets("pw=p%40ss%2F1", ["p@ss/1"]) == "pw=***"
    assert mask_secrets("abcabc", ["abc", "abcabc"]) == "***"
    assert mask_secrets("nothing", ["", "\udc80"]) == "nothing"


# --- boundaries ----------------------------------------------------------------------------------


def sized_provider(target: int, fixed_ids: dict) -> Provider:
    """A Create whose SUCCESS body is exactly `target` UTF-8 bytes, with 3-byte characters in Data."""
    provider = Provider()

    @provider.create("Custom::Sized")
    def create(props: dict, request: Request) -> Result:
        base = {"Status": "SUCCESS", "PhysicalResourceId": "sized-1", **fixed_ids, "Data": {"T": ""}}
        room = target - len(encode(base))
        text = "汉" * (room // 3) + "a" * (room % 3)
        return Result(physical_id="sized-1", data={"T": text})

    return provider


@pytest.mark.parametrize("size", [MAX_RESPONSE_BYTES, MAX_RESPONSE_BYTES + 1])
def test_a_body_of_exactly_4096_bytes_is_sent_unchanged_one_more_is_failed(response_server, size):
    event = response_server.attach(make_event("Create", "Custom::Sized"))
    ids = {k: event[k] for k in ("StackId", "RequestId", "LogicalResourceId")}
    body = sized_provider(size, ids).handle(event)
    (capture,) = response_server.captures
    if size == MAX_RESPONSE_BYTES:
        assert body["Status"] == "SUCCESS" and "汉" in body["Data"]["T"]
        assert len(capture.raw) == MAX_RESPONSE_BYTES
    else:
        assert body["Status"] == "FAILED" and "Data" not in body
        assert f"response is {size} bytes" in body["Reason"]
        assert len(capture.raw) <= MAX_RESPONSE_BYTES


@pytest.mark.parametrize("physical_id, ok", [("é" * 127 + "a", True), ("é" * 128, False), ("汉" * 85, True),
                                             ("汉" * 85 + "a", False)])
def test_a_physical_id_of_exactly_255_bytes_passes_256_fails(response_server, physical_id, ok):
    assert len(physical_id.encode()) == (255 if ok else 256)
    provider = Provider()
    provider.create("Custom::Id")(lambda props, request: Result(physical_id=physical_id))
    event = response_server.attach(make_event("Create", "Custom::Id"))
    body = provider.handle(event)
    assert response_server.wait_for(event["RequestId"]) == body
    if ok:
        assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == physical_id
    else:
        assert body["Status"] == "FAILED" and "is 256 bytes; ROS allows at most 255" in body["Reason"]
