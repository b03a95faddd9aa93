"""``crhelper router`` as a user runs it: a real process, its exit code and its stderr."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from handlers.routes.model import Route
from handlers.routes.repository import RouteRepository

REPO_ROOT = Path(__file__).resolve().parents[2]


def crhelper(home: Path, *args: str, env: dict[str, str] | None = None, **kw: object) -> subprocess.Popen[str]:
    full_env = {**os.environ, "CRHELPER_HOME": str(home), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "crhelper.cli.main", *args], cwd=REPO_ROOT, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["serve", "controller"])
def test_busy_port_says_so_without_a_traceback(home: Path, command: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        extra = ["--no-https"] if command == "serve" else []
        proc = crhelper(home, "router", command, "--port", str(port), *extra, env={"CRHELPER_FLYNN_KEY": "k"})
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 1, err
    assert f"127.0.0.1:{port}" in err and "in use" in err
    assert "Traceback" not in err and "Unclosed" not in err


@pytest.mark.slow
def test_serve_reports_the_bound_port_and_stops_on_ctrl_c(home: Path) -> None:
    proc = crhelper(home, "router", "serve", "--port", "0", "--no-https")
    try:
        line = proc.stderr.readline()  # type: ignore[union-attr]
        assert line.startswith("router: http://127.0.0.1:"), line
        port = int(line.split("127.0.0.1:")[1].split()[0])
        assert port != 0
        resp = requests.get(f"http://127.0.0.1:{port}/", headers={"Host": "nothing.example"}, timeout=5)
        assert (resp.status_code, resp.text) == (404, "Not Found\n")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0 and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
def test_bad_port_variable_does_not_break_other_commands(home: Path) -> None:
    env = {"CRHELPER_ROUTER_HTTP_PORT": "eighty"}
    proc = crhelper(home, "router", "--help", env=env)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and "serve" in out, err
    proc = crhelper(home, "router", "serve", "--no-https", env=env)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 2 and "CRHELPER_ROUTER_HTTP_PORT" in err and "Traceback" not in err


@pytest.mark.slow
def test_events_follow_ends_when_the_reader_goes_away(home: Path) -> None:
    repo = RouteRepository()
    repo.create_app("f")
    repo.create_route("f", Route(type="tcp", service="s"))
    proc = crhelper(home, "router", "events", "--follow")
    try:
        assert " route " in proc.stdout.readline()  # type: ignore[union-attr]
        proc.stdout.close()  # type: ignore[union-attr]  # like `| head -1` exiting
        started = time.monotonic()
        proc.wait(timeout=10)
        assert proc.returncode == 0 and time.monotonic() - started < 5
        assert "Traceback" not in proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()  # type: ignore[union-attr]
