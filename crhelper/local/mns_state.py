"""In-memory queues and topics with MNS semantics, independent of HTTP.

Visibility timeouts, delays, priorities, receipt handles and long polls live here so
they can be reasoned about without the wire format. One Condition guards all state:
a send or a visibility change wakes every long-polling receiver.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,255}$")
_HANDLE = re.compile(r"^[0-9a-f]{32}$")
MAX_BATCH = 16


class MnsError(Exception):
    """An MNS error response: HTTP status, error code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def invalid_argument(message: str) -> MnsError:
    return MnsError(400, "InvalidArgument", message)


def _now_ms(now: float) -> int:
    return int(now * 1000)


# (name, default, low, high) for numeric queue attributes, as documented for CreateQueue.
QUEUE_RANGES: dict[str, tuple[int, int, int]] = {
    "VisibilityTimeout": (30, 1, 43200),
    "MaximumMessageSize": (65536, 1024, 65536),
    "MessageRetentionPeriod": (345600, 60, 604800),
    "DelaySeconds": (0, 0, 604800),
    "PollingWaitSeconds": (0, 0, 30),
}
TOPIC_RANGES: dict[str, tuple[int, int, int]] = {"MaximumMessageSize": (65536, 1024, 65536)}
NOTIFY_STRATEGIES = ("BACKOFF_RETRY", "EXPONENTIAL_DECAY_RETRY")
CONTENT_FORMATS = ("XML", "JSON", "SIMPLIFIED")


def ranged_int(name: str, raw: str, low: int, high: int) -> int:
    """Parse an integer attribute and enforce MNS's documented range."""
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise invalid_argument(f"The value of {name} should between {low} and {high} seconds/bytes.") from None
    if not low <= value <= high:
        raise invalid_argument(f"The value of {name} should between {low} and {high} seconds/bytes.")
    return value


def _attrs(given: Mapping[str, str], ranges: Mapping[str, tuple[int, int, int]], base: dict | None) -> dict:
    out = dict(base) if base else {name: spec[0] for name, spec in ranges.items()}
    for name, (_, low, high) in ranges.items():
        if name in given and given[name] != "":
            out[name] = ranged_int(name, given[name], low, high)
    if "LoggingEnabled" in given:
        out["LoggingEnabled"] = given["LoggingEnabled"].lower() == "true"
    out.setdefault("LoggingEnabled", False)
    return out


def check_name(kind: str, name: str) -> None:
    if not _NAME.match(name):
        code = {"queue": "InvalidQueueName", "topic": "InvalidTopicName"}.get(kind, "InvalidSubscriptionName")
        raise MnsError(
            400, code,
            f"The {kind} name you provided is not valid: "
            "it must start with a letter and hold 1-256 letters, digits or '-'.",
        )


@dataclass
class StoredMessage:
    """A queued message; receipt_handle is valid only until visible_at."""

    message_id: str
    body: str
    body_md5: str
    priority: int
    enqueue_time: float
    visible_at: float
    seq: int
    dequeue_count: int = 0
    first_dequeue_time: float = 0.0
    receipt_handle: str | None = None


@dataclass
class QueueState:
    name: str
    attrs: dict
    create_time: float
    last_modify_time: float
    messages: dict[str, StoredMessage] = field(default_factory=dict)
    #: receipt handle -> message id, so delete and change-visibility find a message in O(1), not by scanning
    #: the queue (30 workers deleting from a queue of thousands); entries are checked against the message.
    handles: dict[str, str] = field(default_factory=dict)


@dataclass
class SubscriptionState:
    topic: str
    name: str
    endpoint: str
    notify_strategy: str
    content_format: str
    filter_tag: str
    create_time: float
    last_modify_time: float


@dataclass
class TopicState:
    name: str
    attrs: dict
    create_time: float
    last_modify_time: float
    message_count: int = 0
    subscriptions: dict[str, SubscriptionState] = field(default_factory=dict)


