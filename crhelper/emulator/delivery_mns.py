"""MNS ServiceTokens: requests travel through a local MNS endpoint with the real `aliyun-mns-sdk`.

Queue token: the request JSON is sent to the queue. Topic token: it is published to the topic,
which pushes it (SIMPLIFIED format: the body is the request) to a subscribed queue
`<topic>-ros-emulator`. Either way the project's `QueueWorker` (crhelper.transports.mns_worker)
long-polls the queue with the bound provider, exactly as it would in production: it keeps each
message invisible while the provider works and deletes it once the answer was delivered.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable

from mns.queue import Message, QueueMeta
from mns.subscription import SubscriptionMeta
from mns.topic import TopicMessage, TopicMeta

from ..local.mns_server import LocalMNS
from ..servicetoken import MnsQueueToken, MnsTopicToken
from ..transports.mns_worker import QueueWorker

#: How long a received message stays invisible; the worker extends it while the provider runs.
VISIBILITY_TIMEOUT = 60
#: Long-poll length: also bounds how long stopping the worker at the end of an operation takes.
_POLL_SECONDS = 1
#: In-flight messages get this long to finish when the operation's endpoints stop.
_STOP_GRACE = 2.0

LoadProvider = Callable[[str], Any]


class MnsRoute:
    """One local MNS account per stack operation; queues, topics and queue workers made on first use."""

    def __init__(self, region: str, account_id: str, load_provider: LoadProvider, *, workers: int = 16) -> None:
        self._mns = LocalMNS(region=region, account_id=account_id)
        self._load = load_provider
        self._workers = workers
        self._lock = threading.Lock()
        self._queues: dict[str, Any] = {}
        self._topics: dict[str, Any] = {}
        self._workers_started: list[Any] = []
        self._account: Any = None

    def start(self) -> "MnsRoute":
        self._mns.start()
        self._account = self._mns.account()
        return self

    def stop(self) -> None:
        for worker in self._workers_started:
            worker.stop(_STOP_GRACE)
        self._mns.stop()

    @property
    def mns(self) -> LocalMNS:
        return self._mns

    def _queue(self, name: str, spec: str) -> Any:
        """The queue `name`, created with a QueueWorker running `spec` (caller holds the lock)."""
        if name not in self._queues:
            queue = self._account.get_queue(name)
            queue.set_encoding(False)
            queue.create(QueueMeta(vis_timeout=VISIBILITY_TIMEOUT))
            worker = QueueWorker(
                self._load(spec), endpoint=self._mns.endpoint, queue=name,
                access_key_id=self._mns.access_key_id, access_key_secret=self._mns.access_key_secret,
                concurrency=self._workers, wait_seconds=_POLL_SECONDS, visibility_timeout=VISIBILITY_TIMEOUT,
                grace=_STOP_GRACE,
            )
            self._workers_started.append(worker.start())
            self._queues[name] = queue
        return self._queues[name]

    def send(self, token: MnsQueueToken | MnsTopicToken, spec: str, request: dict[str, Any]) -> tuple[str, str] | None:
        """Send or publish the request; for a queue token, (queue, message id) to ask `consumed` about."""
        body = json.dumps(request, ensure_ascii=False)
        with self._lock:
            if isinstance(token, MnsQueueToken):
                queue = self._queue(token.queue, spec)
                # Sent under the lock: the SDK client's single connection is not thread-safe.
                sent = queue.send_message(Message(body))
                return token.queue, str(sent.message_id)
            else:
                if token.topic not in self._topics:
                    inbox = f"{token.topic}-ros-emulator"[:256]
                    self._queue(inbox, spec)
                    topic = self._account.get_topic(token.topic)
                    topic.create(TopicMeta())
                    subscription = topic.get_subscription("ros-emulator")
                    subscription.subscribe(SubscriptionMeta(self._mns.queue_arn(inbox), notify_content_format="SIMPLIFIED"))
                    self._topics[token.topic] = topic
                topic = self._topics[token.topic]
            topic.publish_message(TopicMessage(body))
            return None

    def consumed(self, sent: "list[tuple[str, str] | None]") -> bool:
        """Whether every message sent to a queue was consumed (handled and deleted by the worker);
        False for publications, whose queued copies are not tracked."""
        return all(s is not None and not self._mns.holds_message(*s) for s in sent)
