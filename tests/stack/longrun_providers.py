"""Providers whose Create takes several steps (`InProgress`), for the long-operation stack tests."""

from __future__ import annotations

import os

from crhelper import InProgress, Provider, Result

provider = Provider()


@provider.create("Custom::Slow")
def create(props: dict, request) -> "Result | InProgress":
    step = (request.state or 0) + 1
    print(f"step {step} of {props['Polls']}", flush=True)
    if step < int(props["Polls"]):
        return InProgress(state=step, delay=float(props.get("Delay", 0.2)))
    return Result(physical_id=f"slow-{request.logical_resource_id}",
                  data={"Steps": step, "Attempt": request.attempt, "Marker": os.environ.get("LONGRUN_MARKER", "")})


@provider.update("Custom::Slow")
def update(props: dict, old: dict, request) -> Result:
    return Result(data={"Steps": 0, "Attempt": 0, "Marker": ""})


@provider.delete("Custom::Slow")
def delete(props: dict, request) -> None:
    return None
