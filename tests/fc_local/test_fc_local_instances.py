"""Function Compute instances reused as FC reuses them: warm reuse, a cold start only when none is
idle, idle expiry, crash and timeout ending the instance (and what it spawned), the initializer once
per instance, a new spec never served by an old instance, stop ending all; and the runtime's
interpreter. Real worker processes (forked by the fork server, or spawned), through the real fc2 SDK
or the runner itself."""
from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import fc2
import pytest

from crhelper.emulator.state import process_alive
from crhelper.local.fc_auth import AccessKey
from crhelper.local.fc_registry import FunctionSpec
from crhelper.local.fc_runner import IDLE_SETTING, InvocationRequest, ProcessRunner, runtime_version
from crhelper.local.fc_server import LocalFunctionCompute
from crhelper.testing import wait_until

H = "fc_local_instances_handlers"
IDLE_SECONDS = 1.0


def _gone_within(pid: int, seconds: float) -> bool:
    return bool(wait_until(lambda: not process_alive(pid), timeout=seconds, what=f"process {pid} gone"))


@pytest.fixture(scope="module")
def fc() -> Iterator[LocalFunctionCompute]:
    os.environ[IDLE_SETTING] = str(IDLE_SECONDS)
    try:
        server = LocalFunctionCompute().start()
    finally:
        del os.environ[IDLE_SETTING]
    server.register("inst", "counter", f"{H}:counter", timeout=20, env={"STAGE": "one"})
    server.register("inst", "initialized", f"{H}:initialized", timeout=20, initializer=f"{H}:init")
    server.register("inst", "hang", f"{H}:hang_with_child", timeout=1)
    yield server
    server.stop()


def _call(client: fc2.Client, function: str, **args: Any) -> dict[str, Any]:
    return json.loads(client.invoke_function("inst", function, payload=json.dumps(args).encode()).data)


def _error(client: fc2.Client, function: str, **args: Any) -> dict[str, Any]:
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function("inst", function, payload=json.dumps(args).encode())
    return json.loads(excinfo.value.message)


@pytest.mark.slow
def test_a_warm_instance_serves_the_next_invocation_and_a_new_spec_gets_a_new_one(fc: LocalFunctionCompute) -> None:
    client = fc.client()
    first, second = _call(client, "counter"), _call(client, "counter")
    assert second["pid"] == first["pid"] and second["count"] == first["count"] + 1  # module state kept
    assert first["request_id"] != second["request_id"]  # the context is per invocation
    fc.register("inst", "counter", f"{H}:counter", timeout=20, env={"STAGE": "two"})  # an update
    updated = _call(client, "counter")
    assert updated["pid"] != first["pid"] and (updated["count"], updated["stage"]) == (1, "two")
    assert _gone_within(first["pid"], 3)  # the old version's idle instance is ended


