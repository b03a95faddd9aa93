"""A queue worker for `acs:mns:<region>:<account>:queues/<name>` ServiceTokens (spec §4.2, rule 16).

ROS enqueues each request; this worker long-polls the queue with the real `aliyun-mns-sdk` (base64
encoding off, bodies decoded defensively), runs up to `concurrency` requests at once, keeps each
message invisible while its handler runs, and deletes it only once nothing is left to do for it:

* response delivered, or nothing to send now (an operation continuing later, a duplicate absorbed by
  the idempotency store, a request no one can answer): delete;
* the request is in flight in another process that may still be alive and no follow-up could be
  scheduled (`outcome.retry_after`): keep, with its visibility set to about `retry_after` seconds, so
  that MNS hands it out again when the holder's lease lapses. Deleting it would lose the request if
  that holder died;
* response NOT delivered (ResponseURL unreachable): keep. MNS makes the message visible again after
  the visibility timeout and the store re-sends the stored answer, without running the handler again;
* response rejected for good (`outcome.final`: a final 4xx, an invalid or refused URL): delete with
  an error log line; keeping it would re-post the same rejected answer once per visibility period;
* poison (not JSON, not base64 of JSON, not UTF-8, absurdly nested, not a ROS request): delete at once
  and log an error with the MessageId. Redelivery cannot make such a body readable, and ROS cannot be
  answered without its ResponseURL, so keeping it would only cost a receive per visibility timeout;
* a handler escaping with a BaseException (KeyboardInterrupt, asyncio.CancelledError, SystemExit):
  keep for redelivery; the worker thread lives on.

Throughput: the receiver keeps up to `prefetch` messages beyond `concurrency` received and waiting
(each leased and kept invisible like a running one), so it always asks MNS for full batches of 16
instead of one message per freed thread; and deletes are sent in batches (BatchDeleteMessage, up to
16 receipt handles) by one deleter thread, one round trip for all the messages finished meanwhile.
A stopping worker runs none of the waiting ones: they are released at once.

SIGTERM/SIGINT stop receiving, let in-flight handlers finish for up to a grace period, then exit 0;
messages still running then get a short visibility (RELEASE_VISIBILITY) and no more extensions, so
they come back within seconds instead of after a whole visibility timeout. At start the worker runs
the provider's recovery once in the background (operations a SIGKILLed worker left in the store),
then every `recover_every` seconds as before. Each thread has its own SDK client, because
the SDK keeps one HTTP connection per client and is not thread-safe.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import queue as queue_module
import random
import threading
import time
from typing import Any, Callable, Literal, Union

from ..cloud.credentials import Credentials
from ..config import ConfigError
from ..envelopes import BodyDecodeError, decode_body
from ..logs import configure, get_logger
from ..reentry import Reentry
from ..runtime import Outcome
from ..signals import stop_requested
from .hosted import HostedProvider

__all__ = [
    "QueueWorker",
    "Action",
    "disposition",
    "defer_visibility",
    "first_extension_delay",
    "error_backoff",
    "handle_message",
    "recover_stalled",
    "MAX_BATCH",
]

#: MNS returns at most 16 messages per batch receive.
MAX_BATCH = 16
#: MNS long polls last 0-30 s.
MAX_WAIT_SECONDS = 30
#: MNS visibility timeouts are 1-43,200 s.
MAX_VISIBILITY = 43_200
#: Visibility given to messages still running when a stopping worker's grace ends, and to messages
#: received while stopping: short, so another worker gets them soon.
RELEASE_VISIBILITY = 2
#: Errors that mean a receipt handle no longer holds the message (it became visible or was taken again).
LOST_HANDLE_ERRORS = frozenset({"MessageNotExist", "ReceiptHandleError"})

ReentryChoice = Union[Reentry, Literal["queue", "provider"]]

_log = get_logger("worker")


class Action(enum.Enum):
    DELETE = "delete"
    KEEP = "keep"
    #: Keep, and make the message visible again after a given delay (`retry_after`).
    DEFER = "defer"


def disposition(
    body: dict[str, Any] | None, delivered: bool, *, final: bool = False, retry_after: float | None = None
) -> tuple[Action, str]:
    """What to do with a handled message, and why (pure).

    `retry_after`: nothing was sent because another process holds the request in flight and may still
    be alive; deleting would lose the request if that process died, so the message comes back then.
    `final`: the response could not be delivered and retrying cannot help (a final 4xx, an invalid or
    refused URL); keeping it would only re-post the same answer once per visibility period."""
    if retry_after is not None and body is None:
        return Action.DEFER, f"request in flight elsewhere; checking again in {retry_after:g} s"
    if body is None:
        return Action.DELETE, "nothing to send now"
    if delivered:
        return Action.DELETE, "response delivered"
    if final:
        return Action.DELETE, "response rejected for good (retrying cannot help); message deleted"
    return Action.KEEP, "response not delivered; left in the queue for redelivery"


def defer_visibility(retry_after: float) -> int:
    """The visibility (whole seconds, within MNS's 1-43,200) that brings a deferred message back after
    about `retry_after` seconds."""
    return max(1, min(MAX_VISIBILITY, int(math.ceil(retry_after))))


def first_extension_delay(next_visible_ms: int | None, extend_every: float, now: float) -> float:
    """Seconds until the first visibility extension: on schedule, or at half the time the queue's own
    VisibilityTimeout leaves (it may be shorter than ours)."""
    if not next_visible_ms or next_visible_ms <= 1:
        return extend_every
    remaining = next_visible_ms / 1000.0 - now
    return max(0.0, min(extend_every, remaining / 2.0))


def error_backoff(failures: int, base: float = 0.5, cap: float = 30.0,
                  rand: Callable[[float, float], float] = random.uniform) -> float:
    """Exponential back-off with jitter after consecutive MNS errors (failures counts from 1)."""
    ceiling = min(cap, base * (2 ** max(0, failures - 1)))
    return rand(ceiling / 2.0, ceiling)


def handle_message(provider: HostedProvider, request: dict[str, Any], reentry: Reentry | None) -> Outcome:
    """`provider.process(request)`, with long-running operations continued through `reentry`
    (a request that came through a queue continues through that queue). Returns an Outcome."""
    return provider.process(request, reentry=reentry)


def recover_stalled(provider: HostedProvider, reentry: Reentry | None, limit: int = 5) -> int:
    """Resume operations whose worker died mid-step (their step lease ran out); returns how many finished."""
    return int(provider.recover(reentry, limit))


@dataclasses.dataclass
class _Lease:
    """One received message while it is being handled; the lock orders extensions and the final delete."""

    message_id: str
    receipt_handle: str
    dequeue_count: int
    next_extend_at: float
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    started: bool = False
    finished: bool = False
    lost: bool = False


@dataclasses.dataclass
class WorkerStats:
    received: int = 0
    deleted: int = 0
    kept: int = 0
    poison: int = 0
    extensions: int = 0
    lost: int = 0
    released: int = 0
    deferred: int = 0
    final: int = 0
    receive_errors: int = 0
    recovered: int = 0


class QueueWorker:
    """Consume ROS requests from one MNS queue: `QueueWorker(provider, endpoint=..., queue=..., ...).run_forever()`.

    `reentry`: "queue" (default) continues long-running operations by sending delayed continuation
    messages to this same queue (unless CRHELPER_REENTRY names another strategy); "provider" leaves
    the choice to the provider; or pass any Reentry object (e.g. an MnsQueueReentry for another queue).
    """

    def __init__(
        self,
        provider: HostedProvider,
        *,
        endpoint: str,
        queue: str,
        access_key_id: str,
        access_key_secret: str,
        security_token: str = "",
        concurrency: int = 4,
        wait_seconds: int = 10,
        visibility_timeout: int = 60,
        extend_every: float | None = None,
        grace: float = 30.0,
        reentry: ReentryChoice = "queue",
        recover_every: float = 60.0,
        prefetch: int | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency: must be at least 1, got {concurrency}")
        prefetch = min(MAX_BATCH, concurrency) if prefetch is None else prefetch
        if prefetch < 0:
            raise ValueError(f"prefetch: must not be negative, got {prefetch}")
        if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
            raise ValueError(f"wait_seconds: MNS long polls last 0-{MAX_WAIT_SECONDS} s, got {wait_seconds}")
        if not 1 <= visibility_timeout <= MAX_VISIBILITY:
            raise ValueError(f"visibility_timeout: MNS allows 1-{MAX_VISIBILITY} s, got {visibility_timeout}")
        every = extend_every if extend_every is not None else max(0.5, visibility_timeout / 3.0)
        if not 0 < every < visibility_timeout:
            raise ValueError(f"extend_every: must be above 0 and below visibility_timeout ({visibility_timeout}), got {every}")
        self.provider = provider
        self.endpoint = endpoint
        self.queue_name = queue
        self.concurrency = concurrency
        #: Messages received beyond `concurrency` and waiting for a thread (so receives come in full batches).
        self.prefetch = prefetch
        self.wait_seconds = int(wait_seconds)
        self.visibility_timeout = int(visibility_timeout)
        self.extend_every = float(every)
        self.grace = grace
        self.recover_every = recover_every
        self._credentials = Credentials(access_key_id, access_key_secret, security_token)
        self._reentry_choice = reentry
        self._own_reentry: Reentry | None = None
        self._local = threading.local()
        self._lock = threading.Condition()
        self._leases: dict[int, _Lease] = {}
        self._busy = 0
        self._tasks: queue_module.Queue[Callable[[], None] | None] = queue_module.Queue()
        #: (lease, receipt handle) of handled messages waiting for the deleter's next BatchDeleteMessage.
        self._deletes: queue_module.Queue[tuple[_Lease, str] | None] = queue_module.Queue()
        self._deleter: threading.Thread | None = None
        self._stopping = threading.Event()
        self._keeper_stop = threading.Event()
        self._keeper_wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._receiver: threading.Thread | None = None
        self._last_recovery = time.monotonic()
        self._stats = WorkerStats()
        self._started = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "QueueWorker":
        if self._started:
            return self
        self._started = True
        configure()
        for index in range(self.concurrency):
            thread = threading.Thread(target=self._work, name=f"crhelper-worker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        keeper = threading.Thread(target=self._keep_visible, name="crhelper-worker-visibility", daemon=True)
        keeper.start()
        self._threads.append(keeper)
        self._deleter = threading.Thread(target=self._delete_loop, name="crhelper-worker-delete", daemon=True)
        self._deleter.start()
        self._recover_now()  # operations a killed predecessor left: resumed now, not after recover_every
        self._receiver = threading.Thread(target=self._receive_loop, name="crhelper-worker-receive", daemon=True)
        self._receiver.start()
        _log.info("queue worker started", extra={"fields": {
            "queue": self.queue_name, "concurrency": self.concurrency, "prefetch": self.prefetch,
            "wait_seconds": self.wait_seconds,
            "visibility_timeout": self.visibility_timeout, "reentry": self._reentry_name()}})
        return self

    def stop(self, grace: float | None = None) -> bool:
        """Stop receiving, wait up to `grace` seconds for in-flight messages; True when all finished."""
        if not self._started:
            return True
        grace = self.grace if grace is None else grace
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()
        deadline = time.monotonic() + grace
        with self._lock:
            drained = self._lock.wait_for(lambda: self._busy == 0, timeout=max(0.0, grace))
        if not drained:
            self._keeper_stop.set()  # no more extensions: these messages must come back soon
            self._keeper_wake.set()
            released = self._release_in_flight()
            _log.warning("grace period over with messages still in flight; MNS will redeliver them",
                         extra={"fields": {"in_flight": self._busy, "grace": grace, "released": released,
                                           "visible_in": RELEASE_VISIBILITY}})
        if self._receiver is not None:  # its long poll ends within wait_seconds; what it got is released
            self._receiver.join(self.wait_seconds + 2.0 if drained else max(0.1, deadline - time.monotonic()))
        self._keeper_stop.set()
        self._keeper_wake.set()
        for _ in range(self.concurrency):
            self._tasks.put(None)
        for thread in self._threads:
            thread.join(0.5 if not drained else 5.0)
        if self._deleter is not None:  # the deletes of messages handled so far are sent before stop returns
            self._deletes.put(None)
            self._deleter.join(10.0)
            self._deleter = None
        self._started = False
        _log.info("queue worker stopped", extra={"fields": dataclasses.asdict(self._stats)})
        return drained

    def run_forever(self) -> int:
        """Run until SIGTERM or SIGINT, then stop gracefully; returns the process exit code (0)."""
        with stop_requested() as requested:
            try:
                self.start()
                while not requested.wait(0.5):
                    pass
                _log.info("stop requested: finishing in-flight messages", extra={"fields": {"grace": self.grace}})
            finally:
                self.stop()
        return 0

    def __enter__(self) -> "QueueWorker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dataclasses.asdict(self._stats)

    def _count(self, name: str, by: int = 1) -> None:
        with self._lock:
            setattr(self._stats, name, getattr(self._stats, name) + by)

    # ------------------------------------------------------------------ SDK clients
    def _queue(self) -> Any:
        """This thread's SDK queue client, base64 encoding off."""
        client = getattr(self._local, "queue", None)
        if client is None:
            from mns.account import Account

            creds = self._credentials
            client = Account(self.endpoint, creds.access_key_id, creds.access_key_secret,
                             creds.security_token).get_queue(self.queue_name)
            client.set_encoding(False)
            self._local.queue = client
        return client

    def _reentry(self) -> Reentry | None:
        choice = self._reentry_choice
        if choice == "provider":
            return None
        if choice != "queue":
            return choice  # type: ignore[return-value]
        try:
            if self.provider.settings().reentry != "auto":
                return None  # CRHELPER_REENTRY names a strategy explicitly: the provider's choice stands
        except ConfigError:
            return None
        reentry = self._own_reentry
        if reentry is None:
            from ..reentry_mns import MnsQueueReentry

            creds = self._credentials
            reentry = MnsQueueReentry(endpoint=self.endpoint, queue=self.queue_name, access_key_id=creds.access_key_id,
                                      access_key_secret=creds.access_key_secret, security_token=creds.security_token)
            self._own_reentry = reentry
        return reentry

    def _reentry_name(self) -> str:
        choice = self._reentry_choice
        return choice if isinstance(choice, str) else choice.name

    # ------------------------------------------------------------------ receiving
    def _wait_for_slot(self) -> int:
        """How many messages to ask for: room in the threads plus the prefetch buffer. Waits while every
        thread is busy and less than half a batch fits, so receives fetch many at a time, not one."""
        capacity = self.concurrency + self.prefetch
        enough = max(1, min(MAX_BATCH, capacity) // 2)
        with self._lock:
            self._lock.wait_for(lambda: self._busy < self.concurrency or capacity - self._busy >= enough
                                or self._stopping.is_set())
            return 0 if self._stopping.is_set() else capacity - self._busy

    def _receive_loop(self) -> None:
        from mns.mns_exception import MNSExceptionBase, MNSServerException

        failures = 0
        while not self._stopping.is_set():
            free = self._wait_for_slot()
            if free <= 0:
                break
            try:
                messages = self._queue().batch_receive_message(min(MAX_BATCH, free), self.wait_seconds)
            except MNSServerException as exc:
                if exc.type == "MessageNotExist":  # an empty queue after the long poll: normal
                    failures = 0
                    self._maybe_recover()
                    continue
                failures = self._receive_failed(failures, exc.type, exc.message)
                continue
            except MNSExceptionBase as exc:
                failures = self._receive_failed(failures, exc.type, exc.message)
                continue
            failures = 0
            if self._stopping.is_set():
                self._release(messages)
                break
            for message in messages:
                self._dispatch(message)
            self._maybe_recover()

    def _receive_failed(self, failures: int, kind: str, message: str) -> int:
        failures += 1
        delay = error_backoff(failures)
        self._count("receive_errors")
        _log.error("receiving from the queue failed; backing off", extra={"fields": {
            "queue": self.queue_name, "error": f"{kind}: {message}", "retry_in": round(delay, 2)}})
        self._stopping.wait(delay)
        return failures

    def _release(self, messages: list[Any]) -> None:
        """Messages received while stopping: make them visible again soon for another worker."""
        from mns.mns_exception import MNSExceptionBase

        for message in messages:
            try:
                self._queue().change_message_visibility(message.receipt_handle, RELEASE_VISIBILITY)
                self._count("released")
            except MNSExceptionBase as exc:
                _log.warning("could not release a message while stopping", extra={"fields": {
                    "MessageId": message.message_id, "error": exc.type}})

    def _dispatch(self, message: Any) -> None:
        delay = first_extension_delay(getattr(message, "next_visible_time", None), self.extend_every, time.time())
        lease = _Lease(message.message_id, message.receipt_handle, int(message.dequeue_count or 0),
                       time.monotonic() + delay)
        with self._lock:
            self._busy += 1
            self._leases[id(lease)] = lease
            self._stats.received += 1
        self._keeper_wake.set()
        self._tasks.put(lambda: self._handle(message, lease))

    def _maybe_recover(self) -> None:
        """Now and then, let this worker finish operations whose worker died mid-step."""
        reentry = self._reentry() if self._reentry_choice != "provider" else None
        if reentry is None or time.monotonic() - self._last_recovery < self.recover_every:
            return
        self._last_recovery = time.monotonic()
        with self._lock:
            if self._busy >= self.concurrency:
                return
            self._busy += 1
        self._tasks.put(lambda: self._recover(reentry))

    def _recover_now(self) -> None:
        """Once at start, in a worker thread: resume operations whose process died (a SIGKILLed worker
        holding them), whatever the re-entry choice (None lets the provider use its own)."""
        self._last_recovery = time.monotonic()
        try:
            reentry = self._reentry()
        except Exception:  # noqa: BLE001 - the periodic recovery tries again
            _log.exception("recovery at start: no re-entry available")
            return
        with self._lock:
            self._busy += 1
        self._tasks.put(lambda: self._recover(reentry))

    def _recover(self, reentry: Reentry | None) -> None:
        try:
            self._count("recovered", recover_stalled(self.provider, reentry))
        except BaseException:  # noqa: BLE001 - the periodic recovery tries again
            _log.exception("recovery of stalled operations failed")
        finally:
            self._done()

    # ------------------------------------------------------------------ handling
    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            try:
                task()
            except BaseException:  # noqa: BLE001 - the pool must keep its size whatever a task raises
                _log.exception("a worker task failed")

    def _done(self) -> None:
        with self._lock:
            self._busy -= 1
            self._lock.notify_all()

    def _handle(self, message: Any, lease: _Lease) -> None:
        fields = {"MessageId": lease.message_id, "DequeueCount": lease.dequeue_count}
        if self._stopping.is_set():  # received ahead (prefetch) and not started: another worker gets it soon
            self._release_unstarted(lease)
            self._done()
            return
        lease.started = True
        try:
            try:
                request = decode_body(message.message_body)
            except Exception as exc:  # noqa: BLE001 - BodyDecodeError, RecursionError (absurd nesting), ...:
                # decoding is a function of the bytes alone, so redelivery can never make them readable
                self._count("poison")
                error = str(exc) if isinstance(exc, BodyDecodeError) else f"{type(exc).__name__}: {str(exc)[:200]}"
                _log.error("poison message deleted: the body is not a ROS request",
                           extra={"fields": {**fields, "error": error}})
                self._finish(lease, Action.DELETE)
                return
            try:
                outcome = handle_message(self.provider, request, self._reentry())
            except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt, CancelledError, SystemExit from a
                # handler: nothing was answered. Keep the message so that MNS redelivers it, and keep this thread.
                _log.error("handler interrupted; the message stays in the queue for redelivery",
                           extra={"fields": {**fields, "error": f"{type(exc).__name__}: {exc}"}}, exc_info=True)
                self._finish(lease, Action.KEEP)
                return
            action, reason = disposition(outcome.body, outcome.delivered, final=outcome.final,
                                         retry_after=outcome.retry_after)
            if action is Action.DEFER:
                _log.info(reason, extra={"fields": fields})
            elif outcome.body is None and outcome.error:
                self._count("poison")
                _log.error("message deleted: it cannot be answered",
                           extra={"fields": {**fields, "error": outcome.error}})
            elif action is Action.DELETE and outcome.final and not outcome.delivered:
                self._count("final")
                _log.error(reason, extra={"fields": {**fields, "error": outcome.error}})
            elif action is Action.KEEP:
                _log.warning(reason, extra={"fields": {**fields, "error": outcome.error}})
            self._finish(lease, action, outcome.retry_after)
        except BaseException:  # noqa: BLE001 - a bug (even SystemExit from a handler) must not end this thread
            # Otherwise the lease stays registered, the keeper extends it forever and the message is never
            # handled again. Keep the message so that MNS redelivers it.
            _log.exception("handling a message failed; it stays in the queue", extra={"fields": fields})
            self._finish(lease, Action.KEEP)
        finally:
            self._done()

    def _finish(self, lease: _Lease, action: Action, retry_after: float | None = None) -> None:
        from mns.mns_exception import MNSExceptionBase

        with lease.lock:  # waits for an extension in progress, whose new handle the delete needs
            lease.finished = True
            handle, lost = lease.receipt_handle, lease.lost
        with self._lock:
            self._leases.pop(id(lease), None)
        if action is Action.KEEP:
            self._count("kept")
            return
        if lost:
            _log.warning("message not deleted: its visibility lapsed while handling, MNS may deliver it again "
                         "(the idempotency store absorbs the duplicate)", extra={"fields": {"MessageId": lease.message_id}})
            return
        if action is Action.DEFER:
            seconds = defer_visibility(retry_after if retry_after is not None else self.visibility_timeout)
            try:
                self._queue().change_message_visibility(handle, seconds)
                self._count("deferred")
            except MNSExceptionBase as exc:  # it still comes back when its current visibility ends
                _log.warning("deferring a message failed; MNS delivers it again when its visibility ends",
                             extra={"fields": {"MessageId": lease.message_id, "error": f"{exc.type}: {exc.message}"}})
            return
        self._deletes.put((lease, handle))

    def _delete_loop(self) -> None:
        """Send the deletes of handled messages in batches: one BatchDeleteMessage (at most 16 handles)
        for all that finished since the last one, instead of one round trip per message."""
        closing = False
        while not closing:
            first = self._deletes.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    item = self._deletes.get_nowait()
                except queue_module.Empty:
                    break
                if item is None:
                    closing = True
                    break
                batch.append(item)
            self._delete_batch(batch)
        while True:  # a stop: what is left (normally nothing) is still deleted
            try:
                item = self._deletes.get_nowait()
            except queue_module.Empty:
                return
            if item is not None:
                self._delete_batch([item])

    def _delete_batch(self, batch: list[tuple[_Lease, str]]) -> None:
        from mns.mns_exception import MNSExceptionBase, MNSServerException

        try:
            if len(batch) == 1:
                self._queue().delete_message(batch[0][1])
            else:
                self._queue().batch_delete_message([handle for _, handle in batch])
            self._count("deleted", len(batch))
            return
        except MNSServerException as exc:
            failed = {str(e.get("ReceiptHandle")): e for e in (exc.sub_errors or [])}
            if not failed:  # the whole call failed (not per handle)
                failed = {handle: {"ErrorCode": exc.type, "ErrorMessage": exc.message} for _, handle in batch}
        except MNSExceptionBase as exc:
            failed = {handle: {"ErrorCode": exc.type, "ErrorMessage": exc.message} for _, handle in batch}
        self._count("deleted", sum(1 for _, handle in batch if handle not in failed))
        for lease, handle in batch:
            if handle in failed:
                error = failed[handle]
                _log.warning("deleting a handled message failed; MNS may deliver it again", extra={"fields": {
                    "MessageId": lease.message_id, "error": f"{error.get('ErrorCode')}: {error.get('ErrorMessage')}"}})

    def _release_unstarted(self, lease: _Lease) -> None:
        """A stopping worker hands a message it received ahead back to the queue, visible again soon."""
        from mns.mns_exception import MNSExceptionBase

        with lease.lock:
            lease.finished = True
            handle, lost = lease.receipt_handle, lease.lost
        with self._lock:
            self._leases.pop(id(lease), None)
        if lost:
            return
        try:
            self._queue().change_message_visibility(handle, RELEASE_VISIBILITY)
            self._count("released")
        except MNSExceptionBase as exc:
            _log.warning("could not release a message while stopping", extra={"fields": {
                "MessageId": lease.message_id, "error": exc.type}})

    def _release_in_flight(self) -> int:
        """When the grace ends: make each message still being handled visible again soon (instead of
        after a full visibility period) and stop extending it; returns how many were released."""
        from mns.mns_exception import MNSExceptionBase

        with self._lock:
            leases = list(self._leases.values())
        released = 0
        for lease in leases:
            with lease.lock:
                if lease.finished or lease.lost:
                    continue
                try:
                    changed = self._queue().change_message_visibility(lease.receipt_handle, RELEASE_VISIBILITY)
                except MNSExceptionBase as exc:
                    _log.warning("could not release a message still in flight; MNS redelivers it when its "
                                 "visibility ends", extra={"fields": {"MessageId": lease.message_id, "error": exc.type}})
                    continue
                lease.receipt_handle = changed.receipt_handle  # a handler finishing now may still delete it
                lease.next_extend_at = math.inf
                released += 1
        self._count("released", released)
        return released

    # ------------------------------------------------------------------ visibility
    def _keep_visible(self) -> None:
        while not self._keeper_stop.is_set():
            now = time.monotonic()
            with self._lock:
                leases = list(self._leases.values())
            for lease in leases:
                if lease.next_extend_at <= now:
                    self._extend(lease)
            with self._lock:
                upcoming = [lease.next_extend_at for lease in self._leases.values() if not lease.lost]
            wait = min(upcoming, default=now + 1.0) - time.monotonic()
            self._keeper_wake.wait(min(1.0, max(0.02, wait)))
            self._keeper_wake.clear()

    def _extend(self, lease: _Lease) -> None:
        from mns.mns_exception import MNSExceptionBase, MNSServerException

        with lease.lock:
            if lease.finished or lease.lost:
                return
            try:
                changed = self._queue().change_message_visibility(lease.receipt_handle, self.visibility_timeout)
            except MNSServerException as exc:
                if exc.type in LOST_HANDLE_ERRORS:
                    lease.lost = True
                    self._count("lost")
                    _log.warning("message visibility lapsed before it could be extended",
                                 extra={"fields": {"MessageId": lease.message_id, "error": exc.type}})
                    return
                lease.next_extend_at = time.monotonic() + min(1.0, self.extend_every / 4.0)
                _log.warning("extending message visibility failed; retrying", extra={"fields": {
                    "MessageId": lease.message_id, "error": f"{exc.type}: {exc.message}"}})
                return
            except MNSExceptionBase as exc:
                lease.next_extend_at = time.monotonic() + min(1.0, self.extend_every / 4.0)
                _log.warning("extending message visibility failed; retrying", extra={"fields": {
                    "MessageId": lease.message_id, "error": f"{exc.type}: {exc.message}"}})
                return
            lease.receipt_handle = changed.receipt_handle
            lease.next_extend_at = time.monotonic() + self.extend_every
        self._count("extensions")
