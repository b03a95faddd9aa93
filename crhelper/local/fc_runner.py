"""Parent side of an invocation: one fresh worker process per call, killed at the timeout.

A fresh process per invocation keeps handlers isolated (module state, env vars, crashes) and
makes the timeout kill exact: the worker runs in its own process group, so a SIGKILL of the
group also ends anything the handler spawned. Being in its own session, a worker would outlive a
SIGKILLed endpoint; it is started with the one-invocation lifetime of `crhelper.local.processes`
(`start_process(die_with_parent=True)`) and dies with the endpoint.

The worker's log stream (its stdout and stderr, merged as FC does) is read line by line while it
runs: an `on_output(request, line)` callback sees each line as it is written (a ten-minute step
shows its progress), and the whole output still becomes `InvocationResult.log`.
"""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence

from crhelper.local.fc_auth import AccessKey
from crhelper.local.fc_context import context_payload
from crhelper.local.fc_protocol import timeout_error
from crhelper.local.fc_registry import FunctionSpec
from crhelper.local.processes import python_env, signal_group, start_process

_DRAIN_SECONDS = 5.0

#: Called with each line of a worker's log stream (bytes, newline included) as it is written.
OutputCallback = Callable[["InvocationRequest", bytes], None]


@dataclass(frozen=True)
class InvocationRequest:
    """Everything a worker needs for one attempt; the role key becomes `context.credentials`."""

    request_id: str
    spec: FunctionSpec
    qualifier: str | None
    payload: bytes
    role: AccessKey
    account_id: str
    region: str
    endpoint: str


@dataclass(frozen=True)
class InvocationResult:
    status: str  # "success", "error" or "timeout"
    body: bytes
    error: dict[str, Any] | None
    log: bytes
    started: float
    ended: float

    @property
    def ok(self) -> bool:
        return self.status == "success"


