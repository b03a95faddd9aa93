"""`crhelper serve` as users run it: help text, and a real process answering requests until SIGTERM."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import requests

from crhelper.cli import serve as serve_command
from crhelper.testing import ResponseServer, make_event
from crhelper.transports.http_config import ENV_BEARER_TOKEN

REPO = Path(__file__).resolve().parents[2]
PROVIDER = Path(__file__).resolve().parent / "http_providers.py"


def test_help_explains_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="crhelper")
    serve_command.register(parser.add_subparsers())
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["serve", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for expected in ("/sync", "web[sync]", "ResponseURL", "--port", "--public-url", "--workers", "CRHELPER_HTTP_SIGN_KEY", "example:"):
        assert expected in text


def test_module_entry_point_help() -> None:
    done = subprocess.run([sys.executable, "-m", "crhelper.cli.serve", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "usage: crhelper serve" in done.stdout


@pytest.fixture
def serve_process() -> Iterator[tuple[subprocess.Popen[str], str]]:
    env = {**os.environ, ENV_BEARER_TOKEN: "cli-token", "CRHELPER_LOG_LEVEL": "WARNING"}
    process = subprocess.Popen(
        [sys.executable, "-m", "crhelper.cli.serve", f"{PROVIDER}:provider", "--port", "0", "--workers", "2"],
        cwd=REPO, env=env, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        match = re.search(r"listening on (http://\S+)", line)
        assert match, f"unexpected first line: {line!r}"
        yield process, match.group(1)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if process.stderr:
            process.stderr.close()


@pytest.mark.slow
def test_serve_process_answers_and_stops_cleanly_on_sigterm(serve_process, response_server: ResponseServer) -> None:
    process, url = serve_process
    events = [response_server.attach(make_event("Create", "Custom::Echo", {"Name": f"p{i}"})) for i in range(5)]
    assert requests.post(url, json=events[0], timeout=10).status_code == 401  # the token came from the env
    for event in events:
        reply = requests.post(url, json=event, headers={"Authorization": "Bearer cli-token"}, timeout=10)
        assert reply.status_code == 200
    process.send_signal(signal.SIGTERM)
    assert process.wait(15) == 0
    assert process.stderr is not None
    assert "every accepted request was handled" in process.stderr.read()
    for event in events:  # all accepted work was answered before the process exited
        assert response_server.responses_for(event["RequestId"])[0]["Status"] == "SUCCESS"
