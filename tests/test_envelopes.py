"""Decoding the events Function Compute hands a provider: direct, MNS topic (STREAM/JSON/XML), MNS queue."""

from __future__ import annotations

import base64
import json

import pytest

from crhelper.envelopes import (
    SOURCE_DIRECT,
    SOURCE_MNS_QUEUE,
    SOURCE_MNS_TOPIC_JSON,
    SOURCE_MNS_TOPIC_STREAM,
    SOURCE_MNS_TOPIC_XML,
    SOURCE_UNKNOWN,
    BodyDecodeError,
    Envelope,
    decode_body,
    unwrap_event,
)

REQ = {"RequestType": "Create", "RequestId": "r-1", "StackId": "s-1", "ResponseURL": "http://x/cb",
       "LogicalResourceId": "R", "ResourceType": "Custom::T", "ResourceProperties": {"名": "值"}}
REQ_JSON = json.dumps(REQ, ensure_ascii=False)
REQ_B64 = base64.b64encode(REQ_JSON.encode()).decode()


def cloud_event(body: object, message_id: str = "m-1") -> dict:
    return {
        "id": "evt-" + message_id, "source": "MNS-f-q", "specversion": "1.0", "type": "mns:Queue:SendMessage",
        "datacontenttype": "application/json; charset=utf-8",
        "subject": "acs:mns:cn-hangzhou:123:queues/q", "time": "2021-04-08T06:28:17.093Z",
        "aliyunaccountid": "123", "aliyunpublishtime": "2021-04-08T06:28:17.093Z",
        "aliyunoriginalaccountid": "123", "aliyuneventbusname": "MNS-f-q", "aliyunregionid": "cn-hangzhou",
        "aliyunpublishaddr": "42.120.1.1",
        "data": {"requestId": "606EA3074344430D4C81A7D8", "messageId": message_id, "messageBody": body},
    }


TOPIC_JSON = {"TopicOwner": "123", "Message": REQ_JSON, "Subscriber": "123", "PublishTime": 1635734416296,
              "SubscriptionName": "sub", "MessageMD5": "ABC", "TopicName": "t", "MessageId": "tm-1",
              "key": "attr-value"}
TOPIC_XML = (
    '<?xml version="1.0" encoding="utf-8"?><Notification xmlns="http://mns.aliyuncs.com/doc/v1/">'
    "<TopicOwner>123</TopicOwner><TopicName>t</TopicName><Subscriber>123</Subscriber>"
    "<SubscriptionName>sub</SubscriptionName><MessageId>x-1</MessageId>"
    f"<Message>{REQ_B64}</Message><MessageMD5>M</MessageMD5><PublishTime>1</PublishTime></Notification>"
)

SINGLE = [
    ("direct bytes", REQ_JSON.encode(), SOURCE_DIRECT, None),
    ("direct str", REQ_JSON, SOURCE_DIRECT, None),
    ("direct dict", REQ, SOURCE_DIRECT, None),
    ("stream raw base64", REQ_B64.encode(), SOURCE_MNS_TOPIC_STREAM, None),
    ("stream body+attrs", json.dumps({"body": REQ_JSON, "attrs": {"k": "v"}}).encode(), SOURCE_MNS_TOPIC_STREAM, None),
    ("stream body base64", {"body": REQ_B64, "attrs": {}}, SOURCE_MNS_TOPIC_STREAM, None),
    ("stream JSON string of JSON", json.dumps(REQ_JSON).encode(), SOURCE_MNS_TOPIC_STREAM, None),
    ("topic json", json.dumps(TOPIC_JSON).encode(), SOURCE_MNS_TOPIC_JSON, "tm-1"),
    ("topic json base64 message", {**TOPIC_JSON, "Message": REQ_B64}, SOURCE_MNS_TOPIC_JSON, "tm-1"),
    ("topic xml", TOPIC_XML.encode(), SOURCE_MNS_TOPIC_XML, "x-1"),
    ("lone cloud event", json.dumps(cloud_event(REQ_JSON)).encode(), SOURCE_MNS_QUEUE, "m-1"),
    ("lone cloud event base64", cloud_event(REQ_B64), SOURCE_MNS_QUEUE, "m-1"),
]


