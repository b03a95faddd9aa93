"""ALIYUN::MNS::Queue / Topic / Subscription as real queues, topics and subscriptions in the local
MNS endpoint (`crhelper.local.mns_server`), made through the real `aliyun-mns-sdk`.

The endpoint lives as long as one stack operation (like the local Function Compute): when it
starts, the stack's live queues, topics and subscriptions are made again from their recorded
properties, so each operation sees what the stack holds. A subscription's `Endpoint` that is a
queue's `QueueUrl` of this region and account (what `Fn::GetAtt [Queue, QueueUrl]` gives, as the
official templates pass it) pushes to that local queue; other push types the local MNS cannot
push to (`fc`, `mpush`, `email`, ...) are recorded only.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .cloud_mns import mns_url

if TYPE_CHECKING:
    from ..local.mns_server import LocalMNS

QUEUE, TOPIC, SUBSCRIPTION = "ALIYUN::MNS::Queue", "ALIYUN::MNS::Topic", "ALIYUN::MNS::Subscription"
MNS_TYPES = (QUEUE, TOPIC, SUBSCRIPTION)
MNS_EXTRA = "pip install 'ros-crhelper[mns]'"


class MnsUnavailable(RuntimeError):
    """The MNS SDK is not installed (the message says how to install it)."""


def _flag(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


class LocalMnsResources:
    """The stack's MNS resources in one operation's local MNS endpoint; thread-safe."""

    def __init__(self, region: str, account_id: str) -> None:
        self.region, self.account_id = region, account_id
        self._lock = threading.RLock()
        self._mns: LocalMNS | None = None
        #: (type, physical id) -> properties of the live resources, in creation order
        self._live: dict[tuple[str, str], dict[str, Any]] = {}

    def remember(self, type_name: str, physical_id: str, properties: Mapping[str, Any]) -> None:
        with self._lock:
            self._live[(type_name, physical_id)] = dict(properties)

    @property
    def endpoint(self) -> "LocalMNS":
        """The local MNS endpoint, started (with the live resources made again) on first use."""
        with self._lock:
            if self._mns is None:
                import importlib.util

                if importlib.util.find_spec("mns") is None:
                    raise MnsUnavailable(f"ALIYUN::MNS resources run in the local MNS through aliyun-mns-sdk: "
                                         f"{MNS_EXTRA}")
                from ..local.mns_server import LocalMNS

                self._mns = LocalMNS(account_id=self.account_id, region=self.region).start()
                live = list(self._live.items())
                for kind in MNS_TYPES:  # queues before topics before subscriptions
                    for (type_name, _), properties in live:
                        if type_name == kind:
                            self._make(type_name, properties)
            return self._mns

    def close(self) -> None:
        with self._lock:
            mns, self._mns = self._mns, None
        if mns is not None:
            mns.stop()

    # ---------------------------------------------------------------- operations

    def create(self, type_name: str, physical_id: str, properties: Mapping[str, Any]) -> None:
        self.endpoint  # started first: it makes the other live resources, then this one
        self.remember(type_name, physical_id, properties)
        self._make(type_name, properties)

    def update(self, type_name: str, physical_id: str, properties: Mapping[str, Any]) -> None:
        """New attributes of a queue or topic, or a subscription's NotifyStrategy (the editable ones)."""
        self.endpoint
        self.remember(type_name, physical_id, properties)
        self._make(type_name, properties, update=True)

    def delete(self, type_name: str, physical_id: str, properties: Mapping[str, Any]) -> None:
        account = self.endpoint.account()
        with self._lock:
            self._live.pop((type_name, physical_id), None)
        if type_name == QUEUE:
            account.get_queue(str(properties["QueueName"])).delete()
        elif type_name == TOPIC:
            account.get_topic(str(properties["TopicName"])).delete()
        elif self._pushes(properties):
            topic = account.get_topic(str(properties["TopicName"]))
            topic.get_subscription(str(properties["SubscriptionName"])).unsubscribe()

    def _make(self, type_name: str, properties: Mapping[str, Any], update: bool = False) -> None:
        from mns.queue import QueueMeta
        from mns.subscription import SubscriptionMeta
        from mns.topic import TopicMeta

        account = self.endpoint.account()
        if type_name == QUEUE:
            meta = QueueMeta()
            meta.set_delay_seconds(int(properties.get("DelaySeconds", 0)))
            meta.set_maximum_message_size(int(properties.get("MaximumMessageSize", 65536)))
            meta.set_message_retention_period(int(properties.get("MessageRetentionPeriod", 345600)))
            meta.set_visibilitytimeout(int(properties.get("VisibilityTimeout", 30)))
            meta.set_polling_wait_seconds(int(properties.get("PollingWaitSeconds", 0)))
            meta.set_logging_enabled(_flag(properties.get("LoggingEnabled", False)))
            queue = account.get_queue(str(properties["QueueName"]))
            if update:
                queue.set_attributes(meta)
            else:
                queue.create(meta)
        elif type_name == TOPIC:
            topic_meta = TopicMeta(int(properties.get("MaximumMessageSize", 65536)),
                                   _flag(properties.get("LoggingEnabled", False)))
            topic = account.get_topic(str(properties["TopicName"]))
            if update:
                topic.set_attributes(topic_meta)
            else:
                topic.create(topic_meta)
        else:
            endpoint = self._pushes(properties)
            if not endpoint:
                return
            subscription = account.get_topic(str(properties["TopicName"])).get_subscription(
                str(properties["SubscriptionName"]))
            wanted = SubscriptionMeta(endpoint, str(properties.get("NotifyStrategy", "BACKOFF_RETRY")),
                                      str(properties.get("NotifyContentFormat", "XML")), str(properties.get("FilterTag", "")))
            if update:
                subscription.set_attributes(wanted)
            else:
                subscription.subscribe(wanted)

    def _pushes(self, properties: Mapping[str, Any]) -> str:
        """The endpoint the local MNS pushes a subscription to, or '' when it cannot (recorded only)."""
        endpoint, push = str(properties.get("Endpoint", "")), str(properties.get("PushType", "http") or "http")
        queue_url = re.escape(mns_url(self.region, self.account_id, "queues", "")) + r"([^/]+)/?$"
        found = re.match(queue_url, endpoint)
        if found:
            return f"acs:mns:{self.region}:{self.account_id}:queues/{found.group(1)}"
        if re.match(r"acs:mns:[^:]*:[^:]*:/?queues/[^/]+$", endpoint):
            return endpoint.replace(":/queues/", ":queues/")
        if push == "http" and re.match(r"https?://", endpoint):
            return endpoint
        return ""

    # ---------------------------------------------------------------- inspection

    def queues(self) -> list[str]:
        return self._names("queues")

    def topics(self) -> list[str]:
        return self._names("topics")

    def _names(self, kind: str) -> list[str]:
        broker = self.endpoint.broker
        assert broker is not None
        lister = broker.list_queues if kind == "queues" else broker.list_topics
        names, _ = lister("", 1000, "")
        return sorted(names)
