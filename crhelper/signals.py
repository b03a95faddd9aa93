""""Run until signalled", written once: servers and workers stop on SIGTERM/SIGINT the same way."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Any, Callable, Iterator

#: What ends a foreground server: `kill`, Ctrl-C.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def on_signals(
    handler: Callable[[int, FrameType | None], Any], signals: tuple[signal.Signals, ...] = STOP_SIGNALS
) -> Iterator[None]:
    """Install `handler` for `signals` while the block runs, then restore what was there.
    Off the main thread (where Python cannot install handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def stop_requested(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> Iterator[threading.Event]:
    """`with stop_requested() as stop: ...; stop.wait()`: the event is set by the first signal."""
    event = threading.Event()
    with on_signals(lambda signum, frame: event.set(), signals):
        yield event


def wait_for_stop(signals: tuple[signal.Signals, ...] = STOP_SIGNALS, poll: float = 0.5) -> None:
    """Block until one of `signals` arrives (polling, so Python runs the handler promptly)."""
    with stop_requested(signals) as stop:
        while not stop.wait(poll):
            pass