def function_environment(request: InvocationRequest, base: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment: FC's runtime variables, then the function's own variables."""
    spec = request.spec
    env = python_env(base)
    env.update({
        "PYTHONUNBUFFERED": "1",
        "FC_ACCOUNT_ID": request.account_id,
        "FC_REGION": request.region,
        "FC_SERVICE_NAME": spec.service,
        "FC_FUNCTION_NAME": spec.function,
        "FC_FUNCTION_HANDLER": spec.handler,
        "FC_FUNCTION_MEMORY_SIZE": str(spec.memory),
        "FC_QUALIFIER": request.qualifier or "LATEST",
        "ALIBABA_CLOUD_ACCESS_KEY_ID": request.role.access_key_id,
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": request.role.access_key_secret,
        "ALIBABA_CLOUD_SECURITY_TOKEN": request.role.security_token,
        "CRHELPER_FC_ENDPOINT": request.endpoint,
    })
    env.update(spec.env)
    return env


def build_job(request: InvocationRequest, deadline: float, sys_path: Sequence[str]) -> dict[str, Any]:
    spec = request.spec
    qualifier = request.qualifier or "LATEST"
    context = context_payload(
        request_id=request.request_id, account_id=request.account_id, region=request.region,
        credentials={"access_key_id": request.role.access_key_id,
                     "access_key_secret": request.role.access_key_secret,
                     "security_token": request.role.security_token},
        function={"name": spec.function, "handler": spec.handler, "memory": spec.memory,
                  "timeout": spec.timeout, "initializer": spec.initializer or ""},
        service={"name": spec.service, "log_project": "", "log_store": "",
                 "qualifier": qualifier, "version_id": qualifier if qualifier.isdigit() else ""},
        deadline=deadline,
    )
    return {"handler": spec.handler, "initializer": spec.initializer,
            "event": base64.b64encode(request.payload).decode("ascii"),
            "context": context, "sys_path": list(sys_path)}


def _wrap_log(request_id: str, output: bytes, error: str | None) -> bytes:
    """Frame the worker output with FC's 'FC Invoke Start/End' lines."""
    if output and not output.endswith(b"\n"):
        output += b"\n"
    end = f"FC Invoke End RequestId: {request_id}" + (f", Error: {error}" if error else "")
    return f"FC Invoke Start RequestId: {request_id}\n".encode() + output + end.encode() + b"\n"


def _decode_outcome(raw: bytes, returncode: int | None) -> tuple[str, bytes, dict[str, Any] | None]:
    try:
        outcome = json.loads(raw.decode("utf-8")) if raw else None
    except ValueError:
        outcome = None
    if not isinstance(outcome, dict):
        return "error", b"", {"errorMessage": "Process exited unexpectedly before completing "
                                              f"request (exit code {returncode})",
                              "errorType": "ProcessExited", "stackTrace": []}
    if outcome.get("status") == "success":
        return "success", base64.b64decode(outcome.get("body", "")), None
    return "error", b"", outcome.get("error") or {"errorMessage": "unknown function error"}


class ProcessRunner:
    """Starts workers with `python -m crhelper.local.fc_worker`; `kill_all` ends live ones on stop."""

    def __init__(self, code_paths: Sequence[str | os.PathLike[str]] = (),
                 inherit_sys_path: bool = True, python: str = sys.executable,
                 on_output: OutputCallback | None = None) -> None:
        self._python = python
        self._on_output = on_output
        self._code_paths = [str(Path(p).resolve()) for p in code_paths]
        self._inherit = inherit_sys_path
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen[bytes]] = set()
        self._closed = False

    def _sys_path(self) -> list[str]:
        inherited = [os.path.abspath(p or os.curdir) for p in sys.path] if self._inherit else []
        return list(dict.fromkeys(self._code_paths + inherited))

    def run(self, request: InvocationRequest) -> InvocationResult:
        timeout = float(request.spec.timeout)
        started = time.time()
        job = build_job(request, started + timeout, self._sys_path())
        with self._lock:
            if self._closed:
                return InvocationResult("error", b"", {"errorMessage": "server is stopping",
                                                       "errorType": "ServerStopping",
                                                       "stackTrace": []}, b"", started, started)
            proc = start_process(
                [self._python, "-m", "crhelper.local.fc_worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=function_environment(request, os.environ), die_with_parent=True)
            self._live.add(proc)
        try:
            raw, output, timed_out = self._communicate(proc, request, json.dumps(job).encode("utf-8"), timeout)
        finally:
            with self._lock:
                self._live.discard(proc)
        ended = time.time()
        if timed_out:
            error = timeout_error(timeout)
            return InvocationResult("timeout", b"", error,
                                    _wrap_log(request.request_id, output, error["errorMessage"]),
                                    started, ended)
        status, body, err = _decode_outcome(raw, proc.returncode)
        message = err.get("errorMessage") if err else None
        return InvocationResult(status, body, err, _wrap_log(request.request_id, output, message),
                                started, ended)

    def _communicate(self, proc: "subprocess.Popen[bytes]", request: InvocationRequest, job: bytes,
                     timeout: float) -> tuple[bytes, bytes, bool]:
        """(outcome, log stream, timed out): like `communicate`, but the log stream is read line by
        line and handed to `on_output` as it comes."""
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        outcome: list[bytes] = []
        lines: list[bytes] = []
        readers = [threading.Thread(target=_read_all, args=(proc.stdout, outcome.append), daemon=True,
                                    name="fc-worker-result"),
                   threading.Thread(target=_read_lines, args=(proc.stderr, lines.append, self._output(request)),
                                    daemon=True, name="fc-worker-log")]
        for reader in readers:
            reader.start()
        try:
            proc.stdin.write(job)
            proc.stdin.close()
        except (BrokenPipeError, OSError):  # it died before reading its job: its exit code says why
            pass
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            self._kill(proc)
            timed_out = True
        drain_until = time.monotonic() + _DRAIN_SECONDS
        for reader in readers:
            reader.join(max(0.0, drain_until - time.monotonic()))
        if any(reader.is_alive() for reader in readers):  # a descendant left the group and holds the pipes
            proc.kill()
        proc.wait()  # reaped: a killed worker is gone once the invocation ends
        return b"".join(outcome), b"".join(list(lines)), timed_out

    def _output(self, request: InvocationRequest) -> Callable[[bytes], None] | None:
        callback = self._on_output
        if callback is None:
            return None

        def emit(line: bytes) -> None:
            try:
                callback(request, line)
            except Exception:  # noqa: BLE001 - a broken log consumer must not break the invocation
                pass

        return emit

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        signal_group(proc.pid, signal.SIGKILL)

    def kill_all(self) -> None:
        """Refuse new workers and SIGKILL the process groups of running ones."""
        with self._lock:
            self._closed = True
            live = list(self._live)
        for proc in live:
            self._kill(proc)


def _read_all(stream: IO[bytes], sink: Callable[[bytes], None]) -> None:
    with stream:
        sink(stream.read())


def _read_lines(stream: IO[bytes], sink: Callable[[bytes], None], emit: Callable[[bytes], None] | None) -> None:
    """Every line (the last one may lack its newline) to `sink`, and to `emit` as soon as it is complete."""
    with stream:
        for line in iter(stream.readline, b""):
            sink(line)
            if emit is not None:
                emit(line)
