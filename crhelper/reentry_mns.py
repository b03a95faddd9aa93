"""Re-entry through an MNS queue: a delayed message carrying only the continuation id.

A long-running operation that arrived through a queue worker continues through the same (or another)
queue: `schedule` sends `{"crhelperContinuation": id}` with DelaySeconds, and whichever worker
consumes that queue resumes the operation from the shared store. Unlike the in-process scheduler this
survives the worker's death, and MNS keeps the message up to 7 days (DelaySeconds allows 604,800 s).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from .logs import get_logger
from .reentry import continuation_payload
from .servicetoken import MnsQueueToken, ServiceTokenError, parse_service_token

__all__ = [
    "MAX_MNS_DELAY",
    "ENV_QUEUE",
    "ENV_ENDPOINT",
    "QueueLocation",
    "MnsQueueReentry",
    "mns_delay_seconds",
    "resolve_queue",
]

#: MNS accepts DelaySeconds from 0 to 604,800 (7 days).
MAX_MNS_DELAY = 604_800
ENV_QUEUE = "CRHELPER_MNS_REENTRY_QUEUE"
ENV_ENDPOINT = "CRHELPER_MNS_ENDPOINT"

_log = get_logger("reentry.mns")


@dataclass(frozen=True)
class QueueLocation:
    """An MNS endpoint and a queue name on it."""

    endpoint: str
    queue: str


def mns_delay_seconds(delay: float) -> int:
    """Whole seconds within MNS's DelaySeconds range; rounded up so a re-entry never arrives early."""
    if math.isnan(delay):
        return 0
    return max(0, min(MAX_MNS_DELAY, math.ceil(delay)))


def resolve_queue(queue: str, endpoint: str | None = None) -> QueueLocation:
    """The endpoint and queue name for a queue ARN (`acs:mns:<region>:<account>:queues/<name>`) or a bare name.

    Without an explicit endpoint an ARN yields `https://<account>.mns.<region>.aliyuncs.com`; a bare
    name needs the endpoint.
    """
    queue = queue.strip()
    if queue.startswith("acs:"):
        try:
            token = parse_service_token(queue)
        except ServiceTokenError as exc:
            raise ValueError(f"queue: {exc.problem}") from None
        if not isinstance(token, MnsQueueToken):
            raise ValueError("queue: the ARN must name an MNS queue (acs:mns:<region>:<account>:queues/<name>)")
        derived = f"https://{token.account_id}.mns.{token.region}.aliyuncs.com"
        return QueueLocation((endpoint or derived).rstrip("/"), token.queue)
    if not queue or "/" in queue or ":" in queue:
        raise ValueError("queue: expected a queue name or an acs:mns:<region>:<account>:queues/<name> ARN")
    if not endpoint:
        raise ValueError(f"endpoint: a bare queue name ({queue!r}) needs an MNS endpoint such as "
                         "https://<account>.mns.<region>.aliyuncs.com")
    return QueueLocation(endpoint.rstrip("/"), queue)


class MnsQueueReentry:
    """Implements crhelper.reentry.Reentry by sending a delayed continuation message to a queue.

    A fresh SDK client per call: the SDK's connection is not thread-safe, and re-entries are rare.
    """

    name = "mns"
    unavailable_reason: str | None = None

    def __init__(
        self,
        *,
        endpoint: str,
        queue: str,
        access_key_id: str,
        access_key_secret: str,
        security_token: str = "",
    ) -> None:
        if not access_key_id or not access_key_secret:
            raise ValueError("MNS re-entry needs credentials: set ALIBABA_CLOUD_ACCESS_KEY_ID and "
                             "ALIBABA_CLOUD_ACCESS_KEY_SECRET")
        self.endpoint = endpoint
        self.queue = queue
        self._key_id = access_key_id
        self._key_secret = access_key_secret
        self._token = security_token

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "MnsQueueReentry":
        """From CRHELPER_MNS_REENTRY_QUEUE (ARN or name), CRHELPER_MNS_ENDPOINT and ALIBABA_CLOUD_* credentials."""
        env = os.environ if env is None else env
        queue = env.get(ENV_QUEUE, "")
        if not queue:
            raise ValueError(f"{ENV_QUEUE}: not set; name the queue a worker consumes")
        try:
            location = resolve_queue(queue, env.get(ENV_ENDPOINT) or None)
        except ValueError as exc:
            raise ValueError(f"{ENV_QUEUE}/{ENV_ENDPOINT}: {exc}") from None
        return cls(
            endpoint=location.endpoint, queue=location.queue,
            access_key_id=env.get("ALIBABA_CLOUD_ACCESS_KEY_ID", ""),
            access_key_secret=env.get("ALIBABA_CLOUD_ACCESS_KEY_SECRET", ""),
            security_token=env.get("ALIBABA_CLOUD_SECURITY_TOKEN", ""),
        )

    def _queue(self) -> Any:
        from mns.account import Account  # lazy: only long-running operations pay for the SDK

        queue = Account(self.endpoint, self._key_id, self._key_secret, self._token).get_queue(self.queue)
        queue.set_encoding(False)
        return queue

    def schedule(self, continuation_id: str, delay: float) -> None:
        from mns.queue import Message

        seconds = mns_delay_seconds(delay)
        message = Message(continuation_payload(continuation_id).decode("utf-8"), delay_seconds=seconds)
        sent = self._queue().send_message(message)
        _log.info("re-entry scheduled", extra={"fields": {
            "delay": seconds, "via": "mns", "queue": self.queue, "MessageId": sent.message_id}})
