"""ALIYUN::MNS::Queue / Topic / Subscription: properties, checks and attributes (pure; deploy.md §1.6).

Queues and topics are emulated with both the documented `ARN.WithSlash` and the `ARN` (no slash)
official templates read; their URLs name the region's MNS endpoint, as ROS reports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .cloud_schema import BOOLEAN, INTEGER, LIST, MAP, CloudType, Prop

PUSH_TYPES = ("http", "queue", "mpush", "email", "alisms", "fc", "eventbridge", "kafka", "dm", "dysms")


def mns_url(region: str, account: str, kind: str, name: str) -> str:
    return f"https://{account}.mns.{region}.aliyuncs.com/{kind}/{name}"


def _queue_attributes(region: str, account: str, physical_id: str, props: Mapping[str, Any]) -> dict[str, Any]:
    return {"QueueName": physical_id, "QueueUrl": mns_url(region, account, "queues", physical_id),
            "ARN": f"acs:mns:{region}:{account}:queues/{physical_id}",
            "ARN.WithSlash": f"acs:mns:{region}:{account}:/queues/{physical_id}"}


def _topic_attributes(region: str, account: str, physical_id: str, props: Mapping[str, Any]) -> dict[str, Any]:
    return {"TopicName": physical_id, "TopicUrl": mns_url(region, account, "topics", physical_id),
            "ARN": f"acs:mns:{region}:{account}:topics/{physical_id}",
            "ARN.WithSlash": f"acs:mns:{region}:{account}:/topics/{physical_id}"}


def _subscription_attributes(region: str, account: str, physical_id: str, props: Mapping[str, Any]) -> dict[str, Any]:
    topic, name = props["TopicName"], props["SubscriptionName"]
    return {"SubscriptionName": name, "TopicName": topic,
            "SubscriptionUrl": mns_url(region, account, "topics", f"{topic}/subscriptions/{name}")}


def _dlq_extra(props: Mapping[str, Any], path: str) -> list[str]:
    dlq = props.get("DlqPolicy")
    if not isinstance(dlq, dict):
        return []
    return [f"{path}.DlqPolicy.{key}: required" for key in ("DeadLetterTargetQueue", "Enabled", "MaxReceiveCount")
            if key not in dlq]


MNS_QUEUE = CloudType(
    "ALIYUN::MNS::Queue",
    {"QueueName": Prop(required=True, editable=False, low=1, high=256),
     "DelaySeconds": Prop(INTEGER, low=0, high=604800, default=0),
     "MaximumMessageSize": Prop(INTEGER, low=1024, high=65536, default=65536),
     "MessageRetentionPeriod": Prop(INTEGER, low=60, high=604800, default=345600),
     "VisibilityTimeout": Prop(INTEGER, low=1, high=43200, default=30),
     "PollingWaitSeconds": Prop(INTEGER, low=0, high=30, default=0),
     "LoggingEnabled": Prop(BOOLEAN, default=False), "DlqPolicy": Prop(MAP), "Tags": Prop(LIST, high=20)},
    ("QueueName", "QueueUrl", "ARN", "ARN.WithSlash"),
    extra=_dlq_extra, physical_id=lambda p: str(p["QueueName"]), attributes=_queue_attributes,
)
MNS_TOPIC = CloudType(
    "ALIYUN::MNS::Topic",
    {"TopicName": Prop(required=True, editable=False, low=1, high=256),
     "MaximumMessageSize": Prop(INTEGER, low=1024, high=65536, default=65536),
     "LoggingEnabled": Prop(BOOLEAN, default=False), "Tags": Prop(LIST, high=20)},
    ("TopicName", "TopicUrl", "ARN", "ARN.WithSlash"),
    physical_id=lambda p: str(p["TopicName"]), attributes=_topic_attributes,
)
MNS_SUBSCRIPTION = CloudType(
    "ALIYUN::MNS::Subscription",
    {"TopicName": Prop(required=True, editable=False), "SubscriptionName": Prop(required=True, editable=False, low=1, high=256),
     "Endpoint": Prop(required=True, editable=False), "PushType": Prop(choices=PUSH_TYPES, editable=False),
     "NotifyStrategy": Prop(choices=("BACKOFF_RETRY", "EXPONENTIAL_DECAY_RETRY"), default="BACKOFF_RETRY"),
     "NotifyContentFormat": Prop(choices=("XML", "JSON", "SIMPLIFIED"), default="XML", editable=False),
     "FilterTag": Prop(high=16, editable=False), "DlqPolicy": Prop(MAP)},
    ("SubscriptionName", "SubscriptionUrl", "TopicName"),
    extra=_dlq_extra, physical_id=lambda p: f"{p['TopicName']}|{p['SubscriptionName']}",
    attributes=_subscription_attributes,
)
TYPES = (MNS_QUEUE, MNS_TOPIC, MNS_SUBSCRIPTION)
