"""Batches of the supervisor daemon with real processes: `start_many` starts several specs in one
request (each as `start` would: idempotent, a conflict is that spec's error, the others still start)
and `stop_many` stops and forgets names and whole owners at once, skipping names it does not have."""

from __future__ import annotations

import json
import socket

import pytest

from crhelper.local.supervisor import (
    BAD_REQUEST, EXITED, RUNNING, SPEC_CONFLICT, STOPPED, SupervisorClient, SupervisorError, group_alive, read_message,
    send_message,
)
from crhelper.testing import wait_until
from supervisor_support import SLEEPS, python

pytestmark = pytest.mark.slow


def test_start_many_starts_each_spec_once_and_reports_the_first_failure_after_trying_all(
        supervisor: SupervisorClient) -> None:
    specs = [supervisor.spec(f"batch-{index}", python(SLEEPS), owner=f"stack/App/node-{index % 2}")
             for index in range(4)]
    started = supervisor.start_many(specs)
    assert [status.name for status in started] == [spec.name for spec in specs]
    assert all(status.state == RUNNING and status.pid for status in started)
    assert len({status.pid for status in started}) == 4
    state = json.loads(supervisor.paths.state.read_text())  # all on record before the answer
    assert {record["spec"]["name"] for record in state["records"]} >= {spec.name for spec in specs}

    again = supervisor.start_many(specs)  # the same specs: the running processes, not new ones
    assert [status.pid for status in again] == [status.pid for status in started]

    other = supervisor.spec("batch-1", python("import time; time.sleep(30)"))
    fresh = supervisor.spec("batch-9", python(SLEEPS))
    with pytest.raises(SupervisorError) as caught:
        supervisor.start_many([other, fresh])
    assert caught.value.code == SPEC_CONFLICT and "batch-1" in str(caught.value) and "argv" in str(caught.value)
    assert supervisor.status("batch-9").state == RUNNING  # tried although another spec of the batch failed

    stopped = supervisor.stop_many(["batch-9", "no-such-name"], owners=["stack/App/node-0"], grace=0.2, forget=True)
    assert sorted(status.name for status in stopped) == ["batch-0", "batch-2", "batch-9"]
    assert all(status.state == STOPPED and not group_alive(status.pid or 0) for status in stopped)
    assert sorted(status.name for status in supervisor.list()) == ["batch-1", "batch-3"]  # forgotten, the others kept
    assert supervisor.stop_many([]) == []


def test_finished_processes_are_forgotten_together_and_a_bad_batch_is_refused_whole(
        supervisor: SupervisorClient) -> None:
    quick = [supervisor.spec(f"quick-{index}", python(f"raise SystemExit({index})")) for index in range(3)]
    supervisor.start_many(quick)
    wait_until(lambda: all(status.state == EXITED for status in supervisor.list()), timeout=10, what="all exited")
    assert sorted(str(status.exit_code) for status in supervisor.list()) == ["0", "1", "2"]
    assert sorted(status.exit_code or 0 for status in supervisor.list()) == [0, 1, 2]
    forgotten = supervisor.stop_many([spec.name for spec in quick], forget=True)
    assert sorted(status.exit_code or 0 for status in forgotten) == [0, 1, 2]  # ended ones keep their exit codes
    assert supervisor.list() == []

    def ask(message: dict[str, object]) -> dict[str, object]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(supervisor.paths.socket))
            send_message(sock, message)
            reply = read_message(sock)
        assert reply is not None
        return reply

    supervisor.start("keeper", python(SLEEPS))  # the daemon stays up for the raw requests below
    twice = ask({"op": "start_many", "specs": [quick[0].to_json(), quick[0].to_json()]})
    assert twice["ok"] is False and twice["error"] == {  # type: ignore[comparison-overlap]
        "code": BAD_REQUEST, "message": "specs: each name at most once (quick-0 repeated)"}
    broken = ask({"op": "start_many", "specs": [quick[1].to_json(), {"name": "x"}]})
    assert broken["ok"] is False and "specs[1]: spec: name and argv are required" in str(broken["error"])
    assert ask({"op": "stop_many", "names": "quick-0"})["ok"] is False
    assert [status.name for status in supervisor.list()] == ["keeper"]  # nothing of the refused batches started
