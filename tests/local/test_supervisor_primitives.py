"""The process primitives on real processes and sockets: start in a group, TERM then KILL after the
grace, the whole group (grandchildren too), exit codes, and the TCP check on 127.0.0.N addresses.
Plus the pure rules: specs, masking, settings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from crhelper.config import ConfigError
from crhelper.local.supervisor import (
    INVALID_SPEC, MASK, ProcessRecord, ProcessSpec, SupervisorError, SupervisorPaths, SupervisorSettings,
    group_alive, mask_env, port_open, process_alive, process_start_ticks, stop_group, tail_lines, wait_port,
)
from crhelper.local.processes import signal_group, start_process
from supervisor_support import IGNORES_TERM, SLEEPS, WITH_GRANDCHILD, free_address, python


@pytest.fixture()
def spawn() -> Iterator[Callable[..., "subprocess.Popen[bytes]"]]:
    """`start_process` for a test; whatever it started is SIGKILLed, group and all, afterwards."""
    started: list["subprocess.Popen[bytes]"] = []

    def start(argv: list[str], **kw: Any) -> "subprocess.Popen[bytes]":
        started.append(start_process(argv, **kw))
        return started[-1]

    yield start
    for proc in started:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait(5)


@pytest.mark.slow
def test_http_server_on_its_own_loopback_address_is_ready_then_stopped_by_term(spawn: Any) -> None:
    host, port = free_address()
    proc = spawn([sys.executable, "-m", "http.server", str(port), "--bind", host], stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
    assert wait_port(host, port, timeout=10, alive=lambda: proc.poll() is None)
    other = "127.0.0.251" if host != "127.0.0.251" else "127.0.0.252"
    assert not port_open(other, port), "an unused 127.0.0.N refuses the connection"
    started = time.monotonic()
    assert stop_group(proc.pid, grace=5, reap=proc.poll) is False, "TERM was enough"
    assert time.monotonic() - started < 3
    assert proc.wait(1) == -signal.SIGTERM
    assert not port_open(host, port)


@pytest.mark.slow
def test_a_child_that_ignores_term_is_killed_after_the_grace(spawn: Any) -> None:
    proc = spawn(python(IGNORES_TERM), stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ignoring TERM\n"
    started = time.monotonic()
    assert stop_group(proc.pid, grace=0.4, reap=proc.poll) is True
    assert time.monotonic() - started >= 0.4
    assert proc.wait(1) == -signal.SIGKILL


@pytest.mark.slow
def test_the_whole_group_is_stopped_grandchild_included(spawn: Any) -> None:
    proc = spawn(python(WITH_GRANDCHILD), stdout=subprocess.PIPE)
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    assert process_alive(grandchild) and group_alive(proc.pid)
    stop_group(proc.pid, grace=2, reap=proc.poll)
    assert not process_alive(grandchild), "the grandchild in the group was stopped too"
    assert not group_alive(proc.pid)


@pytest.mark.slow
def test_exit_code_and_an_early_end_of_the_port_wait(spawn: Any) -> None:
    proc = spawn(python("import sys, time; time.sleep(0.2); sys.exit(3)"))
    host, port = free_address()
    started = time.monotonic()
    assert wait_port(host, port, timeout=10, alive=lambda: proc.poll() is None) is False
    assert time.monotonic() - started < 5, "the wait ends when the process that should listen is gone"
    assert proc.wait(1) == 3
    assert not group_alive(proc.pid)


@pytest.mark.slow
def test_a_reused_pid_is_not_the_same_process(spawn: Any) -> None:
    proc = spawn(python(SLEEPS))
    ticks = process_start_ticks(proc.pid)
    assert ticks and process_alive(proc.pid, ticks)
    assert not process_alive(proc.pid, str(int(ticks) - 1)), "another start time: another process"
    proc.kill()
    proc.wait()
    assert not process_alive(proc.pid)


# ------------------------------------------------------------------------------------- pure rules
def test_spec_errors_name_the_field_and_the_rule() -> None:
    cases = {
        "name": ProcessSpec(name="../etc", argv=("true",)),
        "argv": ProcessSpec(name="ok", argv=()),
        "cwd": ProcessSpec(name="ok", argv=("true",), cwd="relative/dir"),
        "env.DB_PASSWORD": ProcessSpec(name="ok", argv=("true",), env={"DB_PASSWORD": "bad\0value"}),
        "ready_port": ProcessSpec(name="ok", argv=("true",), ready_host="127.0.0.2", ready_port=70000),
    }
    for field_name, spec in cases.items():
        with pytest.raises(SupervisorError) as raised:
            spec.check()
        assert raised.value.code == INVALID_SPEC
        assert str(raised.value).startswith(f"{field_name}:"), str(raised.value)
        assert "bad" not in str(raised.value), "an env value is never echoed"
    with pytest.raises(SupervisorError, match="unknown fields shell"):
        ProcessSpec.from_json({"name": "ok", "argv": ["true"], "shell": True})


def test_spec_differences_are_field_names_only() -> None:
    base = ProcessSpec(name="web", argv=("a",), env={"API_TOKEN": "one"})
    other = ProcessSpec(name="web", argv=("a",), env={"API_TOKEN": "two"}, owner="stack/Web")
    assert base.differences(other) == ["owner", "env"]
    assert base.differences(ProcessSpec.from_json(base.to_json())) == []


def test_secret_looking_env_keys_are_masked_in_statuses() -> None:
    env = {"DB_PASSWORD": "p", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "s", "API_TOKEN": "t", "SSH_KEY": "k",
           "PATH": "/bin", "PORT": "80"}
    assert mask_env(env) == {"DB_PASSWORD": MASK, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": MASK, "API_TOKEN": MASK,
                             "SSH_KEY": MASK, "PATH": "/bin", "PORT": "80"}
    record = ProcessRecord(spec=ProcessSpec(name="web", argv=("a",), env=env))
    assert "p" not in record.status().env.values() and record.spec.env["DB_PASSWORD"] == "p"


def test_settings_come_from_the_environment_with_precise_errors() -> None:
    settings = SupervisorSettings.from_env({"CRHELPER_SUPERVISOR_GRACE": "2.5", "CRHELPER_SUPERVISOR_LINGER": "0"})
    assert (settings.grace, settings.linger, settings.poll) == (2.5, 0.0, 0.2)
    assert SupervisorSettings.from_env(settings.as_env()) == settings
    with pytest.raises(ConfigError, match="CRHELPER_SUPERVISOR_POLL: must be at least 0.01"):
        SupervisorSettings.from_env({"CRHELPER_SUPERVISOR_POLL": "0"})


def test_tail_lines_reads_the_end_of_a_log(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(20000)) + b"last, unterminated")
    assert tail_lines(log, 3) == "line 19998\nline 19999\nlast, unterminated"
    assert tail_lines(log, 0) == ""


def test_a_home_too_long_for_a_unix_socket_gets_a_private_short_one(tmp_path: Path) -> None:
    deep = SupervisorPaths.for_home(tmp_path / ("d" * 120))
    assert len(os.fsencode(str(deep.socket))) <= 100
    assert deep.socket.parent.name == f"crhelper-{os.getuid()}"
    assert deep.socket != SupervisorPaths.for_home(tmp_path / ("e" * 120)).socket, "one socket per home"
    short = SupervisorPaths.for_home(tmp_path)
    assert short.socket == tmp_path / "supervisor" / "daemon.sock"
