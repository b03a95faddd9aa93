"""Deliver published topic messages to subscriptions the way MNS does.

Queue endpoints get a new queue message; HTTP endpoints get a POST signed with
RSA-SHA1 over the documented string-to-sign (spec §4.3), retried per the
subscription's NotifyStrategy until a 2xx arrives. Delays can be scaled down so
tests see the retry schedule in milliseconds.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import http.client
import itertools
import json
import random
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import formatdate
from typing import Callable
from urllib.parse import urlsplit

from crhelper.local.mns_cert import SigningIdentity
from crhelper.local.mns_state import Broker, MnsError, PublishedMessage, SubscriptionState
from crhelper.local.mns_xml import render
from crhelper.mns_push import build_string_to_sign

_QUEUE_ENDPOINT = re.compile(r"^acs:mns:([a-z0-9-]+):([0-9]+):/?queues/([A-Za-z][A-Za-z0-9-]{0,255})$")
PUSH_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class PushAttempt:
    """One delivery try, for tests and diagnostics (endpoint shown without its query string)."""

    topic: str
    subscription: str
    endpoint: str
    message_id: str
    attempt: int
    status: int | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def is_supported_endpoint(endpoint: str) -> bool:
    """Queue ARNs and http(s) URLs; mail and SMS endpoints are not emulated."""
    if _QUEUE_ENDPOINT.match(endpoint):
        return True
    try:
        parts = urlsplit(endpoint)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def retry_delays(strategy: str, rng: random.Random) -> list[float]:
    """Seconds before each retry: BACKOFF_RETRY 3 x 10-20 s; EXPONENTIAL_DECAY_RETRY 176 x 2^n capped at 512 s."""
    if strategy == "EXPONENTIAL_DECAY_RETRY":
        return [float(min(2**i, 512)) for i in range(176)]
    return [rng.uniform(10.0, 20.0) for _ in range(3)]


def notification(message: PublishedMessage, sub: SubscriptionState, owner: str) -> tuple[bytes, str]:
    """The pushed body and its Content-Type for the subscription's NotifyContentFormat."""
    if sub.content_format == "SIMPLIFIED":
        return message.body.encode("utf-8"), "text/plain;charset=utf-8"
    fields = [
        ("TopicOwner", owner),
        ("TopicName", message.topic),
        ("Subscriber", owner),
        ("SubscriptionName", sub.name),
        ("MessageId", message.message_id),
        ("Message", message.body),
        ("MessageMD5", message.body_md5),
        ("MessageTag", message.tag),
        ("PublishTime", str(int(message.publish_time * 1000))),
    ]
    if sub.content_format == "JSON":
        return json.dumps(dict(fields), ensure_ascii=False).encode("utf-8"), "application/json;charset=utf-8"
    return render("Notification", fields), "text/xml;charset=utf-8"


