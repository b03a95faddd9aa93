"""The Function Compute transport: one invocation, whatever it carries: a direct request, a
re-entry, a time trigger, or MNS topic and queue trigger envelopes (one message or a batch).

Both `Provider.fc_handler` and the lazy entry that failed to import the provider go through
`answer_invocation`, so every envelope is unwrapped and answered the same way in every mode.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Callable

from ..invocation import run_in_invocation
from ..logs import get_logger
from ..runtime import Outcome

if TYPE_CHECKING:
    from .hosted import HostedProvider

_log = get_logger("fc")

#: Operations one timer invocation resumes at most.
RECOVERY_BATCH = 20
#: The summary's Status when nothing was sent now (an operation continuing, or a duplicate).
PENDING = "PENDING"


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


def answer_invocation(
    event: Any,
    process_one: Callable[[Any], Outcome],
    recover: Callable[[], int] | None = None,
) -> str:
    """Unwrap the event, answer each request in it with `process_one`, and return the JSON summary."""
    from ..envelopes import SOURCE_DIRECT, SOURCE_UNKNOWN, unwrap_event

    envelopes = unwrap_event(event)
    if len(envelopes) == 1 and is_timer_event(envelopes[0].body):
        if recover is None:
            return json.dumps({"Recovered": 0})
        # A time trigger on the provider function: finish operations nothing else is driving
        # (their instance died, or their deadline passed with no traffic).
        return json.dumps({"Recovered": recover()})
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
    trigger through `provider.recover`, all under the invocation's clock (`started`, monotonic)."""
    invoked = time.monotonic() if started is None else started
    # crhelper.invocation.fc_context() answers `context` for the handlers it runs.
    return run_in_invocation(context, lambda: answer_invocation(
        event,
        lambda body: provider.process(body, context, started=invoked),
        lambda: provider.recover(limit=RECOVERY_BATCH, context=context, started=invoked),
    ))
