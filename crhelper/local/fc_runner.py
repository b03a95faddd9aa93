"""Parent side of an invocation: run it on a Function Compute instance, killed at the timeout.

Instances are reused as FC reuses them (`crhelper.local.fc_pool`): a warm instance (a worker
process that keeps its modules) serves the next invocation of the same function version; a cold
start forks a worker from a pre-importing fork server (`crhelper.local.fc_fork`), or spawns
`python -m crhelper.local.fc_worker` when forking is not safe (another interpreter: the function's
`runtime`; another code directory: its `code_dir`). Isolation is FC's: a timeout or a crash ends
the instance, its process group included, so the next invocation starts cold. A worker runs in its
own session and dies with the endpoint (`crhelper.local.processes`, the one-invocation lifetime).

Each invocation's log lines (its worker's stdout and stderr, merged as FC does) are read as they
are written: `on_output(request, line)` sees each line live (a ten-minute step shows its
progress), and the invocation's whole output still becomes `InvocationResult.log`.

Settings: CRHELPER_FC_INSTANCE_IDLE (seconds an idle instance is kept, default 180: FC keeps
them a few minutes), CRHELPER_FC_FORK_SERVER (false: always spawn), CRHELPER_FC_FORK_SERVERS (how
many processes serve forks, default 4: `crhelper.local.fc_fork`), CRHELPER_FC_PRELOAD (more
modules for the fork server to import, comma-separated: a provider's heavy libraries; the libraries
a function's handler module, or the provider its CRHELPER_PROVIDER names, imports at its top level
are found in its source and imported there too, unless CRHELPER_FC_PRELOAD_IMPORTS is false:
`crhelper.local.fc_preload`).
"""
from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from crhelper.config import env_bool, env_float
from crhelper.local.fc_auth import AccessKey
from crhelper.local.fc_context import context_payload
from crhelper.local.fc_fork import ForkError, ForkServer, shared_server
from crhelper.local.fc_pool import Instance, InstancePool, PoolClosed
from crhelper.local.fc_preload import library_imports, module_file
from crhelper.local.fc_protocol import timeout_error
from crhelper.local.fc_registry import FunctionSpec, split_handler
from crhelper.local.processes import find_python, python_env, signal_group, start_process
from crhelper.logs import get_logger

IDLE_SETTING = "CRHELPER_FC_INSTANCE_IDLE"
#: The provider a function's handler loads (`crhelper.loading.PROVIDER_ENV`; named here, not imported:
#: the endpoint does not load the framework's loading machinery to read one variable).
PROVIDER_ENV = "CRHELPER_PROVIDER"
FORK_SETTING = "CRHELPER_FC_FORK_SERVER"
PRELOAD_SETTING = "CRHELPER_FC_PRELOAD"
PRELOAD_IMPORTS_SETTING = "CRHELPER_FC_PRELOAD_IMPORTS"
#: Seconds an idle instance is kept (FC keeps idle instances for a few minutes).
DEFAULT_IDLE_SECONDS = 180.0
#: What the fork server imports: the framework a provider runs on (what its first request imports:
#: the lifecycle, the response's HTTP client, the stores) and the model library it is written with
#: (pydantic imports its parts lazily, on the first model: named here one by one). Absent ones are skipped.
DEFAULT_PRELOAD = ("crhelper.fc", "crhelper.provider", "crhelper.runtime", "crhelper.lifecycle", "crhelper.envelopes",
                   "crhelper.cloud.http", "crhelper.store.memory", "crhelper.store.sqlite", "encodings.idna",
                   "uuid", "zoneinfo", "platform", "csv", "importlib.metadata",
                   "pydantic", "pydantic.main", "pydantic.fields", "pydantic.types", "pydantic.json_schema",
                   "pydantic.functional_validators")
#: The oldest Python the worker runs under (the project's own minimum).
OLDEST_RUNTIME = (3, 10)
_RUNTIME = re.compile(r"^python(\d+)\.(\d+)$")

_log = get_logger("local.fc")

#: Called with each line of a worker's log stream (bytes, newline included) as it is written.
OutputCallback = Callable[["InvocationRequest", bytes], None]


#: How a spawned worker starts: from the endpoint's crhelper (first on PYTHONPATH), not from a copy
#: in the function's code folder (the working directory, which `-m` would put first): a package
#: `crhelper package` built carries a trimmed crhelper of its own, which its handler then imports
#: (`fc_worker.prefer_packaged_framework`).
WORKER_BOOT = "import sys; del sys.path[0]; from crhelper.local.fc_worker import main; sys.exit(main())"


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
    #: Whether a new instance was started for it, and that instance's pid.
    cold: bool = False
    instance: int = 0

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


def _decode_outcome(raw: bytes | None, returncode: int | None) -> tuple[str, bytes, dict[str, Any] | None]:
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


