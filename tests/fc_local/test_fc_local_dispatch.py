"""The async queue's waking (a due job wakes one worker; a later-pushed earlier job is not held up
by a worker sleeping for a later one), the fork server's pre-import of a function's libraries
(read from its source: stdlib and installed packages only, never the function's own modules) and
its copies serving forks beside it."""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from crhelper.emulator.state import process_alive
from crhelper.local.fc_async import AsyncDispatcher
from crhelper.local.fc_fork import SERVERS_SETTING, ForkServer, _receive
from crhelper.local.fc_preload import imported_names, library_imports, module_file
from crhelper.local.fc_runner import _host_python_path
from crhelper.local.fc_server import LocalFunctionCompute
from crhelper.testing import wait_until


class _Recorder:
    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.settled: dict[str, bool] = {}
        self.lock = threading.Lock()

    def execute(self, request_id: str, attempt: int) -> bool:
        with self.lock:
            self.started.setdefault(request_id, time.monotonic())
        return True

    def settle(self, request_id: str, ok: bool) -> None:
        with self.lock:
            self.settled[request_id] = ok


def test_an_earlier_job_pushed_after_a_later_one_runs_at_its_own_time() -> None:
    recorder = _Recorder()
    dispatcher = AsyncDispatcher(recorder.execute, recorder.settle, workers=4)
    dispatcher.start()
    try:
        begun = time.monotonic()
        dispatcher.submit("late", 30.0)  # a worker now sleeps until this one is due
        dispatcher.submit("soon", 0.05)
        assert dispatcher.wait_idle(0) is False
        deadline = time.monotonic() + 5
        while "soon" not in recorder.settled and time.monotonic() < deadline:
            time.sleep(0.01)
        assert recorder.settled.get("soon") is True
        assert recorder.started["soon"] - begun < 2.0  # not held until the 30 s job's time
        assert "late" not in recorder.started
    finally:
        assert dispatcher.stop(join_timeout=2) == ["late"]


def test_due_jobs_run_together_on_all_workers_and_stop_wakes_sleeping_ones() -> None:
    workers = 24
    barrier = threading.Barrier(workers, timeout=5)
    done: list[str] = []

    def execute(request_id: str, attempt: int) -> bool:
        barrier.wait()  # raises BrokenBarrierError unless every job runs at the same time
        done.append(request_id)
        return True

    dispatcher = AsyncDispatcher(execute, lambda request_id, ok: None, workers=workers)
    dispatcher.start()
    try:
        for i in range(workers):
            dispatcher.submit(f"job-{i}", 0)
        assert dispatcher.wait_idle(10)
        assert sorted(done) == sorted(f"job-{i}" for i in range(workers))
    finally:
        started = time.monotonic()
        assert dispatcher.stop(join_timeout=5) == []
        assert time.monotonic() - started < 2  # idle workers woke for the stop


def test_a_failed_attempt_is_retried_after_its_back_off_while_other_jobs_run() -> None:
    attempts: list[tuple[str, int, float]] = []
    settled: dict[str, bool] = {}

    def execute(request_id: str, attempt: int) -> bool:
        attempts.append((request_id, attempt, time.monotonic()))
        return request_id != "flaky" or attempt == 2

    dispatcher = AsyncDispatcher(execute, settled.__setitem__, workers=3, retry_delay=0.2)
    dispatcher.start()
    try:
        dispatcher.submit("flaky", 0)
        dispatcher.submit("steady", 0.05)
        assert dispatcher.wait_idle(5)
    finally:
        dispatcher.stop()
    assert settled == {"flaky": True, "steady": True}
    flaky = [t for r, _, t in attempts if r == "flaky"]
    assert len(flaky) == 2 and flaky[1] - flaky[0] >= 0.19


def test_imported_names_are_the_top_level_imports_only(tmp_path: Path) -> None:
    source = tmp_path / "prov.py"
    source.write_text(
        "from __future__ import annotations\n"
        "import json, os.path\n"
        "from statistics import median\n"
        "from . import sibling\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import decimal\n"
        "try:\n    import tomllib\nexcept ImportError:\n    import csv\n"
        "def later():\n    import wave\n"
        "class Lazy:\n    import zipfile\n")
    assert imported_names(source) == ("__future__", "json", "os", "statistics", "typing", "tomllib", "csv")
    (tmp_path / "broken.py").write_text("def (:\n")
    assert imported_names(tmp_path / "broken.py") == ()  # the instance reports it, on its first request
    assert imported_names(tmp_path / "absent.py") == ()


def test_library_imports_skip_the_functions_own_modules(tmp_path: Path) -> None:
    (tmp_path / "helper_mod.py").write_text("X = 1\n")
    (tmp_path / "helper_pkg").mkdir()
    (tmp_path / "helper_pkg" / "__init__.py").write_text("")
    source = tmp_path / "prov.py"
    source.write_text("import sys, statistics, wave, helper_mod, helper_pkg, no_such_module_here\n")
    path = [str(tmp_path), *sys.path]
    assert library_imports([source], path, _host_python_path) == ["statistics", "wave"]
    assert module_file("helper_pkg", path) == tmp_path / "helper_pkg" / "__init__.py"
    assert module_file("no_such_module_here", path) is None


@pytest.mark.slow
def test_a_forked_instance_finds_its_handlers_libraries_imported_but_not_its_own_modules() -> None:
    handler = "fc_local_preload_handler"
    with LocalFunctionCompute() as fc:
        fc.register("pre", "fn", f"{handler}:handler", timeout=20)
        answer = json.loads(fc.client().invoke_function("pre", "fn", payload=b"{}").data)
    assert answer["wave_preloaded"] is True  # imported by the fork server: the instance did not pay for it
    assert answer["sibling_pid"] == answer["pid"]  # the handler's own sibling module ran in the instance
    assert answer["handler_pid"] == answer["pid"]  # and so did the handler module itself


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_serving_process_that_lost_a_request_to_another_does_not_wait_for_the_next_one() -> None:
    # socket.recv_fds drops its flags: a server sleeping in recvmsg reaped no instance until the next request
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        started = time.monotonic()
        with pytest.raises(BlockingIOError):
            _receive(theirs)
        assert time.monotonic() - started < 1
        read_end, write_end = os.pipe()
        socket.send_fds(ours, [b'{"id": 1}'], [read_end, write_end, read_end])
        message, fds = _receive(theirs)
        assert message == b'{"id": 1}' and len(fds) == 3
        for fd in (*fds, read_end, write_end):
            os.close(fd)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_forks_are_served_by_the_server_and_its_copies_which_all_end_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SERVERS_SETTING, "3")
    server = ForkServer().start()
    try:
        instances = [server.fork(dict(os.environ), os.getcwd(), sys.path, []) for _ in range(12)]
        assert server.pid is not None
        copies = wait_until(lambda: [int(c) for c in Path(f"/proc/{server.pid}/task/{server.pid}/children")
                                     .read_text().split() if int(c) not in {i.pid for i in instances}],
                            timeout=10, what="the server's two copies")
        assert len(copies) == 2
        assert {_parent_of(i.pid) for i in instances} <= {server.pid, *copies}  # each forked by a serving process
        instances[0].kill()
        assert instances[0].exit_code(10) == -9  # reaped and reported by whichever process forked it
    finally:
        server.close()
    for pid in [*copies, *(i.pid for i in instances)]:
        assert wait_until(lambda: not process_alive(pid), timeout=10, what=f"process {pid} gone")
