"""A provider that writes to every stream a user's provider does, for the provider-log stack tests:
a print, a warning on its own logger, a failing handler's traceback, a print of its whole event
(ResponseURLs included), and a Create taking several InProgress steps."""

from __future__ import annotations

import json
import logging
import sys

from crhelper import InProgress, Provider, Request, Result

provider = Provider()
log = logging.getLogger("chatty")
print("chatty provider loaded", flush=True)  # at import: in the emulator's process, or each FC worker


@provider.create("Custom::Chatty")
def create(props: dict, request: Request) -> "Result | InProgress":
    name = props.get("Name", request.logical_resource_id)
    print(f"print from {name}", flush=True)
    sys.stderr.write(f"stderr from {name}\n")
    log.warning("warned %s", name)
    if props.get("PrintEvent"):
        print("event: " + json.dumps({"RequestId": request.request_id, "ResponseURL": request.response_url,
                                      "IntranetResponseURL": request.intranet_response_url}), flush=True)
    if props.get("Fail"):
        raise RuntimeError(f"kaboom in {name}")
    step = (request.state or 0) + 1
    if step < int(props.get("Polls", 1)):
        print(f"step {step} of {props['Polls']}", flush=True)
        return InProgress(state=step, delay=float(props.get("Delay", 0.2)))
    return Result(physical_id=f"chatty-{name}", data={"Steps": step})


@provider.delete("Custom::Chatty")
def delete(props: dict, request: Request) -> None:
    return None