def _provider_location(spec: str) -> str:
    """The file or module of a provider spec, as `crhelper.loading.parse_spec` reads it ("" if none)."""
    text = spec.strip()
    if text.endswith(".py"):
        return text
    location, sep, _ = text.rpartition(":")
    if sep:
        return location if location.endswith(".py") else text.partition(":")[0]
    return text.rpartition(".")[0]


def runtime_version(runtime: str) -> tuple[int, int] | None:
    """FC's runtime name to a Python version: "python3.10" -> (3, 10); None for any other name."""
    match = _RUNTIME.match(runtime)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _host_python_path(path: str) -> bool:
    """Whether a sys.path entry belongs to the host interpreter itself (its stdlib, site-packages)."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    real = os.path.realpath(path)
    parts = Path(real).parts
    return (any(real == p or real.startswith(p + os.sep) for p in prefixes)
            or "site-packages" in parts or "dist-packages" in parts)


class SpawnedProcess:
    """A worker started with `python -m crhelper.local.fc_worker` (`fc_pool.WorkerProcess`)."""

    def __init__(self, proc: "subprocess.Popen[bytes]") -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._proc = proc
        self.pid = proc.pid
        self.job = proc.stdin
        self.result = proc.stdout
        self.log = proc.stderr

    def kill(self) -> None:
        signal_group(self.pid, signal.SIGKILL)

    def exit_code(self, timeout: float) -> int | None:
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


class ProcessRunner:
    """Runs invocations on reused instances; `kill_all` ends every instance on stop.

    Processes are started from one long-lived thread (`_launch`): a child's parent death signal
    fires when the thread that started it ends, and an HTTP request's thread ends with its request.
    """

    def __init__(self, code_paths: Sequence[str | os.PathLike[str]] = (),
                 inherit_sys_path: bool = True, python: str = sys.executable,
                 on_output: OutputCallback | None = None, *, idle_seconds: float | None = None,
                 fork_server: bool | None = None, preload: Sequence[str] | None = None) -> None:
        env = os.environ
        self._python = python
        self._on_output = on_output
        self._code_paths = [str(Path(p).resolve()) for p in code_paths]
        self._inherit = inherit_sys_path
        idle = env_float(env, IDLE_SETTING, DEFAULT_IDLE_SECONDS) if idle_seconds is None else idle_seconds
        self._fork_enabled = env_bool(env, FORK_SETTING, True) if fork_server is None else fork_server
        extra = env.get(PRELOAD_SETTING, "").split(",") if preload is None else list(preload)
        self._preload = list(dict.fromkeys([*DEFAULT_PRELOAD, *(m.strip() for m in extra if m.strip())]))
        self._preload_imports = env_bool(env, PRELOAD_IMPORTS_SETTING, True)
        self._launcher = ThreadPoolExecutor(1, thread_name_prefix="fc-instance-launcher")
        self._pool = InstancePool(self._start_instance, idle)
        self._lock = threading.Lock()
        self._interpreters: dict[str | None, tuple[str, bool]] = {}
        self._warned: set[tuple[str, str, str]] = set()
        self._closed = False
        if self._fork_enabled and python == sys.executable:
            self._server()  # started now, importing while the endpoint gets its first request

    @property
    def pool(self) -> InstancePool:
        return self._pool

    def _sys_path(self, spec: FunctionSpec, host: bool) -> list[str]:
        """The function's code directory first, then the endpoint's code paths, then (unless told
        not to) this process's sys.path: without the host interpreter's own folders under another one."""
        inherited = [os.path.abspath(p or os.curdir) for p in sys.path] if self._inherit else []
        if not host:
            inherited = [p for p in inherited if not _host_python_path(p)]
        own = [spec.code_dir] if spec.code_dir else []
        return list(dict.fromkeys(own + self._code_paths + inherited))

    def _interpreter(self, spec: FunctionSpec) -> tuple[str, bool]:
        """(the interpreter for the function's runtime, whether it is this endpoint's own)."""
        runtime = spec.runtime
        with self._lock:
            known = self._interpreters.get(runtime)
        if known is None:
            known = self._find_interpreter(runtime)
            with self._lock:
                self._interpreters[runtime] = known
        if runtime is not None and known[1] and runtime_version(runtime) != sys.version_info[:2]:
            self._warn_mismatch(spec, runtime)
        return known

    def _find_interpreter(self, runtime: str | None) -> tuple[str, bool]:
        version = runtime_version(runtime) if runtime is not None else None
        if version is None or version < OLDEST_RUNTIME:
            return self._python, True
        if version == sys.version_info[:2] and self._python == sys.executable:
            return self._python, True
        found = find_python(f"{version[0]}.{version[1]}")
        return (found, False) if found is not None else (self._python, True)

    def _warn_mismatch(self, spec: FunctionSpec, runtime: str) -> None:
        key = (spec.service, spec.function, runtime)
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        host = f"{sys.version_info[0]}.{sys.version_info[1]}"
        version = runtime_version(runtime)
        why = ("not a Python runtime name" if version is None else
               f"the worker needs Python {OLDEST_RUNTIME[0]}.{OLDEST_RUNTIME[1]} or later"
               if version < OLDEST_RUNTIME else
               "no such interpreter on this machine (PATH, pyenv which, pyenv's versions folder)")
        _log.warning("function %s/%s has runtime %s but runs under the host's Python %s (%s)",
                     spec.service, spec.function, runtime, host, why)

    def _preloads(self, spec: FunctionSpec, sys_path: Sequence[str]) -> list[str]:
        """The fork server's imports: the defaults, framework modules the function's handlers name,
        and the libraries its code imports (never a provider's own module: its import-time code runs
        once per instance)."""
        named = [split_handler(h)[0] for h in (spec.handler, spec.initializer) if h]
        framework = [m for m in named if m == "crhelper" or m.startswith("crhelper.")]
        if not self._preload_imports:
            return self._preload + framework
        sources = [f for f in (module_file(m, sys_path) for m in named if m not in framework) if f is not None]
        provider = _provider_location(spec.env.get(PROVIDER_ENV, ""))
        if provider.endswith(".py"):
            sources.append(Path(os.getcwd(), provider))  # an absolute path stays itself
        elif provider:
            found = module_file(provider, sys_path)
            sources.extend([found] if found is not None else [])
        libraries = library_imports(sources, sys_path, _host_python_path) if sources else []
        return self._preload + framework + libraries

    def _server(self) -> ForkServer | None:
        """The process's fork server (`fc_fork.shared_server`); None when forking is off or impossible."""
        with self._lock:
            if self._closed or not self._fork_enabled:
                return None
        try:
            return shared_server(self._python, self._preload)
        except (OSError, RuntimeError) as exc:
            with self._lock:
                self._fork_enabled = False
            _log.warning("no fork server (%s): instances start as new processes", exc)
            return None

    def _launch(self, start: Callable[[], Any]) -> Any:
        return self._launcher.submit(start).result()

    def _start_instance(self, request: InvocationRequest) -> Instance:
        """A cold start: fork when the function runs on this interpreter from the endpoint's code
        paths, else spawn."""
        spec = request.spec
        python, host = self._interpreter(spec)
        env = function_environment(request, os.environ)
        sys_path = self._sys_path(spec, host)
        server = self._server() if host and spec.code_dir is None else None
        if server is not None:
            try:
                return Instance(server.fork(env, os.getcwd(), sys_path, self._preloads(spec, sys_path)), spec,
                                request.qualifier)
            except ForkError as exc:
                _log.warning("fork server failed (%s): starting a new process", exc)
        proc = self._launch(lambda: start_process(
            [python, "-c", WORKER_BOOT], cwd=spec.code_dir,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, die_with_parent=True))
        return Instance(SpawnedProcess(proc), spec, request.qualifier)

    def run(self, request: InvocationRequest) -> InvocationResult:
        timeout = float(request.spec.timeout)
        started = time.time()
        deadline = started + timeout
        try:
            instance, cold = self._pool.acquire(request)
        except PoolClosed:
            return InvocationResult("error", b"", {"errorMessage": "server is stopping",
                                                   "errorType": "ServerStopping",
                                                   "stackTrace": []}, b"", started, started)
        except (OSError, RuntimeError) as exc:
            reason = f"the instance could not start: {exc}"
            return InvocationResult("error", b"", {"errorMessage": reason, "errorType": "InstanceStartFailed",
                                                   "stackTrace": []},
                                    _wrap_log(request.request_id, b"", reason), started, time.time())
        job = build_job(request, deadline, self._sys_path(request.spec, self._interpreter(request.spec)[1]))
        try:
            outcome = instance.invoke(job, deadline, self._output(request))
        finally:
            self._pool.release(instance)
        ended = time.time()
        if outcome.timed_out:
            error = timeout_error(timeout)
            return InvocationResult("timeout", b"", error,
                                    _wrap_log(request.request_id, outcome.log, error["errorMessage"]),
                                    started, ended, cold, instance.pid)
        status, body, err = _decode_outcome(outcome.raw, outcome.exit_code)
        message = err.get("errorMessage") if err else None
        return InvocationResult(status, body, err, _wrap_log(request.request_id, outcome.log, message),
                                started, ended, cold, instance.pid)

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

    def kill_all(self) -> None:
        """Refuse new instances and SIGKILL every instance's process group, idle or busy."""
        with self._lock:
            self._closed = True
        self._pool.close()  # the shared fork server stays: it serves the process's other endpoints
        self._launcher.shutdown(wait=False)