@dataclass(frozen=True)
class PublishedMessage:
    topic: str
    message_id: str
    body: str
    body_md5: str
    tag: str
    publish_time: float


def body_md5(body: str) -> str:
    """MNS reports MessageBodyMD5 as upper-case hex of the body text."""
    return hashlib.md5(body.encode("utf-8")).hexdigest().upper()  # noqa: S324 - protocol field


def _new_message_id() -> str:
    return uuid.uuid4().hex.upper()


class Broker:
    """All queues and topics of one local account."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._queues: dict[str, QueueState] = {}
        self._topics: dict[str, TopicState] = {}
        self._seq = 0
        self._closed = False

    def close(self) -> None:
        """Release every long-polling receiver."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ----------------------------------------------------------------- queues
    def create_queue(self, name: str, given: Mapping[str, str]) -> bool:
        """True when created, False when an identical queue exists (MNS answers 204 then)."""
        check_name("queue", name)
        attrs = _attrs(given, QUEUE_RANGES, None)
        with self._cond:
            existing = self._queues.get(name)
            if existing is not None:
                if existing.attrs == attrs:
                    return False
                raise MnsError(409, "QueueAlreadyExist", "The queue you want to create is already exist.")
            now = self._clock()
            self._queues[name] = QueueState(name, attrs, now, now)
            return True

    def set_queue_attributes(self, name: str, given: Mapping[str, str]) -> None:
        with self._cond:
            queue = self._queue(name)
            queue.attrs = _attrs(given, QUEUE_RANGES, queue.attrs)
            queue.last_modify_time = self._clock()
            self._cond.notify_all()

    def queue_snapshot(self, name: str) -> tuple[QueueState, dict[str, int]]:
        """A copy of the queue and its Active/Inactive/Delay message counts."""
        with self._cond:
            queue = self._queue(name)
            now = self._clock()
            self._expire(queue, now)
            counts = {"ActiveMessages": 0, "InactiveMessages": 0, "DelayMessages": 0}
            for msg in queue.messages.values():
                if msg.visible_at <= now:
                    counts["ActiveMessages"] += 1
                elif msg.dequeue_count:
                    counts["InactiveMessages"] += 1
                else:
                    counts["DelayMessages"] += 1
            return dataclasses.replace(queue, messages={}, attrs=dict(queue.attrs)), counts

    def holds(self, name: str, message_id: str) -> bool:
        """Whether the queue still holds this message (not yet deleted by a consumer)."""
        with self._cond:
            queue = self._queues.get(name)
            return queue is not None and message_id in queue.messages

    def delete_queue(self, name: str) -> None:
        with self._cond:
            self._queues.pop(name, None)
            self._cond.notify_all()

    def list_queues(self, prefix: str, ret_number: int, marker: str) -> tuple[list[str], str]:
        with self._cond:
            return _page(sorted(self._queues), prefix, ret_number, marker)

    def has_queue(self, name: str) -> bool:
        with self._cond:
            return name in self._queues

    def send(self, name: str, body: str, delay_seconds: int | None, priority: int | None) -> StoredMessage:
        with self._cond:
            queue = self._queue(name)
            size = len(body.encode("utf-8"))
            if size > queue.attrs["MaximumMessageSize"]:
                raise invalid_argument(
                    f"The value of MessageBody should between 1 and {queue.attrs['MaximumMessageSize']} seconds/bytes."
                )
            now = self._clock()
            delay = queue.attrs["DelaySeconds"] if delay_seconds is None else delay_seconds
            self._seq += 1
            msg = StoredMessage(
                message_id=_new_message_id(), body=body, body_md5=body_md5(body),
                priority=8 if priority is None else priority, enqueue_time=now,
                visible_at=now + delay, seq=self._seq,
            )
            queue.messages[msg.message_id] = msg
            self._cond.notify_all()
            return dataclasses.replace(msg)

    def receive(self, name: str, count: int, wait_seconds: float | None, peek: bool = False) -> list[StoredMessage]:
        """Take up to ``count`` visible messages, long-polling up to ``wait_seconds`` for the first one."""
        with self._cond:
            queue = self._queue(name)
            wait = float(queue.attrs["PollingWaitSeconds"] if wait_seconds is None else wait_seconds)
            deadline = self._clock() + wait
            while True:
                queue = self._queue(name)
                now = self._clock()
                self._expire(queue, now)
                ready = sorted(
                    (m for m in queue.messages.values() if m.visible_at <= now),
                    key=lambda m: (m.priority, m.visible_at, m.seq),
                )[:count]
                if ready:
                    return [self._take(queue, m, now, peek) for m in ready]
                remaining = deadline - now
                if remaining <= 0 or self._closed:
                    raise MnsError(404, "MessageNotExist", "Message not exist.")
                upcoming = [m.visible_at - now for m in queue.messages.values() if m.visible_at > now]
                self._cond.wait(min([remaining, *upcoming]) + 0.001)

    def delete_message(self, name: str, handle: str) -> None:
        with self._cond:
            queue = self._queue(name)
            msg = self._by_handle(queue, handle)
            del queue.messages[msg.message_id]
            queue.handles.pop(handle, None)

    def change_visibility(self, name: str, handle: str, visibility_timeout: int) -> StoredMessage:
        with self._cond:
            queue = self._queue(name)
            msg = self._by_handle(queue, handle)
            msg.visible_at = self._clock() + visibility_timeout
            self._new_handle(queue, msg)
            self._cond.notify_all()
            return dataclasses.replace(msg)

    # ----------------------------------------------------------------- topics
    def create_topic(self, name: str, given: Mapping[str, str]) -> bool:
        check_name("topic", name)
        attrs = _attrs(given, TOPIC_RANGES, None)
        with self._cond:
            existing = self._topics.get(name)
            if existing is not None:
                if existing.attrs == attrs:
                    return False
                raise MnsError(409, "TopicAlreadyExist", "The topic you want to create is already exist.")
            now = self._clock()
            self._topics[name] = TopicState(name, attrs, now, now)
            return True

    def set_topic_attributes(self, name: str, given: Mapping[str, str]) -> None:
        with self._cond:
            topic = self._topic(name)
            topic.attrs = _attrs(given, TOPIC_RANGES, topic.attrs)
            topic.last_modify_time = self._clock()

    def topic_snapshot(self, name: str) -> TopicState:
        with self._cond:
            topic = self._topic(name)
            return dataclasses.replace(topic, subscriptions={}, attrs=dict(topic.attrs))

    def delete_topic(self, name: str) -> None:
        with self._cond:
            self._topics.pop(name, None)

    def list_topics(self, prefix: str, ret_number: int, marker: str) -> tuple[list[str], str]:
        with self._cond:
            return _page(sorted(self._topics), prefix, ret_number, marker)

    def publish(self, name: str, body: str, tag: str) -> tuple[PublishedMessage, list[SubscriptionState]]:
        """Record a publish and return the subscriptions whose filter accepts it."""
        with self._cond:
            topic = self._topic(name)
            if len(body.encode("utf-8")) > topic.attrs["MaximumMessageSize"]:
                raise invalid_argument(
                    f"The value of MessageBody should between 1 and {topic.attrs['MaximumMessageSize']} seconds/bytes."
                )
            topic.message_count += 1
            message = PublishedMessage(name, _new_message_id(), body, body_md5(body), tag, self._clock())
            targets = [
                dataclasses.replace(sub)
                for sub in topic.subscriptions.values()
                if not sub.filter_tag or sub.filter_tag == tag
            ]
            return message, targets

    def subscribe(self, topic_name: str, name: str, endpoint: str, strategy: str, fmt: str, filter_tag: str) -> bool:
        check_name("subscription", name)
        with self._cond:
            topic = self._topic(topic_name)
            existing = topic.subscriptions.get(name)
            if existing is not None:
                same = (existing.endpoint, existing.notify_strategy, existing.content_format, existing.filter_tag)
                if same == (endpoint, strategy, fmt, filter_tag):
                    return False
                raise MnsError(409, "SubscriptionAlreadyExist", "The subscription you want to create is already exist.")
            now = self._clock()
            topic.subscriptions[name] = SubscriptionState(
                topic_name, name, endpoint, strategy, fmt, filter_tag, now, now
            )
            return True

    def set_subscription_strategy(self, topic_name: str, name: str, strategy: str) -> None:
        with self._cond:
            sub = self._subscription(topic_name, name)
            sub.notify_strategy = strategy
            sub.last_modify_time = self._clock()

    def subscription_snapshot(self, topic_name: str, name: str) -> SubscriptionState:
        with self._cond:
            return dataclasses.replace(self._subscription(topic_name, name))

    def unsubscribe(self, topic_name: str, name: str) -> None:
        with self._cond:
            self._topic(topic_name).subscriptions.pop(name, None)

    def list_subscriptions(self, topic_name: str, prefix: str, ret_number: int, marker: str) -> tuple[list[str], str]:
        with self._cond:
            return _page(sorted(self._topic(topic_name).subscriptions), prefix, ret_number, marker)

    # --------------------------------------------------------------- internal
    def _queue(self, name: str) -> QueueState:
        queue = self._queues.get(name)
        if queue is None:
            raise MnsError(404, "QueueNotExist", "The queue name you provided is not exist.")
        return queue

    def _topic(self, name: str) -> TopicState:
        topic = self._topics.get(name)
        if topic is None:
            raise MnsError(404, "TopicNotExist", "The topic name you provided is not exist.")
        return topic

    def _subscription(self, topic_name: str, name: str) -> SubscriptionState:
        sub = self._topic(topic_name).subscriptions.get(name)
        if sub is None:
            raise MnsError(404, "SubscriptionNotExist", "The subscription name you provided is not exist.")
        return sub

    def _by_handle(self, queue: QueueState, handle: str) -> StoredMessage:
        if not _HANDLE.match(handle):
            raise MnsError(400, "ReceiptHandleError", "The receipt handle you provide is not valid.")
        msg = queue.messages.get(queue.handles.get(handle, ""))
        if msg is not None and msg.receipt_handle == handle and msg.visible_at > self._clock():
            return msg
        # A handle that expired (the message became visible again) or was never issued.
        raise MnsError(404, "MessageNotExist", "Message not exist.")

    def _take(self, queue: QueueState, msg: StoredMessage, now: float, peek: bool) -> StoredMessage:
        if peek:
            return dataclasses.replace(msg)
        msg.dequeue_count += 1
        if not msg.first_dequeue_time:
            msg.first_dequeue_time = now
        msg.visible_at = now + queue.attrs["VisibilityTimeout"]
        self._new_handle(queue, msg)
        return dataclasses.replace(msg)

    @staticmethod
    def _new_handle(queue: QueueState, msg: StoredMessage) -> None:
        """A fresh receipt handle for `msg`; the one it replaces stops working."""
        if msg.receipt_handle is not None:
            queue.handles.pop(msg.receipt_handle, None)
        msg.receipt_handle = secrets.token_hex(16)
        queue.handles[msg.receipt_handle] = msg.message_id

    def _expire(self, queue: QueueState, now: float) -> None:
        retention = queue.attrs["MessageRetentionPeriod"]
        for key in [k for k, m in queue.messages.items() if now - m.enqueue_time > retention]:
            expired = queue.messages.pop(key)
            if expired.receipt_handle is not None:
                queue.handles.pop(expired.receipt_handle, None)


def _page(names: list[str], prefix: str, ret_number: int, marker: str) -> tuple[list[str], str]:
    selected = [n for n in names if n.startswith(prefix) and (not marker or n >= marker)]
    if ret_number > 0 and len(selected) > ret_number:
        return selected[:ret_number], selected[ret_number]
    return selected, ""
