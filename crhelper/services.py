"""The long-lived parts a provider builds on first use: the store, the lifecycle, the re-entry strategy."""

from __future__ import annotations

import functools
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from .config import Settings
from .logs import get_logger
from .paths import HOME_ENV, home
from .registry import Registry
from .runtime import (
    Services,
    function_timeout,
    guard_margin,
    guarded_runner,
    invocation_deadline,
    run_side_by_side,
    send_resumed,
)
from .store.budget import store_deadline

if TYPE_CHECKING:
    from .lifecycle import Lifecycle
    from .reentry import LocalScheduler, Reentry
    from .store import Store

#: On Function Compute with no CRHELPER_STORE: private to one instance (one process), so only duplicates
#: that reach the same instance are absorbed, and long-running operations are refused (they need a
#: shared store). A dict in the process (`crhelper.store.memory`): a file in /tmp would be just as
#: private, and sqlite costs a cold start about 10 ms more.
FC_INSTANCE_STORE = "memory://"
#: Store URLs private to one process: on Function Compute, as the default above.
PROCESS_PRIVATE_STORES = frozenset({"memory://", "sqlite://:memory:"})
DEFAULT_LOCAL_STEP_LEASE = 60.0
#: Stands for "the store object given in code" where a URL is expected.
GIVEN_STORE = "<given store object>"
RECOVERY_INTERVAL = 60.0
#: Added to the function timeout when it sets the step lease: covers clock skew between instances.
FC_LEASE_SLACK = 5.0

_log = get_logger("services")


@functools.lru_cache(maxsize=16)
def _default_url(state_home: str) -> str:
    """The per-user store URL; resolving the home directory touches the disk, so once per home."""
    from .store.url import default_url

    return default_url({HOME_ENV: state_home})