@pytest.mark.slow
def test_a_busy_instance_means_a_cold_start_and_the_initializer_runs_once_per_instance(
        fc: LocalFunctionCompute) -> None:
    client = fc.client()
    results: list[dict[str, Any]] = []
    threads = [threading.Thread(target=lambda: results.append(_call(client, "initialized", hold=0.4)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({r["pid"] for r in results}) == 2
    assert [r["init_calls"] for r in results] == [1, 1]
    again = _call(client, "initialized")
    assert again["pid"] in {r["pid"] for r in results} and again["init_calls"] == 1


@pytest.mark.slow
def test_an_idle_instance_expires(fc: LocalFunctionCompute) -> None:
    client = fc.client()
    first = _call(client, "counter")
    assert _gone_within(first["pid"], IDLE_SECONDS + 2)
    assert _call(client, "counter")["pid"] != first["pid"]


@pytest.mark.slow
def test_a_crash_ends_the_instance_and_the_next_call_is_cold(fc: LocalFunctionCompute) -> None:
    client = fc.client()
    warm = _call(client, "counter")
    error = _error(client, "counter", crash=True)
    assert error["errorType"] == "ProcessExited" and "exit code 7" in error["errorMessage"]
    assert _gone_within(warm["pid"], 3)
    after = _call(client, "counter")
    assert after["pid"] != warm["pid"] and after["count"] == 1


@pytest.mark.slow
def test_a_timeout_kills_the_instance_with_its_children(fc: LocalFunctionCompute) -> None:
    client = fc.client()
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function("inst", "hang", payload=b"{}", headers={"x-fc-log-type": "Tail"})
    assert json.loads(excinfo.value.message)["errorMessage"] == "Function timed out after 1 seconds"
    record = fc.record(json.loads(excinfo.value.message)["RequestId"])
    pids = json.loads(record.attempts[0].log_tail.decode().splitlines()[1])
    assert _gone_within(pids["pid"], 3) and _gone_within(pids["child"], 3)


@pytest.mark.slow
def test_stop_ends_every_instance_idle_or_busy(tmp_path: Path) -> None:
    server = LocalFunctionCompute().start()
    server.register("inst", "counter", f"{H}:counter", timeout=20)
    client = server.client()
    pid_file = tmp_path / "busy"

    def hold() -> None:
        try:
            client.invoke_function("inst", "counter", payload=json.dumps({"pid_file": str(pid_file), "hold": 30}).encode())
        except Exception:  # noqa: BLE001 - FC's error answer or a closed connection: either way it returns
            pass

    thread = threading.Thread(target=hold)
    thread.start()
    deadline = time.monotonic() + 10
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    busy = int(pid_file.read_text())
    idle = _call(client, "counter")["pid"]  # a second, cold, instance: the first is busy
    assert idle != busy
    server.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert _gone_within(idle, 3) and _gone_within(busy, 3)


def _request(spec: FunctionSpec) -> InvocationRequest:
    return InvocationRequest(request_id=f"req-{time.monotonic_ns()}", spec=spec, qualifier=None, payload=b"{}",
                             role=AccessKey("STS.test", "secret", "token"), account_id="123", region="cn-hangzhou",
                             endpoint="http://127.0.0.1:9")


@pytest.mark.slow
@pytest.mark.parametrize("version", ["3.10", "3.12"])
def test_a_runtime_runs_under_its_interpreter_with_the_code_dir_first(
        tmp_path: Path, version: str, required_python: Callable[[str], str]) -> None:
    interpreter = required_python(version)
    code = tmp_path / "code"
    code.mkdir()
    (code / "index.py").write_text((Path(__file__).parent / f"{H}.py").read_text())
    runner = ProcessRunner(idle_seconds=30)
    try:
        spec = FunctionSpec("inst", "deployed", "index.interpreter", timeout=20, code_dir=str(code),
                            runtime=f"python{version}")
        first, second = runner.run(_request(spec)), runner.run(_request(spec))
        assert first.ok, first.error
        body = json.loads(first.body)
        assert body["version"] == [int(p) for p in version.split(".")]
        assert os.path.realpath(body["executable"]) == os.path.realpath(interpreter)
        assert body["path0"] == str(code)
        assert json.loads(second.body)["pid"] == body["pid"] and (first.cold, second.cold) == (True, False)
    finally:
        runner.kill_all()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.slow
@pytest.mark.parametrize("fork_server", [True, False])
def test_a_missing_runtime_runs_under_the_host_python_with_one_warning(fork_server: bool) -> None:
    records = _Records()
    logger = logging.getLogger("crhelper.local.fc")
    logger.addHandler(records)
    runner = ProcessRunner(idle_seconds=30, fork_server=fork_server)
    try:
        spec = FunctionSpec("inst", "old", f"{H}:interpreter", timeout=20, runtime="python3.99")
        results = [runner.run(_request(spec)) for _ in range(2)]
    finally:
        runner.kill_all()
        logger.removeHandler(records)
    assert all(r.ok for r in results), results[0].error
    assert json.loads(results[0].body)["version"] == list(sys.version_info[:2])
    host = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert records.messages == [f"function inst/old has runtime python3.99 but runs under the host's Python {host} "
                                "(no such interpreter on this machine (PATH, pyenv which, pyenv's versions folder))"]
    assert json.loads(results[1].body)["pid"] == json.loads(results[0].body)["pid"]


@pytest.mark.parametrize("name, version", [("python3.10", (3, 10)), ("python3.12", (3, 12)), ("python3", None),
                                           ("nodejs18", None), ("python3.x", None)])
def test_runtime_names_map_to_python_versions(name: str, version: tuple[int, int] | None) -> None:
    assert runtime_version(name) == version


ORPHANING_ENDPOINT = f"""
import json, os, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from crhelper.local.fc_fork import shared_server
from crhelper.local.fc_server import LocalFunctionCompute
fc = LocalFunctionCompute().start()
fc.register("inst", "counter", "{H}:counter", timeout=20)
pid = json.loads(fc.client().invoke_function("inst", "counter", payload=b"{{}}").data)["pid"]
print(pid, shared_server().pid, flush=True)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_a_sigkilled_endpoint_takes_its_fork_server_and_warm_instances_with_it() -> None:
    import subprocess

    from crhelper.local.processes import python_env

    endpoint = subprocess.Popen([sys.executable, "-c", ORPHANING_ENDPOINT], stdout=subprocess.PIPE, text=True,
                                env=python_env(os.environ))
    pids: list[int] = []
    try:
        assert endpoint.stdout is not None
        pids = [int(p) for p in endpoint.stdout.readline().split()]
        assert len(pids) == 2 and all(process_alive(p) for p in pids)  # a warm instance, the fork server
        endpoint.kill()
        endpoint.wait(5)
        assert _gone_within(pids[0], 5) and _gone_within(pids[1], 5)
    finally:
        if endpoint.poll() is None:
            endpoint.kill()
            endpoint.wait()
        for pid in pids:
            if process_alive(pid):
                os.kill(pid, 9)
