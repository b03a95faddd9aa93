"""The supervisor daemon with real processes, a real Unix socket and real signals: one daemon per
home however clients race, children that outlive their clients, a killed daemon recovered from,
idle exit, owners, masked secrets, and the `crhelper supervisor` commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from crhelper.local.supervisor import (
    EXITED, NOT_READY, REFUSED, RUNNING, SPEC_CONFLICT, STARTING, STOPPED, SupervisorClient, SupervisorError,
    group_alive, port_open, process_alive, read_message, send_message,
)
from crhelper.local.supervisor_cli import main as supervisor_cli
from crhelper.testing import wait_until
from supervisor_support import IGNORES_TERM, SLEEPS, WITH_GRANDCHILD, daemon_pids, free_address, python

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _http_server(host: str, port: int) -> list[str]:
    return [sys.executable, "-u", "-m", "http.server", str(port), "--bind", host]


def _wait_state(client: SupervisorClient, name: str, state: str, timeout: float = 5.0) -> None:
    wait_until(lambda: client.status(name).state == state, timeout=timeout, what=f"{name} {state}")


def test_start_ready_idempotent_conflict_restart_and_stop(supervisor: SupervisorClient) -> None:
    host, port = free_address()
    argv = _http_server(host, port)
    first = supervisor.start("web", argv, owner="stack-1/Web", ready=(host, port))
    assert first.state in (STARTING, RUNNING) and first.pid
    ready = supervisor.wait_ready("web", timeout=10)
    assert ready.state == RUNNING and port_open(host, port)
    assert supervisor.start("web", argv, owner="stack-1/Web", ready=(host, port)).pid == first.pid, "same spec: same process"
    with pytest.raises(SupervisorError) as conflict:
        supervisor.start("web", argv + ["--directory", "/"], owner="stack-1/Web", ready=(host, port))
    assert conflict.value.code == SPEC_CONFLICT and "argv" in str(conflict.value)

    again = supervisor.restart("web")
    assert again.restarts == 1 and again.pid != first.pid
    supervisor.wait_ready("web", timeout=10)
    stopped = supervisor.stop("web")
    assert (stopped.state, stopped.exit_code) == (STOPPED, -signal.SIGTERM)
    assert not port_open(host, port) and not group_alive(again.pid or 0)
    log = supervisor.logs("web", tail=50)
    assert "start 2 of web" in log and f"Serving HTTP on {host} port {port}" in log


def test_exit_code_is_reported_and_a_process_that_dies_is_never_ready(supervisor: SupervisorClient) -> None:
    supervisor.start("job", python("import sys; print('working'); sys.exit(3)"))
    _wait_state(supervisor, "job", EXITED)
    assert supervisor.status("job").exit_code == 3
    assert "working" in supervisor.logs("job")
    host, port = free_address()
    supervisor.start("never", python("import sys; sys.exit(4)"), ready=(host, port))
    with pytest.raises(SupervisorError) as raised:
        supervisor.wait_ready("never", timeout=10)
    assert raised.value.code == NOT_READY and "exit code 4" in str(raised.value)


def test_a_child_ignoring_term_is_killed_after_the_grace_and_groups_are_stopped_whole(
        supervisor: SupervisorClient) -> None:
    supervisor.start("stubborn", python(IGNORES_TERM))
    wait_until(lambda: "ignoring TERM" in supervisor.logs("stubborn"), timeout=10, what="TERM ignored")
    started = time.monotonic()
    stopped = supervisor.stop("stubborn", grace=0.3)
    assert time.monotonic() - started >= 0.3
    assert (stopped.state, stopped.exit_code) == (STOPPED, -signal.SIGKILL) and "SIGKILL" in stopped.note

    supervisor.start("family", python(WITH_GRANDCHILD))
    grandchild = int(wait_until(lambda: supervisor.logs("family", 1).strip().isdigit() and supervisor.logs("family", 1),
                                timeout=10, what="grandchild pid"))
    assert process_alive(grandchild)
    supervisor.stop("family")
    assert not process_alive(grandchild)


def test_what_an_exited_leader_leaves_in_its_group_is_ended(supervisor: SupervisorClient) -> None:
    leaves = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              "print(p.pid, flush=True)")
    supervisor.start("leaver", python(leaves))
    _wait_state(supervisor, "leaver", EXITED)
    orphan = int(supervisor.logs("leaver", 1))
    wait_until(lambda: not process_alive(orphan), timeout=5, what="the leftover stopped")


def test_two_clients_racing_to_start_the_daemon_get_one(supervisor: SupervisorClient) -> None:
    script = textwrap.dedent(f"""
        import sys
        from crhelper.local.supervisor import SupervisorClient
        client = SupervisorClient()
        client.start("racer-" + sys.argv[1], [sys.executable, "-c", {SLEEPS!r}])
        print(client.daemon_pid())
    """)
    racers = [subprocess.Popen([sys.executable, "-c", script, str(i)], cwd=REPO, stdout=subprocess.PIPE, text=True)
              for i in range(4)]
    answers = {int(racer.communicate(timeout=30)[0]) for racer in racers}
    assert len(answers) == 1 and all(racer.returncode == 0 for racer in racers)
    assert daemon_pids(supervisor.home) == list(answers)
    assert sorted(s.name for s in supervisor.list()) == [f"racer-{i}" for i in range(4)]


def test_the_daemon_exits_when_idle_and_status_then_reads_the_state_file(supervisor: SupervisorClient) -> None:
    supervisor.start("brief", python("print('done')"))
    daemon = supervisor.daemon_pid()
    assert daemon is not None
    wait_until(lambda: not process_alive(daemon), timeout=5, what="idle daemon gone")
    assert not supervisor.paths.socket.exists() and not supervisor.paths.pid.exists()
    assert supervisor.status("brief").exit_code == 0
    assert supervisor.daemon_pid() is None, "reading statuses starts no daemon"


def test_a_killed_client_does_not_kill_its_child(supervisor: SupervisorClient, tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        from crhelper.local.supervisor import SupervisorClient
        print(SupervisorClient().start("survivor", [sys.executable, "-c", {SLEEPS!r}]).pid, flush=True)
        time.sleep(60)
    """)
    client = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert client.stdout is not None
    child = int(client.stdout.readline())
    client.kill()
    client.wait()
    time.sleep(0.3)
    assert process_alive(child)
    status = supervisor.status("survivor")
    assert (status.state, status.pid) == (RUNNING, child)