class Pusher:
    """Runs delivery tries on a small thread pool and waits out retry delays on a timer thread, so a
    failing endpoint never delays other subscriptions; ``close`` abandons pending retries promptly."""

    def __init__(
        self,
        broker: Broker,
        identity: SigningIdentity,
        cert_url: Callable[[], str],
        owner: str,
        retry_time_scale: float = 1.0,
        timeout: float = PUSH_TIMEOUT_SECONDS,
    ) -> None:
        self._broker = broker
        self._identity = identity
        self._cert_url = cert_url
        self._owner = owner
        self._scale = retry_time_scale
        self._timeout = timeout
        self._rng = random.Random()
        self._stop = threading.Event()
        self._lock = threading.Condition()
        self._attempts: list[PushAttempt] = []
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="local-mns-push")
        # Retries wait here, not in a pool thread: a dead endpoint must not hold up other deliveries.
        self._due: list[tuple[float, int, PublishedMessage, SubscriptionState, list[float], int]] = []
        self._seq = itertools.count()
        self._timer = threading.Thread(target=self._schedule_loop, name="local-mns-push-retry", daemon=True)
        self._timer.start()

    def deliver(self, message: PublishedMessage, subscriptions: list[SubscriptionState]) -> None:
        for sub in subscriptions:
            delays = [d * self._scale for d in retry_delays(sub.notify_strategy, self._rng)]
            self._submit(message, sub, delays, 0)

    def _submit(self, message: PublishedMessage, sub: SubscriptionState, delays: list[float], attempt: int) -> None:
        try:
            self._pool.submit(self._run, message, sub, delays, attempt)
        except RuntimeError:  # closed meanwhile: pending retries are abandoned, as documented
            pass

    def _schedule_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                now = time.monotonic()
                ready = []
                while self._due and self._due[0][0] <= now:
                    ready.append(heapq.heappop(self._due))
                if not ready:
                    self._lock.wait(self._due[0][0] - now if self._due else None)
                    continue
            for _, _, message, sub, delays, attempt in ready:
                self._submit(message, sub, delays, attempt)

    def attempts(self) -> list[PushAttempt]:
        with self._lock:
            return list(self._attempts)

    def wait_attempts(self, message_id: str, count: int, timeout: float) -> list[PushAttempt]:
        """Block until ``count`` attempts for ``message_id`` are recorded (or timeout); return them."""

        def mine() -> list[PushAttempt]:
            return [a for a in self._attempts if a.message_id == message_id]

        with self._lock:
            self._lock.wait_for(lambda: len(mine()) >= count, timeout=timeout)
            return mine()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._due.clear()
            self._lock.notify_all()
        self._timer.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _run(self, message: PublishedMessage, sub: SubscriptionState, delays: list[float], attempt: int) -> None:
        """One delivery try; a failed one is queued again after its NotifyStrategy delay."""
        if self._stop.is_set():
            return
        status, error = self._attempt(message, sub)
        shown = sub.endpoint if sub.endpoint.startswith("acs:") else _without_query(sub.endpoint)
        record = PushAttempt(message.topic, sub.name, shown, message.message_id, attempt + 1, status, error)
        with self._lock:
            self._attempts.append(record)
            if not record.ok and attempt < len(delays) and not self._stop.is_set():
                due = time.monotonic() + delays[attempt]
                heapq.heappush(self._due, (due, next(self._seq), message, sub, delays, attempt + 1))
            self._lock.notify_all()

    def _attempt(self, message: PublishedMessage, sub: SubscriptionState) -> tuple[int | None, str | None]:
        body, content_type = notification(message, sub, self._owner)
        queue = _QUEUE_ENDPOINT.match(sub.endpoint)
        if queue is not None:
            try:
                self._broker.send(queue.group(3), body.decode("utf-8"), None, None)
            except MnsError as exc:
                return exc.status, exc.code
            return 201, None
        return self._post(message, sub, body, content_type)

    def _post(
        self, message: PublishedMessage, sub: SubscriptionState, body: bytes, ctype: str
    ) -> tuple[int | None, str | None]:
        parts = urlsplit(sub.endpoint)
        resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        md5_hex = hashlib.md5(body).hexdigest()  # noqa: S324 - protocol field
        headers = {
            "content-type": ctype,
            "content-md5": base64.b64encode(md5_hex.encode("ascii")).decode("ascii"),
            "date": formatdate(usegmt=True),
            "x-mns-message-id": message.message_id,
            "x-mns-publish-time": str(int(message.publish_time * 1000)),
            "x-mns-request-id": uuid.uuid4().hex.upper(),
            "x-mns-signing-cert-url": base64.b64encode(self._cert_url().encode("ascii")).decode("ascii"),
            "x-mns-subscriber": self._owner,
            "x-mns-subscription-name": sub.name,
            "x-mns-topic-name": message.topic,
            "x-mns-topic-owner": self._owner,
            "x-mns-version": "2015-06-06",
        }
        headers["authorization"] = self._identity.sign_b64(build_string_to_sign("POST", resource, headers))
        conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(parts.hostname or "", parts.port, timeout=self._timeout)
        try:
            conn.request("POST", resource, body=body, headers=headers)
            resp = conn.getresponse()
            resp.read()
            return resp.status, None
        except (OSError, http.client.HTTPException) as exc:
            return None, exc.__class__.__name__
        finally:
            conn.close()


def _without_query(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"
