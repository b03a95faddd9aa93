"""Worker process: runs one invocation like FC's Python runtime, then exits.

Run as `python -m crhelper.local.fc_worker`. The job arrives as JSON on stdin. The outcome is
written as JSON to the original stdout, while fd 1 is pointed at stderr so everything the
handler prints (stdout, stderr, logging) lands in one log stream the parent captures.

A worker dies with the endpoint that started it (`die_with_parent`): the worker runs in its own
session, so nothing else would end it when the endpoint is SIGKILLed (a killed `crhelper stack`
run would leave providers running, and answering, a stack no one waits for).
"""
from __future__ import annotations

import base64
import ctypes
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable

from crhelper.local.fc_context import FCContext, build_context
from crhelper.local.fc_registry import split_handler

_LOG_FORMAT = "%(asctime)s %(request_id)s [%(levelname)s] %(message)s"

#: The endpoint's pid, set by the runner; the worker removes it from its environment at start.
PARENT_PID_ENV = "CRHELPER_FC_PARENT_PID"
_PR_SET_PDEATHSIG = 1
_ORPHAN_POLL_SECONDS = 0.5


def _set_parent_death_signal() -> bool:
    """Linux: have the kernel SIGKILL this process when its parent dies; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    """Fallback without prctl: poll the parent pid and kill this worker's process group when orphaned."""
    while os.getppid() == parent:
        time.sleep(_ORPHAN_POLL_SECONDS)
    if os.getpgrp() == os.getpid():  # our own group (the runner starts a new session): take the handler's children too
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def die_with_parent() -> None:
    """End this worker as soon as the endpoint that started it is gone, even by SIGKILL.

    The death signal is set in the child itself (no preexec_fn: unsafe with threads); checking
    the parent pid afterwards closes the race where the parent died before the prctl call.
    """
    expected = os.environ.pop(PARENT_PID_ENV, "")
    if not expected.isdigit():  # not started by ProcessRunner (e.g. by hand): leave it alone
        return
    parent = int(expected)
    armed = _set_parent_death_signal()
    if os.getppid() != parent:  # orphaned already: the signal was armed too late to fire
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), name="fc-worker-orphan-watch", daemon=True).start()


class _RequestIdFilter(logging.Filter):
    def __init__(self, request_id: str) -> None:
        super().__init__()
        self._request_id = request_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = self._request_id
        return True


def _configure_logging(request_id: str) -> logging.Logger:
    """FC's runtime log line: '<UTC time> <request id> [LEVEL] message'."""
    formatter = logging.Formatter(_LOG_FORMAT)
    formatter.converter = time.gmtime
    formatter.default_time_format = "%Y-%m-%dT%H:%M:%S"
    formatter.default_msec_format = "%s.%03dZ"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    handler.addFilter(_RequestIdFilter(request_id))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    return root


def _stack_trace(exc: BaseException) -> list[list[str]]:
    """FC's stackTrace: one [file, line, function, source] list per frame, runtime frames dropped."""
    frames = traceback.extract_tb(exc.__traceback__)
    return [[f'File "{f.filename}"', f"line {f.lineno}", f"in {f.name}", f.line or ""]
            for f in frames
            if f.filename != __file__ and not f.filename.startswith("<frozen")]


def _error(exc: BaseException, message: str | None = None) -> dict[str, Any]:
    return {"errorMessage": message if message is not None else str(exc),
            "errorType": type(exc).__name__, "stackTrace": _stack_trace(exc)}


class _FunctionError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["errorMessage"])
        self.error = error


def _resolve(spec: str) -> Callable[..., Any]:
    module_name, attr = split_handler(spec)
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001 - any import failure is a function error in FC
        raise _FunctionError(_error(exc, f"Unable to import module '{module_name}': {exc}")) from exc
    target = getattr(module, attr, None)
    if not callable(target):
        raise _FunctionError({"errorMessage": f"Handler '{attr}' is missing on module '{module_name}'",
                              "errorType": "HandlerNotFound", "stackTrace": []})
    return target


def encode_result(result: Any) -> bytes:
    """bytes pass through, str is UTF-8, None is empty, anything else is JSON."""
    if isinstance(result, (bytes, bytearray, memoryview)):
        return bytes(result)
    if isinstance(result, str):
        return result.encode("utf-8")
    if result is None:
        return b""
    return json.dumps(result).encode("utf-8")


def _invoke(job: dict[str, Any], context: FCContext) -> bytes:
    if job.get("initializer"):
        initializer = _resolve(job["initializer"])
        try:
            initializer(context)
        except BaseException as exc:  # noqa: BLE001
            raise _FunctionError(_error(exc)) from exc
    handler = _resolve(job["handler"])
    event = base64.b64decode(job["event"])
    try:
        return encode_result(handler(event, context))
    except BaseException as exc:  # noqa: BLE001 - SystemExit in a handler is a function error too
        raise _FunctionError(_error(exc)) from exc


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run one job; the outcome dict is what the parent decodes."""
    for path in reversed(job.get("sys_path", [])):
        if path not in sys.path:
            sys.path.insert(0, path)
    logger = _configure_logging(job["context"]["request_id"])
    context = build_context(job["context"], logger)
    try:
        body = _invoke(job, context)
    except _FunctionError as failure:
        return {"status": "error", "error": failure.error}
    return {"status": "success", "body": base64.b64encode(body).decode("ascii")}


def main() -> int:
    die_with_parent()
    job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    result_fd = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    outcome = run_job(job)
    sys.stdout.flush()
    sys.stderr.flush()
    with os.fdopen(result_fd, "wb") as out:
        out.write(json.dumps(outcome).encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
