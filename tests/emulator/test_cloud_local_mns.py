"""ALIYUN::MNS::Queue / Topic / Subscription are real queues, topics and subscriptions of the
operation's local MNS endpoint, made and removed through the real aliyun-mns-sdk; a new
operation's endpoint holds the stack's live ones again."""

from __future__ import annotations

from typing import Any

import pytest

from crhelper.emulator.cloud_registry import cloud_type
from crhelper.emulator.cloud_session import CloudSession
from crhelper.emulator.model import ResourceRecord
from crhelper.emulator.cloud_registry import cloud_token

REGION, ACCOUNT = "cn-hangzhou", "123456789"

pytestmark = pytest.mark.slow  # each test starts a local MNS endpoint


def props(type_name: str, **given: Any) -> dict[str, Any]:
    local = cloud_type(type_name)
    assert local is not None
    return local.with_defaults(given)


QUEUE = props("ALIYUN::MNS::Queue", QueueName="requests", VisibilityTimeout=45)
TOPIC = props("ALIYUN::MNS::Topic", TopicName="events")
SUBSCRIPTION = props("ALIYUN::MNS::Subscription", TopicName="events", SubscriptionName="to-queue",
                     Endpoint=f"https://{ACCOUNT}.mns.{REGION}.aliyuncs.com/queues/requests")


def test_queue_topic_and_subscription_exist_in_the_local_mns_after_create_and_are_gone_after_delete() -> None:
    session = CloudSession(REGION, ACCOUNT)
    try:
        for type_name, properties in (("ALIYUN::MNS::Queue", QUEUE), ("ALIYUN::MNS::Topic", TOPIC),
                                      ("ALIYUN::MNS::Subscription", SUBSCRIPTION)):
            outcome = session.apply("Create", type_name, properties)
            assert outcome.ok, outcome.reason
        assert (session.mns.queues(), session.mns.topics()) == (["requests"], ["events"])
        account = session.mns.endpoint.account()
        assert account.get_queue("requests").get_attributes().visibility_timeout == 45
        # The subscription's Endpoint is the queue's QueueUrl (Fn::GetAtt [Queue, QueueUrl]): a
        # message published to the topic lands in the local queue.
        from mns.topic import TopicMessage

        account.get_topic("events").publish_message(TopicMessage("hello"))
        queue = account.get_queue("requests")
        queue.set_encoding(False)
        received = queue.receive_message(wait_seconds=5)
        assert "hello" in str(received.message_body)

        for type_name, properties, physical in (("ALIYUN::MNS::Subscription", SUBSCRIPTION, "events|to-queue"),
                                                ("ALIYUN::MNS::Topic", TOPIC, "events"),
                                                ("ALIYUN::MNS::Queue", QUEUE, "requests")):
            outcome = session.apply("Delete", type_name, properties, physical)
            assert outcome.ok, outcome.reason
        assert (session.mns.queues(), session.mns.topics()) == ([], [])
    finally:
        session.close()


def test_a_later_operation_finds_the_stacks_live_queues_and_topics_again() -> None:
    records = [ResourceRecord("Queue", "ALIYUN::MNS::Queue", cloud_token("ALIYUN::MNS::Queue"), 60,
                              physical_id="requests", properties=QUEUE, status="CREATE_COMPLETE"),
               ResourceRecord("Gone", "ALIYUN::MNS::Topic", cloud_token("ALIYUN::MNS::Topic"), 60,
                              physical_id="old", properties=props("ALIYUN::MNS::Topic", TopicName="old"),
                              status="DELETE_COMPLETE")]
    session = CloudSession(REGION, ACCOUNT)
    try:
        session.attach(records)
        assert (session.mns.queues(), session.mns.topics()) == (["requests"], [])
        updated = session.apply("Update", "ALIYUN::MNS::Queue", {**QUEUE, "VisibilityTimeout": 90}, "requests", QUEUE)
        assert updated.ok, updated.reason
        assert session.mns.endpoint.account().get_queue("requests").get_attributes().visibility_timeout == 90
    finally:
        session.close()