@pytest.mark.parametrize("label, event, source, message_id", SINGLE, ids=[s[0] for s in SINGLE])
def test_single_message_events(label: str, event: object, source: str, message_id: str | None) -> None:
    (env,) = unwrap_event(event)  # type: ignore[arg-type]
    assert env == Envelope(source, message_id, REQ, None, env.attributes)
    assert env.ok


def test_attributes_are_kept() -> None:
    (stream,) = unwrap_event({"body": REQ_JSON, "attrs": {"k": "v"}})
    assert stream.attributes == {"k": "v"}
    (topic,) = unwrap_event(TOPIC_JSON)
    assert topic.attributes["key"] == "attr-value" and topic.attributes["TopicName"] == "t"
    assert "Message" not in topic.attributes
    (queue,) = unwrap_event(cloud_event(REQ_JSON))
    assert queue.attributes["subject"] == "acs:mns:cn-hangzhou:123:queues/q"
    assert "messageBody" not in queue.attributes


def test_queue_batch_with_one_bad_message_keeps_the_others() -> None:
    batch = [cloud_event(REQ_JSON, "a"), cloud_event("not json, not base64!", "b"), cloud_event(REQ_B64, "c"),
             {"unexpected": True}, cloud_event(base64.b64encode(b"[1, 2]").decode(), "e")]
    envs = unwrap_event(json.dumps(batch).encode())
    assert [e.message_id for e in envs] == ["a", "b", "c", None, "e"]
    assert [e.ok for e in envs] == [True, False, True, False, False]
    assert envs[0].body == REQ and envs[2].body == REQ
    assert envs[1].body == b"not json, not base64!" and "neither JSON nor base64" in (envs[1].error or "")
    assert "batch element 3" in (envs[3].error or "")
    assert "JSON object" in (envs[4].error or "")
    assert all(e.source == SOURCE_MNS_QUEUE for e in envs)


BAD = [
    ("not utf-8", b"\xff\xfe\x00", "not UTF-8"),
    ("garbage", b"hello world", "neither JSON nor base64"),
    ("empty list", b"[]", "empty list"),
    ("json number", b"42", "not supported"),
    ("broken xml", b"<Notification><Message>", "not well-formed"),
    ("other xml", b"<Other/>", "expected 'Notification'"),
    ("cloud event without body", {"specversion": "1.0", "data": {"messageId": "z"}}, "data.messageBody"),
    ("dict without RequestType", {"Foo": 1}, "RequestType"),
    ("base64 of non-utf8", base64.b64encode(b"\xff\xfe"), "UTF-8"),
    ("empty body", {"body": "  ", "attrs": {}}, "empty"),
    ("body of wrong type", {"body": 5}, "not supported"),
]


@pytest.mark.parametrize("label, event, fragment", BAD, ids=[b[0] for b in BAD])
def test_undecodable_events_become_error_envelopes(label: str, event: object, fragment: str) -> None:
    envs = unwrap_event(event)  # type: ignore[arg-type]
    assert len(envs) == 1 and not envs[0].ok
    assert fragment in (envs[0].error or "")
    assert isinstance(envs[0].body, (bytes, dict))


def test_unknown_dict_keeps_its_body_for_a_best_effort_answer() -> None:
    (env,) = unwrap_event({"ResponseURL": "http://x"})
    assert env.source == SOURCE_UNKNOWN and env.body == {"ResponseURL": "http://x"}


@pytest.mark.parametrize("raw", [REQ_JSON, REQ_JSON.encode(), REQ_B64, " " + REQ_B64 + "\n", REQ, TOPIC_XML,
                                 json.dumps(TOPIC_JSON)])
def test_decode_body_accepts_every_body_form(raw: object) -> None:
    assert decode_body(raw) == REQ  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", ["", "[]", "bm90IGpzb24=", "{bad json", "%%%"])
def test_decode_body_rejects(raw: str) -> None:
    with pytest.raises(BodyDecodeError):
        decode_body(raw)


def test_deeply_nested_bodies_are_a_precise_decode_error():
    with pytest.raises(BodyDecodeError, match=r"nested too deeply \(limit 100 levels\)"):
        decode_body("[" * 50_000 + "]" * 50_000)
    (envelope,) = unwrap_event(("[" * 50_000 + "]" * 50_000).encode())
    assert envelope.error == "event is nested too deeply (limit 100 levels)"
