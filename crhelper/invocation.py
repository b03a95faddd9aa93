"""The Function Compute `context` of the invocation being handled, for the code it runs.

A handler is given the request, not FC's `context`; a provider that calls cloud APIs with the
function role's STS credentials (refreshed per invocation) or needs the account id reads it here:
`crhelper.cloud.credentials.resolve(fc_context())`. The FC transport sets it for the whole
invocation (requests, re-entries, the time trigger's recovery); it is None elsewhere (the local
emulator's in-process runs, a handler called directly). A contextvar: the handler threads and the
recovery threads run in copies of the invocation's context, so they see it; nothing else can.
"""

from __future__ import annotations

import contextvars
from typing import Callable, TypeVar

T = TypeVar("T")
_current: contextvars.ContextVar[object | None] = contextvars.ContextVar("crhelper_fc_context", default=None)


def fc_context() -> object | None:
    """The FC context of the invocation this code runs in; None outside one."""
    return _current.get()


def run_in_invocation(context: object | None, work: Callable[[], T]) -> T:
    """`work()` in a copy of the current contextvars where fc_context() answers `context` (the FC
    transport runs each invocation so); the caller's own context is left as it was."""
    copied = contextvars.copy_context()
    copied.run(_current.set, context)
    return copied.run(work)