def test_a_killed_daemon_is_recovered_and_its_children_adopted(supervisor: SupervisorClient) -> None:
    host, port = free_address()
    first = supervisor.start("web", _http_server(host, port), ready=(host, port))
    supervisor.wait_ready("web", timeout=10)
    old = supervisor.daemon_pid()
    assert old is not None
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: not process_alive(old), timeout=5, what="daemon killed")
    assert supervisor.paths.socket.exists(), "a killed daemon leaves its socket file behind"

    status = supervisor.status("web")  # starts a new daemon, which re-adopts
    new = supervisor.daemon_pid()
    assert new is not None and new != old
    assert (status.state, status.pid, status.adopted) == (RUNNING, first.pid, True)
    assert port_open(host, port)
    stopped = supervisor.stop("web")
    assert stopped.state == STOPPED and stopped.exit_code is None, "not its child: the exit code is unknown"
    assert not port_open(host, port) and not process_alive(first.pid or 0)


def test_stop_owner_stops_exactly_that_owners_processes_at_once(supervisor: SupervisorClient) -> None:
    supervisor.start("a-1", python(IGNORES_TERM), owner="stack-a/Nodes")
    supervisor.start("a-2", python(IGNORES_TERM), owner="stack-a/Nodes")
    supervisor.start("b-1", python(SLEEPS), owner="stack-b/Nodes")
    wait_until(lambda: all("ignoring TERM" in supervisor.logs(n) for n in ("a-1", "a-2")), timeout=10, what="both up")
    started = time.monotonic()
    stopped = supervisor.stop_owner("stack-a/Nodes", grace=0.5, forget=True)
    assert time.monotonic() - started < 1.9, "one grace for all, not one each"
    assert sorted((s.name, s.state) for s in stopped) == [("a-1", STOPPED), ("a-2", STOPPED)]
    assert [s.name for s in supervisor.list()] == ["b-1"] and supervisor.status("b-1").state == RUNNING
    assert supervisor.list(owner="stack-a/Nodes") == []


