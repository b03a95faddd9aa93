"""The Function Compute transport: one invocation, whatever it carries: a direct request, a
re-entry, a time trigger, or MNS topic and queue trigger envelopes (one message or a batch).

Both `Provider.fc_handler` and the lazy entry that failed to import the provider go through
`answer_invocation`, so every envelope is unwrapped and answered the same way in every mode.

A time-trigger invocation first resumes stalled operations (`recover`), then runs the provider's
timer hooks (`Provider.on_timer`) one after the other, each with a deadline taken from the
invocation's remaining time and each guarded: a hook that raises is a log line naming it, and the
summary (`{"Recovered": n, "Timers": {name: what it returned | {"Error": ...}}}`) says what each did.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..invocation import run_in_invocation
from ..logs import get_logger
from ..runtime import Outcome, guard_margin, invocation_deadline

if TYPE_CHECKING:
    from .hosted import HostedProvider

_log = get_logger("fc")

#: Operations one timer invocation resumes at most.
RECOVERY_BATCH = 20
#: The summary's Status when nothing was sent now (an operation continuing, or a duplicate).
PENDING = "PENDING"
#: How long the timer hooks of one invocation may take in all when the context gives no deadline
#: (no FC context: a test, `crhelper invoke`).
DEFAULT_TIMER_SECONDS = 60.0

#: A timer hook: called with the time.monotonic() by which it must have returned; what it returns
#: (JSON-able, None for nothing to say) goes into the invocation's summary under its name.
TimerHook = Callable[[float], Any]
#: (name, hook) as `Provider.on_timer` registers them.
NamedTimerHook = tuple[str, TimerHook]


def is_timer_event(body: object) -> bool:
    """Function Compute's time trigger sends {"triggerTime", "triggerName", "payload"}."""
    return isinstance(body, dict) and "triggerTime" in body and "triggerName" in body and "RequestType" not in body


def summary(outcome: Outcome) -> dict[str, Any]:
    """What an FC invocation returns: the body sent, or why there is none (for sync callers and logs)."""
    if outcome.body is not None:
        return outcome.body
    if outcome.error:
        return {"Status": "FAILED", "Reason": f"request could not be answered: {outcome.error}"}
    return {"Status": PENDING, "Reason": "nothing to send now (operation in progress, or a duplicate)"}


def run_timer_hooks(hooks: Sequence[NamedTimerHook], deadline: float,
                    clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Run each hook in turn with `deadline` (time.monotonic()); {name: its result, or
    {"Error": "Type: message"} when it raised (logged, naming the hook), or {"Skipped": why} when
    no time was left for it}. One hook failing never keeps the others from running."""
    done: dict[str, Any] = {}
    for name, hook in hooks:
        if clock() >= deadline:
            done[name] = {"Skipped": "no time left in this invocation"}
            _log.warning("timer hook skipped: no time left", extra={"fields": {"hook": name}})
            continue
        began = clock()
        try:
            done[name] = hook(deadline)
        except Exception as exc:  # noqa: BLE001 - a hook's failure is reported, never the invocation's
            _log.error(f"timer hook {name} failed", exc_info=True, extra={"fields": {
                "hook": name, "error": f"{type(exc).__name__}: {exc}"}})
            done[name] = {"Error": f"{type(exc).__name__}: {exc}"[:500]}
        _log.info(f"timer hook {name} ran", extra={"fields": {"hook": name, "seconds": round(clock() - began, 3)}})
    return done


def answer_timer(recover: Callable[[], int] | None, hooks: Sequence[NamedTimerHook], deadline: float) -> dict[str, Any]:
    """A time trigger on the provider function: first finish operations nothing else is driving
    (their instance died, or their deadline passed with no traffic), then the timer hooks."""
    recovered = 0
    summary_doc: dict[str, Any] = {}
    if recover is not None:
        try:
            recovered = recover()
        except Exception as exc:  # noqa: BLE001 - the hooks still run; the summary says what failed
            _log.error("recovery on the time trigger failed", exc_info=True,
                       extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}})
            summary_doc["RecoverError"] = f"{type(exc).__name__}: {exc}"[:500]
    summary_doc = {"Recovered": recovered, **summary_doc}
    if hooks:
        summary_doc["Timers"] = run_timer_hooks(hooks, deadline)
    return summary_doc


def answer_invocation(
    event: Any,
    process_one: Callable[[Any], Outcome],
    recover: Callable[[], int] | None = None,
    timers: Callable[[], dict[str, Any]] | None = None,
) -> str:
    """Unwrap the event, answer each request in it with `process_one`, and return the JSON summary.
    A time trigger runs `timers` (which recovers and runs the hooks) or else `recover` alone."""
    from ..envelopes import SOURCE_DIRECT, SOURCE_UNKNOWN, unwrap_event

    envelopes = unwrap_event(event)
    if len(envelopes) == 1 and is_timer_event(envelopes[0].body):
        if timers is not None:
            return json.dumps(timers(), default=str)
        return json.dumps(answer_timer(recover, (), 0.0))
    if len(envelopes) == 1 and envelopes[0].source in (SOURCE_DIRECT, SOURCE_UNKNOWN):
        # Not an MNS envelope: the request itself, a re-entry, or something malformed that the
        # runtime answers precisely (FAILED when it still carries a ResponseURL).
        single = envelopes[0]
        return json.dumps(summary(process_one(single.body if isinstance(single.body, dict) else event)))
    messages = []
    for envelope in envelopes:
        if not envelope.ok:
            _log.error("message cannot be decoded", extra={"fields": {
                "source": envelope.source, "MessageId": envelope.message_id, "error": envelope.error}})
            messages.append({"MessageId": envelope.message_id, "Error": envelope.error})
            continue
        messages.append({"MessageId": envelope.message_id, **summary(process_one(envelope.body))})
    return json.dumps({"Messages": messages})


def handle_invocation(provider: "HostedProvider", event: Any, context: object | None = None,
                      started: float | None = None) -> str:
    """`Provider.fc_handler`: each request in the invocation through `provider.process`, the time
    trigger through `provider.recover` and then the provider's timer hooks, all under the
    invocation's clock (`started`, monotonic)."""
    invoked = time.monotonic() if started is None else started

    def recover() -> int:
        return provider.recover(limit=RECOVERY_BATCH, context=context, started=invoked)

    def timers() -> dict[str, Any]:
        return answer_timer(recover, tuple(getattr(provider, "timer_hooks", ())), timer_deadline(context, invoked))

    # crhelper.invocation.fc_context() answers `context` for the handlers it runs.
    return run_in_invocation(context, lambda: answer_invocation(
        event, lambda body: provider.process(body, context, started=invoked), recover, timers))


def timer_deadline(context: object | None, started: float) -> float:
    """By when the timer hooks must be done: the invocation's deadline less the margin kept for
    returning, else DEFAULT_TIMER_SECONDS from `started`."""
    deadline = invocation_deadline(context, started)
    if deadline is None:
        return started + DEFAULT_TIMER_SECONDS
    return deadline - guard_margin(max(0.0, deadline - started), None)
