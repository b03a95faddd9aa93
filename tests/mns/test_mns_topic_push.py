"""Topics through the real SDK: subscriptions to queues and to signed HTTP endpoints, with retries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mns.mns_exception import MNSServerException
from mns.queue import QueueMeta
from mns.subscription import SubscriptionMeta
from mns.topic import Base64TopicMessage, TopicMeta, TopicMessage

from crhelper.envelopes import decode_body, unwrap_event
from crhelper.local.mns_server import LocalMNS

REQUEST = {"RequestType": "Create", "RequestId": "r-1", "StackId": "s-1", "ResponseURL": "http://127.0.0.1:9/cb",
           "LogicalResourceId": "Res", "ResourceType": "Custom::Thing", "ResourceProperties": {"k": "v"}}


def _topic(account: Any, name: str) -> Any:
    topic = account.get_topic(name)
    topic.create(TopicMeta())
    return topic


def _subscribe(topic: Any, sub_name: str, endpoint: str, fmt: str = "XML", **extra: str) -> Any:
    sub = topic.get_subscription(sub_name)
    sub.subscribe(SubscriptionMeta(endpoint, notify_content_format=fmt, **extra))
    return sub


def test_topic_and_subscription_lifecycle(account: Any, name: str, local_mns: LocalMNS) -> None:
    topic = account.get_topic(name)
    assert topic.create(TopicMeta()) == f"{local_mns.endpoint}/topics/{name}"
    attrs = topic.get_attributes()
    assert attrs.topic_name == name and attrs.message_count == 0
    topic.set_attributes(TopicMeta(maximum_message_size=2048))
    assert topic.get_attributes().maximum_message_size == 2048
    assert name in [u.rsplit("/", 1)[1] for u in account.list_topic(prefix=name)[0]]

    queue_ep = local_mns.queue_arn("q-" + name)
    sub = _subscribe(topic, "s1", queue_ep, "JSON", filter_tag="tagA")
    got = sub.get_attributes()
    assert (got.endpoint, got.notify_content_format, got.notify_strategy, got.filter_tag) == (
        queue_ep, "JSON", "BACKOFF_RETRY", "tagA")
    sub.set_attributes(SubscriptionMeta(notify_strategy="EXPONENTIAL_DECAY_RETRY"))
    assert sub.get_attributes().notify_strategy == "EXPONENTIAL_DECAY_RETRY"
    assert [u.rsplit("/", 1)[1] for u in topic.list_subscription()[0]] == ["s1"]
    with pytest.raises(MNSServerException) as info:
        _subscribe(topic, "s1", "http://127.0.0.1:9/other")
    assert info.value.type == "SubscriptionAlreadyExist"
    with pytest.raises(MNSServerException) as info:
        _subscribe(topic, "s2", "mail:directmail:a@example.com")
    assert info.value.type == "InvalidArgument"
    sub.unsubscribe()
    with pytest.raises(MNSServerException) as info:
        sub.get_attributes()
    assert info.value.type == "SubscriptionNotExist"
    topic.delete()
    with pytest.raises(MNSServerException) as info:
        topic.publish_message(TopicMessage("x"))
    assert info.value.type == "TopicNotExist"


@pytest.mark.parametrize("fmt", ["SIMPLIFIED", "XML", "JSON"])
def test_topic_to_queue_subscription(account: Any, name: str, local_mns: LocalMNS, fmt: str) -> None:
    queue = account.get_queue("q-" + name)
    queue.set_encoding(False)
    queue.create(QueueMeta())
    topic = _topic(account, name)
    _subscribe(topic, "to-queue", local_mns.queue_arn("q-" + name), fmt)
    published = topic.publish_message(TopicMessage(json.dumps(REQUEST), message_tag="t1"))
    got = queue.receive_message(wait_seconds=3)
    if fmt == "SIMPLIFIED":
        assert json.loads(got.message_body) == REQUEST
    elif fmt == "JSON":
        note = json.loads(got.message_body)
        assert note["MessageId"] == published.message_id and note["TopicName"] == name
        assert note["MessageTag"] == "t1" and note["PublishTime"].isdigit()
    else:
        assert got.message_body.lstrip().startswith("<?xml") and "<Notification" in got.message_body
    # Every form decodes to the original request, as a provider would see it.
    assert decode_body(got.message_body) == REQUEST
    assert topic.get_attributes().message_count == 1


def test_filter_tag_selects_subscriptions(account: Any, name: str, local_mns: LocalMNS) -> None:
    queue = account.get_queue("q-" + name)
    queue.set_encoding(False)
    queue.create(QueueMeta())
    topic = _topic(account, name)
    _subscribe(topic, "only-b", local_mns.queue_arn("q-" + name), "SIMPLIFIED", filter_tag="b")
    topic.publish_message(TopicMessage("for-a", message_tag="a"))
    topic.publish_message(TopicMessage("for-b", message_tag="b"))
    assert queue.receive_message(wait_seconds=3).message_body == "for-b"
    with pytest.raises(MNSServerException):
        queue.receive_message(wait_seconds=0)


@pytest.mark.parametrize("fmt", ["XML", "JSON", "SIMPLIFIED"])
def test_http_push_is_signed_and_verifies(account: Any, name: str, push_receiver: Any, fmt: str) -> None:
    topic = _topic(account, name)
    _subscribe(topic, "http-sub", push_receiver.url, fmt)
    published = topic.publish_message(TopicMessage(json.dumps(REQUEST)))
    (push,) = push_receiver.wait_for(1)
    assert push.error is None, push.error
    assert push.verdict is not None and push.verdict.message_id == published.message_id
    assert (push.verdict.topic_name, push.verdict.subscription_name) == (name, "http-sub")
    assert push.path == "/notifications?token=abc"
    lower = {k.lower(): v for k, v in push.headers.items()}
    for header in ("x-mns-message-id", "x-mns-publish-time", "x-mns-request-id", "x-mns-signing-cert-url",
                   "x-mns-subscriber", "x-mns-subscription-name", "x-mns-topic-name", "x-mns-topic-owner",
                   "x-mns-version", "content-md5", "content-type", "date", "authorization"):
        assert lower.get(header), header
    envelopes = unwrap_event(push.body)
    assert [e.body for e in envelopes] == [REQUEST] and envelopes[0].error is None


def test_base64_topic_message_decodes(account: Any, name: str, push_receiver: Any) -> None:
    topic = _topic(account, name)
    _subscribe(topic, "b64", push_receiver.url, "SIMPLIFIED")
    topic.publish_message(Base64TopicMessage(json.dumps(REQUEST)))
    (push,) = push_receiver.wait_for(1)
    assert push.error is None and unwrap_event(push.body)[0].body == REQUEST


def test_backoff_retry_until_2xx(account: Any, name: str, push_receiver: Any, local_mns: LocalMNS) -> None:
    push_receiver.statuses = [503, 500]
    topic = _topic(account, name)
    _subscribe(topic, "flaky", push_receiver.url, "JSON")
    published = topic.publish_message(TopicMessage("retry me"))
    pushes = push_receiver.wait_for(3)
    assert len(pushes) == 3 and all(p.error is None for p in pushes)
    attempts = local_mns.wait_push_attempts(published.message_id, 3)
    assert [(a.attempt, a.status) for a in attempts] == [(1, 503), (2, 500), (3, 204)]
    assert "token" not in attempts[0].endpoint  # the endpoint's query string is never recorded


def test_backoff_retry_gives_up_after_three_retries(account: Any, name: str, push_receiver: Any,
                                                    local_mns: LocalMNS) -> None:
    push_receiver.statuses = [500] * 10
    topic = _topic(account, name)
    _subscribe(topic, "down", push_receiver.url, "SIMPLIFIED")
    published = topic.publish_message(TopicMessage("never acked"))
    assert len(local_mns.wait_push_attempts(published.message_id, 4)) == 4
    # Waiting for a fifth try must time out: scaled retry delays are at most 0.1 s.
    assert [a.status for a in local_mns.wait_push_attempts(published.message_id, 5, timeout=0.5)] == [500] * 4
    assert len(push_receiver.pushes) == 4


def test_failing_endpoints_waiting_to_retry_do_not_delay_other_deliveries() -> None:
    import socket
    import time

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{probe.getsockname()[1]}/down"
    probe.close()  # nothing listens there: every push is refused at once and waits 1-2 s to retry
    with LocalMNS(retry_time_scale=0.1) as mns:
        account = mns.account()
        failing = _topic(account, "failing")
        for n in range(6):
            _subscribe(failing, f"dead-{n}", dead, "SIMPLIFIED")
        published = failing.publish_message(TopicMessage("nobody listens"))
        for n in range(6):
            assert mns.wait_push_attempts(published.message_id, n + 1)[n].status is None
        queue = account.get_queue("healthy")
        queue.set_encoding(False)
        queue.create(QueueMeta())
        _subscribe(_topic(account, "other"), "to-queue", mns.queue_arn("healthy"), "SIMPLIFIED")
        started = time.monotonic()
        account.get_topic("other").publish_message(TopicMessage("prompt"))
        assert queue.receive_message(wait_seconds=3).message_body == "prompt"
        assert time.monotonic() - started < 0.5
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 2.0  # pending retries are abandoned on stop