def test_secrets_in_env_are_masked_in_status_cli_and_daemon_log(
        supervisor: SupervisorClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen = tmp_path / "seen"
    code = "import os, sys, time; open(sys.argv[1], 'w').write(os.environ['DB_PASSWORD']); time.sleep(60)"
    secrets = {"DB_PASSWORD": "hunter2-pw", "API_TOKEN": "tok-123456", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "sk-abcdef"}
    supervisor.start("db", python(code, str(seen)), env={**secrets, "PLAIN": "visible"})
    wait_until(seen.exists, timeout=10, what="child started")
    assert seen.read_text() == "hunter2-pw", "the child gets the real value"
    status = supervisor.status("db")
    assert status.env["PLAIN"] == "visible" and all(status.env[k] == "***" for k in secrets)
    assert supervisor_cli(["status", "db"]) == 0
    assert supervisor_cli(["status", "--json"]) == 0
    assert supervisor_cli(["stop", "db", "--json"]) == 0
    printed = capsys.readouterr().out
    assert "PLAIN=visible" in printed and "DB_PASSWORD=***" in printed
    texts = [printed, supervisor.paths.daemon_log.read_text(), supervisor.logs("db")]
    for value in secrets.values():
        assert all(value not in text for text in texts), value


def test_cli_stop_all_stops_everything_and_the_daemon(supervisor: SupervisorClient) -> None:
    supervisor.start("one", python(SLEEPS))
    supervisor.start("two", python(IGNORES_TERM))
    pids = [supervisor.status(n).pid or 0 for n in ("one", "two")]
    daemon = supervisor.daemon_pid()
    result = subprocess.run([sys.executable, "-m", "crhelper.local.supervisor_cli", "stop", "--all", "--grace", "0.3"],
                            cwd=REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "one: stopped (exit code -15)" in result.stdout and "two: stopped (exit code -9)" in result.stdout
    assert "supervisor daemon stopped" in result.stdout
    wait_until(lambda: daemon is not None and not process_alive(daemon), timeout=5, what="daemon gone")
    assert not any(group_alive(pid) for pid in pids)


def test_cli_status_of_an_empty_home_starts_no_daemon(supervisor: SupervisorClient,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert supervisor_cli(["status"]) == 0
    assert capsys.readouterr().out.strip() == "no supervised processes"
    assert supervisor_cli(["logs", "missing"]) == 1
    assert "no supervised process named 'missing'" in capsys.readouterr().err
    assert supervisor_cli(["stop"]) == 2
    assert not supervisor.paths.socket.exists() and supervisor.daemon_pid() is None


def _ask_as_nobody(path: Path, message: dict[str, str]) -> dict[str, Any]:
    """Send `message` from a forked process that became uid/gid 65534 (a fork: root's interpreter
    may not be executable by that user); its answer comes back through a pipe."""
    import socket

    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        try:
            os.close(read_end)
            os.setgid(65534)
            os.setuid(65534)
            try:
                with socket.socket(socket.AF_UNIX) as sock:
                    sock.connect(str(path))
                    send_message(sock, message)
                    os.write(write_end, json.dumps(read_message(sock)).encode())
            except Exception as exc:  # say what happened instead of an empty answer
                os.write(write_end, json.dumps({"child_error": repr(exc)}).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        text = answer.read()
    os.waitpid(child, 0)
    return dict(json.loads(text))


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as another user")
def test_a_client_of_another_user_is_refused() -> None:
    home = Path(tempfile.mkdtemp(prefix="sv-"))  # a short, traversable path: the default socket location
    client = SupervisorClient(home)
    try:
        client.start("mine", python(SLEEPS))
        os.chmod(home, 0o755)
        os.chmod(client.paths.folder, 0o755)
        os.chmod(client.paths.socket, 0o777)  # only the peer-credential check is left to refuse
        answer = _ask_as_nobody(client.paths.socket, {"op": "list"})
        assert answer["ok"] is False and answer["error"]["code"] == REFUSED, answer
        assert "mine" not in json.dumps(answer)
    finally:
        client.stop_all(grace=0.2)
        wait_until(lambda: not daemon_pids(home), timeout=5, what="daemon gone")


def test_a_malformed_request_gets_a_precise_error(supervisor: SupervisorClient) -> None:
    supervisor.start("x", python(SLEEPS))
    import socket

    for message, expected in (({"op": "explode"}, "op: one of"), ({"op": "stop", "name": "x", "grace": -1}, "grace:"),
                              ({"op": "start", "spec": {"name": "y", "argv": "ls"}}, "argv:")):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(supervisor.paths.socket))
            send_message(sock, message)
            answer = read_message(sock)
        assert answer is not None and answer["ok"] is False and expected in answer["error"]["message"], answer


@pytest.mark.slow
def test_a_burst_of_clients_larger_than_a_default_backlog_is_served(supervisor: SupervisorClient) -> None:
    """A tier of ten instances starts at once: a Unix socket refuses a connect at once (EAGAIN) when
    the daemon's backlog is full, so the daemon keeps a deep one and clients wait for room."""
    import threading

    for index in range(10):  # a listing that takes a while (each process is read from /proc)
        supervisor.start(f"burst-{index}", [sys.executable, "-c", "import time; time.sleep(60)"])
    errors: list[str] = []

    def client() -> None:
        mine = SupervisorClient(supervisor.home)
        for _ in range(20):
            try:
                mine.list()
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                errors.append(repr(exc))

    threads = [threading.Thread(target=client) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    supervisor.stop_all()
    assert errors == []
