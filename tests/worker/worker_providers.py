"""Providers loaded by `crhelper worker` subprocesses in the worker tests."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from crhelper import Provider, Result

provider = Provider()


@provider.create("Custom::Slow")
def create(props: dict, request: Any) -> Result:
    """Marks that it started (so a test can signal the worker mid-handler), then works for a while."""
    marker = props.get("Marker")
    if marker:
        Path(marker).write_text(request.request_id, encoding="utf-8")
    time.sleep(float(props.get("Seconds", 1)))
    return Result(physical_id="slow-1", data={"Slept": props.get("Seconds", 1)})


@provider.create("Custom::Steps")
def create_steps(props: dict, request: Any) -> Any:
    """Two polls; the second hangs the first time (marker absent) so a test can SIGKILL the worker mid-step."""
    from crhelper import InProgress

    if request.attempt == 0:
        return InProgress(state={"step": 1}, delay=1)
    marker = Path(props["Marker"])
    if not marker.exists():
        marker.write_text("hanging", encoding="utf-8")
        time.sleep(60)
    return Result(physical_id="steps-1", data={"Attempt": request.attempt, "State": request.state["step"]})
