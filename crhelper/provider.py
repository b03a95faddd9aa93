"""The object a provider author creates: decorators to register handlers, entry points to run them."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from .config import ConfigError, Settings
from .constants import CREATE, DELETE, UPDATE
from .errors import RequestError
from .logs import configure, get_logger
from .registry import Registry
from .request import decode_event, parse_request
from .runtime import (
    Answer,
    Outcome,
    answer_in_band,
    failed_answer,
    guard_margin,
    handle_event,
    invocation_deadline,
    send,
    send_failed,
)
from .services import ProviderServices
from .store.budget import store_deadline
from .transports.fc import NamedTimerHook, TimerHook, handle_invocation

if TYPE_CHECKING:
    from .lifecycle import Lifecycle
    from .reentry import Reentry
    from .store import Store

F = TypeVar("F", bound=Callable[..., Any])
_log = get_logger("provider")


class Provider:
    """Hosts any number of resource types. Handlers return values; the provider owns the protocol.

    `default_type` routes the generic `ALIYUN::ROS::CustomResource` type (also `CRHELPER_DEFAULT_TYPE`).
    `settings` fixes the configuration; by default it is read from the environment on each request.
    """

    def __init__(
        self,
        default_type: str | None = None,
        *,
        settings: Settings | None = None,
        store: "Store | str | None" = None,
    ) -> None:
        self.registry = Registry()
        self.default_type = default_type
        self._settings = settings
        self._services = ProviderServices(self.registry, store, self.handle)
        self._timer_hooks: list[NamedTimerHook] = []

    def set_deadline(self, resource_type: str, seconds: float) -> None:
        """The longest a long-running operation of this type may take (keep it below the template's Timeout)."""
        self.registry.set_options(resource_type, deadline=seconds)

    def on_timeout(self, resource_type: str) -> Callable[[F], F]:
        """`@provider.on_timeout("Custom::X")` on `def cleanup(request) -> None`: runs when the deadline passes."""

        def decorator(func: F) -> F:
            self.registry.set_options(resource_type, on_timeout=func)
            return func

        return decorator

    def on_timer(self, func: TimerHook | None = None, *, name: str | None = None) -> Any:
        """Periodic work on the function's time trigger: `@provider.on_timer` (or
        `provider.on_timer(func, name=...)`) on `def hook(deadline: float) -> Any`.

        A time-trigger invocation first resumes stalled operations, then calls each hook in the
        order registered with `deadline`, the time.monotonic() by which it must return (the
        invocation's remaining time less a margin). What a hook returns (JSON-able) is reported under
        its name in the invocation's summary; a hook that raises is logged naming it and reported as
        {"Error": ...}, and the next hook still runs. Registering the same name again replaces it."""

        def decorator(hook: TimerHook) -> TimerHook:
            label = name or getattr(hook, "__qualname__", None) or repr(hook)
            self._timer_hooks[:] = [entry for entry in self._timer_hooks if entry[0] != label]
            self._timer_hooks.append((label, hook))
            return hook

        return decorator(func) if func is not None else decorator

    @property
    def timer_hooks(self) -> tuple[NamedTimerHook, ...]:
        """The hooks `on_timer` registered, (name, hook) in order."""
        return tuple(self._timer_hooks)

    def _register(self, resource_type: str, operation: str) -> Callable[[F], F]:
        def decorator(func: F) -> F:
            self.registry.add(resource_type, operation, func)
            return func

        return decorator

    def create(self, resource_type: str) -> Callable[[F], F]:
        """`@provider.create("Custom::X")` on `def f(props, request) -> Result | None`."""
        return self._register(resource_type, CREATE)

    def update(self, resource_type: str) -> Callable[[F], F]:
        """`@provider.update("Custom::X")` on `def f(props, old, request) -> Result | None`."""
        return self._register(resource_type, UPDATE)

    def delete(self, resource_type: str) -> Callable[[F], F]:
        """`@provider.delete("Custom::X")` on `def f(props, request) -> None`."""
        return self._register(resource_type, DELETE)

    @property
    def types(self) -> list[str]:
        return self.registry.types

    def settings(self) -> Settings:
        settings = self._settings or Settings.from_env()
        if self.default_type and not settings.default_type:
            settings = dataclasses.replace(settings, default_type=self.default_type)
        return settings

    def _open(self, event: Any) -> "tuple[Settings, None] | tuple[Settings, str]":
        """Every entry's opening: logging on, the settings read. A misconfiguration comes back as
        the Reason to answer with (the stack must not wait for a typo in an env var)."""
        configure()
        try:
            return self.settings(), None
        except ConfigError as exc:
            return Settings(), f"provider misconfigured: {exc}"

    def handle(self, event: Any, context: object | None = None, *, started: float | None = None) -> dict[str, Any] | None:
        """Run the whole protocol for one event; returns the response body sent (None if none could be).
        `started` (time.monotonic()) is when the invocation began, for batches sharing one FC deadline."""
        return self.process(event, context, started=started).body

    def accept(self, event: Any) -> str | None:
        """Store a request before acknowledging it (a server that handles it later in a pool): if the
        process dies before handling it, recovery runs it. Returns the id to pass to `process` as
        `accepted` (or to `discard`), or None when there is nothing to store (no store, not a request, or a duplicate already
        claimed elsewhere: `process` answers it as one)."""
        settings, problem = self._open(event)
        if problem:
            return None  # process() answers it precisely
        try:
            lifecycle = self._services.lifecycle(settings)
            if lifecycle is None:
                return None
            raw = decode_event(event)
            return lifecycle.accept(parse_request(raw), raw)
        except RequestError:
            return None  # process() answers it precisely
        except Exception as exc:  # an unusable store: process() answers "state store unavailable"
            _log.warning("could not store an accepted request", extra={"fields": {"error": str(exc)}})
            return None

    def discard(self, accepted: str) -> None:
        """Forget a request stored by `accept` that will not be handled here after all."""
        lifecycle = self._services.lifecycle(self.settings())
        if lifecycle is not None:
            lifecycle.discard(accepted)

    def process(
        self, event: Any, context: object | None = None, *, started: float | None = None, reentry: "Reentry | None" = None,
        accepted: str | None = None,
    ) -> Outcome:
        """Like handle(), but also says whether the response was delivered, for transports that must
        decide whether to acknowledge their message (a queue worker keeps it when delivery failed).
        `reentry` overrides how a long-running operation is continued (a queue worker continues it
        through its own queue); `accepted` is what `accept` returned for this event."""
        invoked = time.monotonic() if started is None else started
        settings, problem = self._open(event)
        if problem:
            return send_failed(event, problem, settings)
        deadline = invocation_deadline(context, invoked)
        margin = guard_margin(max(0.0, deadline - invoked), settings.timeout_margin) if deadline is not None else 0.0
        try:
            with store_deadline(deadline - margin if deadline is not None else None):
                services = self._services.for_request(settings, context, reentry)
        except Exception as exc:  # a bad CRHELPER_STORE or an unreachable store: answer, do not go silent
            return send_failed(event, _store_unavailable(exc), settings)
        result, report = handle_event(self.registry, event, settings, context, services, started=invoked, accepted=accepted)
        self._services.maybe_recover(settings, services, context, invoked)
        return Outcome.of(result, report)

    def give_up(self, event: Any, reason: str) -> Outcome:
        """Answer FAILED (`reason`) for a request whose handler cannot finish here (a server shutting
        down, an interrupted thread), exactly once: recorded as its answer first, so the handler
        finishing later, a duplicate or a recovery sends nothing more. Long-running operations that
        were already re-entered are left to recovery (the body is None then)."""
        settings, _ = self._open(event)
        lifecycle: Lifecycle | None
        try:
            lifecycle = self._services.lifecycle(settings)
            request = parse_request(event if isinstance(event, dict) else {})
        except Exception:  # not a request we can parse, or no usable store: answer as best we can
            lifecycle = None
        if lifecycle is None:
            return send_failed(event, reason, settings)
        try:
            verdict = lifecycle.give_up(request, reason)
        except Exception as exc:  # the answer matters more than its record
            _log.error("could not record the FAILED answer; sending it anyway", extra={"fields": {"error": str(exc)}})
            return send_failed(event, reason, settings)
        if verdict is None:
            return Outcome(None, False)
        reply = Answer.of(verdict)
        return Outcome.of(reply, send(reply, settings))

    def recover(
        self, reentry: "Reentry | None" = None, limit: int = 5, context: object | None = None,
        started: float | None = None,
    ) -> int:
        """Resume operations whose process died mid-step (their step lease ran out) or whose deadline
        passed while nothing ran; returns how many were answered. With an FC `context`, the steps run
        under its deadline and continue through FC."""
        return self._services.recover(self.settings(), reentry, limit, context, started)

    def close(self) -> None:
        """Stop the in-process scheduler and close the store (tests, servers shutting down)."""
        self._services.close()

    def respond(self, event: Any, *, within: float | None = None) -> dict[str, Any] | None:
        """The response body without sending it, for transports that reply in-band (`web[sync]`).
        With `within` seconds, a handler still running then is answered FAILED "timed out"."""
        settings, problem = self._open(event)
        if problem:
            return failed_answer(event, problem).body
        deadline = time.monotonic() + within if within is not None else None
        try:
            lifecycle = self._services.lifecycle(settings)
        except Exception as exc:
            return failed_answer(event, _store_unavailable(exc)).body
        return answer_in_band(self.registry, event, settings, deadline=deadline, lifecycle=lifecycle).body

    def fc_handler(self, event: Any, context: object | None = None, *, started: float | None = None) -> str:
        """Function Compute entry: `handler = provider.fc_handler` (a Provider is also callable).

        Accepts a direct invocation (the event is the request) and MNS topic and queue triggers (one or a
        batch of messages, each answered on its own). Answers go to the ResponseURLs; the return value
        (a JSON summary) only helps synchronous callers and logs. `started` (time.monotonic()) is when
        the invocation began, if earlier than this call (the lazy entry imports the provider first).
        """
        return handle_invocation(self, event, context, started)

    __call__ = fc_handler


def _store_unavailable(exc: BaseException) -> str:
    """The Reason for a store that cannot be opened or reached, logged once here."""
    _log.error("state store unavailable", extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}})
    return f"state store unavailable: {exc}"
