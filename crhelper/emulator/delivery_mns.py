"""MNS ServiceTokens: requests travel through a local MNS endpoint with the real `aliyun-mns-sdk`.

Queue token: the request JSON is sent to the queue. Topic token: it is published to the topic,
which pushes it (SIMPLIFIED format: the body is the request) to a subscribed queue
`<topic>-ros-emulator`. Either way a consumer long-polls the queue, hands each message to the
bound provider's Function Compute entry (`fc_handler`, which also unwraps notification envelopes)
and deletes the message once the provider returned, so a provider that crashes leaves the
message to reappear, as with a real queue.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..local.mns_server import LocalMNS
from ..servicetoken import MnsQueueToken, MnsTopicToken

#: How long an unacknowledged message stays invisible before another receive sees it again.
VISIBILITY_TIMEOUT = 3600
_POLL_SECONDS = 1

LoadProvider = Callable[[str], Any]


class _Consumer:
    """Long-polls one queue and runs each message through the provider on a thread pool."""

    def __init__(self, queue: Any, ack_queue: Any, provider: Any, workers: int) -> None:
        self._queue = queue
        self._ack_queue = ack_queue
        self._ack_lock = threading.Lock()
        self._provider = provider
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mns-consumer")
        self._thread = threading.Thread(target=self._loop, name="mns-consumer-poll", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(_POLL_SECONDS + 2)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _loop(self) -> None:
        from mns.mns_exception import MNSExceptionBase

        while not self._stop.is_set():
            try:
                message = self._queue.receive_message(_POLL_SECONDS)
            except MNSExceptionBase:
                continue  # MessageNotExist after the long poll, or the server is stopping
            self._pool.submit(self._work, message)

    def _work(self, message: Any) -> None:
        from mns.mns_exception import MNSExceptionBase

        self._provider.fc_handler(message.message_body.encode("utf-8"), None)
        with self._ack_lock:  # one SDK client, one connection: deletes take turns
            try:
                self._ack_queue.delete_message(message.receipt_handle)
            except MNSExceptionBase:
                return


class MnsRoute:
    """One local MNS account per stack operation; queues, topics and consumers made on first use."""

    def __init__(self, region: str, account_id: str, load_provider: LoadProvider, *, workers: int = 16) -> None:
        self._mns = LocalMNS(region=region, account_id=account_id)
        self._load = load_provider
        self._workers = workers
        self._lock = threading.Lock()
        self._queues: dict[str, Any] = {}
        self._topics: dict[str, Any] = {}
        self._consumers: list[_Consumer] = []
        self._account: Any = None

    def start(self) -> "MnsRoute":
        self._mns.start()
        self._account = self._mns.account()
        return self

    def stop(self) -> None:
        for consumer in self._consumers:
            consumer.stop()
        self._mns.stop()

    @property
    def mns(self) -> LocalMNS:
        return self._mns

    def _queue(self, name: str, spec: str) -> Any:
        """The queue `name`, created with a consumer running `spec` (caller holds the lock)."""
        from mns.queue import QueueMeta

        if name not in self._queues:
            queue = self._account.get_queue(name)
            queue.set_encoding(False)
            queue.create(QueueMeta(vis_timeout=VISIBILITY_TIMEOUT))
            # The SDK's client holds one HTTP connection: the long poll and the acks get their own.
            poll, ack = (self._mns.account().get_queue(name) for _ in range(2))
            poll.set_encoding(False)
            consumer = _Consumer(poll, ack, self._load(spec), self._workers)
            consumer.start()
            self._consumers.append(consumer)
            self._queues[name] = queue
        return self._queues[name]

    def send(self, token: MnsQueueToken | MnsTopicToken, spec: str, request: dict[str, Any]) -> None:
        from mns.queue import Message
        from mns.subscription import SubscriptionMeta
        from mns.topic import TopicMessage, TopicMeta

        body = json.dumps(request, ensure_ascii=False)
        with self._lock:
            if isinstance(token, MnsQueueToken):
                queue = self._queue(token.queue, spec)
            else:
                queue = None
                if token.topic not in self._topics:
                    inbox = f"{token.topic}-ros-emulator"[:256]
                    self._queue(inbox, spec)
                    topic = self._account.get_topic(token.topic)
                    topic.create(TopicMeta())
                    subscription = topic.get_subscription("ros-emulator")
                    subscription.subscribe(SubscriptionMeta(self._mns.queue_arn(inbox), notify_content_format="SIMPLIFIED"))
                    self._topics[token.topic] = topic
                topic = self._topics[token.topic]
            # Sent under the lock: the SDK client's single connection is not thread-safe.
            if queue is not None:
                queue.send_message(Message(body))
            else:
                topic.publish_message(TopicMessage(body))