class ProviderServices:
    """Owned by one Provider; built lazily so that plain providers never import sqlite or SDKs early.

    Given what it needs (the handlers, the configured store, how to handle a re-entry payload), so
    it never reaches back into the provider."""

    def __init__(self, registry: Registry, store: "Store | str | None", handle: Callable[[bytes], Any]) -> None:
        self._registry = registry
        self._configured_store = store
        self._handle = handle
        self._lock = threading.Lock()
        self._store: Store | None = None
        self._store_url: str | None = None
        self._lifecycle: Lifecycle | None = None
        self._scheduler: LocalScheduler | None = None
        self._last_recovery = 0.0

    def _given_store(self) -> "Store | None":
        """A store object passed to Provider(store=...): used as is, and owned (closed) by the caller."""
        explicit = self._configured_store
        return None if explicit is None or isinstance(explicit, str) else explicit

    def _url(self, settings: Settings) -> tuple[str, bool]:
        """The store URL and whether it is the instance-private FC default."""
        explicit = self._configured_store
        if self._given_store() is not None:
            return GIVEN_STORE, False
        if isinstance(explicit, str) or settings.store_url:
            # Given explicitly: a process-private store on FC is what the default is, and is refused
            # long operations the same way (a re-entry landing on another instance would find nothing).
            url = explicit if isinstance(explicit, str) else str(settings.store_url)
            return url, settings.on_function_compute and url.strip().lower() in PROCESS_PRIVATE_STORES
        if settings.on_function_compute:
            return FC_INSTANCE_STORE, True
        return _default_url(str(home())), False

    def lifecycle(self, settings: Settings) -> "Lifecycle | None":
        url, _ = self._url(settings)
        if url.strip().lower() == "none":
            return None
        with self._lock:
            if self._lifecycle is None or self._store_url != url:
                from .lifecycle import Lifecycle
                from .store import open_store

                given = self._given_store()
                store = given if given is not None else open_store(url)
                self._store, self._store_url = store, url
                lease = settings.step_lease or DEFAULT_LOCAL_STEP_LEASE
                self._lifecycle = Lifecycle(
                    self._registry, store, default_type=settings.default_type,
                    step_lease=lease, record_ttl=settings.record_ttl,
                )
            return self._lifecycle

    def reentry(self, settings: Settings, context: object | None, lifecycle: "Lifecycle") -> "Reentry":
        from .reentry import UnavailableReentry

        mode = settings.reentry
        if mode == "none":
            return UnavailableReentry("CRHELPER_REENTRY is none")
        if mode == "mns":
            from .reentry_mns import MnsQueueReentry

            try:
                return MnsQueueReentry.from_env()
            except ValueError as exc:
                return UnavailableReentry(str(exc))
        on_fc = context is not None and getattr(context, "function", None) is not None
        if mode == "fc" or (mode == "auto" and on_fc):
            if self._url(settings)[1]:
                return UnavailableReentry(
                    "long-running operations on Function Compute need a store shared by all instances: "
                    "set CRHELPER_STORE=s3://<bucket>/<prefix>?endpoint=<OSS endpoint>"
                )
            from .reentry_fc3 import fc_reentry  # FC 3.0 when the context has no service, else FC 2.0

            try:
                return fc_reentry(context or object())
            except RuntimeError as exc:
                return UnavailableReentry(str(exc))
        return self._local_scheduler(settings)

    def _local_scheduler(self, settings: Settings) -> "LocalScheduler":
        from .reentry import LocalScheduler

        with self._lock:
            if self._scheduler is None:
                self._scheduler = LocalScheduler(
                    lambda cid: self._resume_local(cid, settings), lambda: self._recover_local(settings),
                    recover_every=max(1.0, min(30.0, (settings.step_lease or DEFAULT_LOCAL_STEP_LEASE) / 2)),
                )
            return self._scheduler

    def _resume_local(self, continuation_id: str, settings: Settings) -> None:
        from .reentry import continuation_payload

        self._handle(continuation_payload(continuation_id))

    def _recover_local(self, settings: Settings) -> None:
        """The scheduler's periodic pass, over the store this provider has been using: never one
        `lifecycle()` would open now (with CRHELPER_HOME changed since, that is another provider's
        store, whose orphans this provider's handlers must not answer)."""
        with self._lock:
            scheduler, lifecycle = self._scheduler, self._lifecycle
        if scheduler is not None and lifecycle is not None:
            self.recover(settings, scheduler, limit=50, lifecycle=lifecycle)

    def for_request(self, settings: Settings, context: object | None, reentry: "Reentry | None" = None) -> Services:
        lifecycle = self.lifecycle(settings)
        if lifecycle is None:
            return Services()
        timeout = function_timeout(context)
        if timeout:
            # A step may legally run until the function timeout; a shorter lease would let a
            # duplicate or a recovery on another instance run the same step at the same time.
            with self._lock:
                lifecycle.step_lease = max(lifecycle.step_lease, timeout + FC_LEASE_SLACK)
        return Services(lifecycle, reentry or self.reentry(settings, context, lifecycle))

    def recover(
        self,
        settings: Settings,
        reentry: "Reentry | None",
        limit: int,
        context: Any = None,
        invoked: float | None = None,
        lifecycle: "Lifecycle | None" = None,
    ) -> int:
        """Resume operations whose process died, within this invocation's time when it has a deadline
        (each recovered step runs under the same guard as a request); returns how many finished."""
        lifecycle = lifecycle or self.lifecycle(settings)
        if lifecycle is None:
            return 0
        started = invoked if invoked is not None else time.monotonic()
        deadline = invocation_deadline(context, started)
        margin = guard_margin(max(0.0, deadline - started), settings.timeout_margin) if deadline is not None else 0.0
        if deadline is not None and deadline - time.monotonic() < 4 * margin:
            return 0  # too little time left to run a step and answer; a later invocation will
        run = guarded_runner(self._registry, settings, deadline, margin,
                             prepare=lifecycle.prepare, on_abandoned=lifecycle.abandoned)
        reentry = reentry or self.reentry(settings, context, lifecycle)
        # A recovered step must not start when it could not finish and answer before this
        # invocation's deadline: it is left for a later pass instead of being answered FAILED.
        until = deadline - 4 * margin if deadline is not None else None
        send_by = deadline - 0.2 if deadline is not None else None

        def one(operation_id: str) -> int:
            if until is not None and time.monotonic() >= until:
                return 0
            with store_deadline(deadline - margin if deadline is not None else None):
                verdict = lifecycle.resume_safely(operation_id, run, reentry)
            if verdict is None or verdict.body is None:
                return 0
            send_resumed([verdict], settings, send_by)
            return 1

        # Side by side: one long step must not hold up the others (a server restarted after a
        # crash resumes everything the crash left at once).
        return run_side_by_side([functools.partial(one, cid) for cid in lifecycle.recoverable(limit)], deadline)

    def maybe_recover(self, settings: Settings, services: Services, context: Any, invoked: float) -> None:
        """On Function Compute, let any later invocation finish operations whose instance died."""
        if services.lifecycle is None or services.reentry is None or services.reentry.name != "fc":
            return
        now = time.monotonic()
        if now - self._last_recovery < RECOVERY_INTERVAL:
            return
        self._last_recovery = now
        try:
            self.recover(settings, services.reentry, 5, context, invoked)
        except Exception:
            _log.exception("recovery of stalled operations failed")

    def close(self) -> None:
        with self._lock:
            scheduler = self._scheduler
        if scheduler is not None:
            # Outside the lock: stop() waits for running jobs, and each job takes the lock on its way
            # in (for_request). A job still starting reuses this scheduler; its timer just never fires.
            scheduler.stop()
        with self._lock:
            if self._scheduler is scheduler:
                self._scheduler = None
            if self._store is not None and self._given_store() is None:
                self._store.close()
            self._store = None
            self._lifecycle = None
