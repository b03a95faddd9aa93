"""Handlers the local FC tests register; imported inside worker processes."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

_initialized_with: str | None = None


def echo(event: bytes, context: Any) -> bytes:
    return event


def returns_str(event: bytes, context: Any) -> str:
    return "héllo"


def returns_dict(event: bytes, context: Any) -> dict[str, Any]:
    return {"answer": 42, "items": [1, 2]}


def returns_none(event: bytes, context: Any) -> None:
    return None


def returns_unserializable(event: bytes, context: Any) -> object:
    return object()


def describe(event: bytes, context: Any) -> dict[str, Any]:
    """Report the event type and every context field the tests check."""
    wanted = json.loads(event or b"{}").get("env", [])
    return {
        "event_type": type(event).__name__,
        "request_id": context.request_id,
        "account_id": context.account_id,
        "region": context.region,
        "function": {"name": context.function.name, "handler": context.function.handler,
                     "memory": context.function.memory, "timeout": context.function.timeout},
        "service": {"name": context.service.name, "qualifier": context.service.qualifier,
                    "version_id": context.service.version_id,
                    "log_project": context.service.log_project,
                    "log_store": context.service.log_store},
        "credentials": {"access_key_id": context.credentials.access_key_id,
                        "access_key_secret": context.credentials.access_key_secret,
                        "security_token": context.credentials.security_token},
        "deadline": context.deadline,
        "now": time.time(),
        "env": {name: os.environ.get(name) for name in wanted},
        "pid": os.getpid(),
    }


def boom(event: bytes, context: Any) -> None:
    raise ValueError("something is wrong")


def exits(event: bytes, context: Any) -> None:
    os._exit(3)


def sleeper(event: bytes, context: Any) -> str:
    """Write the worker pid, then sleep far beyond any test timeout."""
    args = json.loads(event)
    Path(args["pid_file"]).write_text(str(os.getpid()))
    time.sleep(args.get("seconds", 60))
    return "woke up"


def touch(event: bytes, context: Any) -> str:
    """Append one line per run so tests can count executions."""
    args = json.loads(event)
    with open(args["path"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"request_id": context.request_id, "time": time.time()}) + "\n")
    return "ok"


def fail_times(event: bytes, context: Any) -> int:
    """Fail the first `fail` runs (counted in a file), then succeed."""
    args = json.loads(event)
    counter = Path(args["counter"])
    count = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(count))
    if count <= args["fail"]:
        raise RuntimeError(f"failure {count}")
    return count


def noisy(event: bytes, context: Any) -> str:
    args = json.loads(event)
    for i in range(args["lines"]):
        print(f"line {i:05d} " + "x" * 40)
    context.logger.info("last words")
    return "done"


def self_invoke(event: bytes, context: Any) -> str:
    """Async-invoke another function with the context's STS credentials, like a re-entry."""
    import fc2

    args = json.loads(event)
    creds = context.credentials
    client = fc2.Client(endpoint=os.environ["CRHELPER_FC_ENDPOINT"],
                        accessKeyID=creds.access_key_id, accessKeySecret=creds.access_key_secret,
                        securityToken=creds.security_token)
    response = client.invoke_function(
        context.service.name, args["target"], payload=json.dumps(args["payload"]).encode(),
        headers={"x-fc-invocation-type": "Async", "x-fc-async-delay": str(args.get("delay", 0))})
    return response.headers["x-fc-request-id"]


def init(context: Any) -> None:
    global _initialized_with
    _initialized_with = context.request_id


def initialized(event: bytes, context: Any) -> str | None:
    return _initialized_with


def bad_init(context: Any) -> None:
    raise RuntimeError("initializer failed")
