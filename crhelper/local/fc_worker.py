"""Worker process: one Function Compute instance, running invocations one at a time as FC's Python
runtime does, and keeping its modules between them (a warm instance).

Run as `python -m crhelper.local.fc_worker`, or forked by `crhelper.local.fc_fork` (`serve`). Jobs
arrive as JSON lines on the job pipe (stdin when spawned), each outcome leaves as a JSON line on the
result pipe (the original stdout), while fd 1 and 2 both point at the log stream, so everything the
handler prints (stdout, stderr, logging) lands in the one stream the parent reads. After each job
the job's `log_marker` line closes that invocation's part of the stream. fd 0 becomes /dev/null: a
handler reading stdin must not eat the next job. The initializer runs once per instance (retried
by the next job while it fails). The instance ends at the end of its job pipe.

A worker dies with the endpoint that started it (`crhelper.local.processes.die_with_parent`, the
one-invocation lifetime): the worker runs in its own session, so nothing else would end it when
the endpoint is SIGKILLed (a killed `crhelper stack` run would leave providers running, and
answering, a stack no one waits for).
"""
from __future__ import annotations

import base64
import importlib
import json
import logging
import os
import sys
import time
import traceback
from typing import Any, Callable

from crhelper.local.fc_context import FCContext, build_context
from crhelper.local.fc_registry import split_handler
from crhelper.local.processes import PARENT_PID_ENV, die_with_parent

#: PARENT_PID_ENV stays importable from here: stand-in endpoints (tests) set it to start a worker by hand.
__all__ = ["PARENT_PID_ENV", "encode_result", "main", "run_job", "serve"]

_LOG_FORMAT = "%(asctime)s %(request_id)s [%(levelname)s] %(message)s"


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


#: Initializers that have run (successfully) in this instance.
_initialized: set[str] = set()


def _invoke(job: dict[str, Any], context: FCContext) -> bytes:
    name = job.get("initializer")
    if name and name not in _initialized:
        initializer = _resolve(name)
        try:
            initializer(context)
        except BaseException as exc:  # noqa: BLE001
            raise _FunctionError(_error(exc)) from exc
        _initialized.add(name)
    handler = _resolve(job["handler"])
    event = base64.b64decode(job["event"])
    try:
        return encode_result(handler(event, context))
    except BaseException as exc:  # noqa: BLE001 - SystemExit in a handler is a function error too
        raise _FunctionError(_error(exc)) from exc


def prefer_packaged_framework(code_dir: str) -> bool:
    """A deployed package that carries its own crhelper (what `crhelper package` builds) runs that
    copy, as on Function Compute: this worker's modules came from the endpoint's crhelper, so they
    leave `sys.modules` (they keep working through their own references) and the handler imports the
    package's. True when they left."""
    own = os.path.join(code_dir, "crhelper", "__init__.py")
    loaded = sys.modules.get("crhelper")
    loaded_file = getattr(loaded, "__file__", None)
    if not os.path.isfile(own) or loaded_file is None or os.path.samefile(own, loaded_file):
        return False
    for name in [n for n in sys.modules if n == "crhelper" or n.startswith("crhelper.")]:
        del sys.modules[name]
    return True


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run one job; the outcome dict is what the parent decodes."""
    wanted = list(job.get("sys_path", []))
    if sys.path[:len(wanted)] != wanted:  # the job's order first (a deployed function's code dir leads)
        sys.path[:] = wanted + [p for p in sys.path if p not in wanted]
        if wanted:
            prefer_packaged_framework(wanted[0])
    logger = _configure_logging(job["context"]["request_id"])
    context = build_context(job["context"], logger)
    try:
        body = _invoke(job, context)
    except _FunctionError as failure:
        return {"status": "error", "error": failure.error}
    return {"status": "success", "body": base64.b64encode(body).decode("ascii")}


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def serve(job_fd: int, result_fd: int) -> int:
    """Run jobs from `job_fd` until it ends, one outcome line on `result_fd` each (fd 1 and 2 must
    already be the log stream)."""
    with os.fdopen(job_fd, "rb") as jobs:
        for line in jobs:
            if not line.strip():
                continue
            job = json.loads(line.decode("utf-8"))
            outcome = run_job(job)
            sys.stdout.flush()
            sys.stderr.flush()
            _write_all(2, (str(job.get("log_marker", "")) + "\n").encode("utf-8"))
            _write_all(result_fd, json.dumps(outcome).encode("utf-8") + b"\n")
    return 0


def main() -> int:
    die_with_parent()
    job_fd = os.dup(0)
    result_fd = os.dup(1)
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return serve(job_fd, result_fd)


if __name__ == "__main__":
    sys.exit(main())
