"""Provider logs where the user looks: every line a provider the emulator runs writes (FC 2.0
endpoint workers, FC 3.0 in process, the MNS queue worker) shows under the event table prefixed by
its resource, readable, kept in `<home>/logs/<stack>.jsonl` for `stack logs`, JSON lines on stderr
under --json; heartbeats while a resource is in progress; `stack events --follow` from another
process; presigned ResponseURLs never leak."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from stack_support import FC2, FC3, QUEUE, REPO, run_cli

from crhelper.emulator import StackEmulator
from crhelper.emulator.provider_logs import ProviderLogs, log_path, parse_line, read_records
from crhelper.logs import JsonFormatter, request_context

HERE = Path(__file__).resolve().parent
CHATTY = f"{HERE / 'logs_providers.py'}:provider"
SIGNED = "http://127.0.0.1:1/ros/public/abc123?Expires=1999999999&Signature=s3cr3tSIGNATUREvalue"


def chatty_template(token: str, resources: dict[str, dict[str, Any]], timeout: float = 30) -> str:
    body = {name: {"Type": "Custom::Chatty", "Properties": {"ServiceToken": token, "Timeout": timeout, "Parameters": params}}
            for name, params in resources.items()}
    return json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": body})


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "chatty.json"
    path.write_text(text)
    return str(path)


def lines_of(text: str, resource: str) -> list[str]:
    """The provider-log lines of one resource: `HH:MM:SS.mmm  <resource>  | text`."""
    return [line.split(" | ", 1)[1] for line in text.splitlines()
            if line[:2].isdigit() and line.split()[1:2] == [resource] and " | " in line]


# ------------------------------------------------------------------------------ the sink itself (quick)


def test_framework_json_lines_are_rendered_for_people() -> None:
    record = logging.LogRecord("crhelper.outbound", logging.WARNING, __file__, 1, "response refused", None, None)
    record.fields = {"status": 503, "url": "http://h/p?<redacted>"}
    with request_context({"LogicalResourceId": "Db", "RequestType": "Create", "RequestId": "r-1"}):
        line = JsonFormatter().format(record)
    out = io.StringIO()
    logs = ProviderLogs("s", "/nonexistent", out=out)  # never opened: nothing is written to disk
    logs.line(line, stream="stderr")
    logs.line('{"level": "ERROR", "logger": "crhelper.dispatch", "message": "handler raised", '
              '"LogicalResourceId": "Db", "traceback": "Traceback (most recent call last):\\nValueError: x\\n"}',
              stream="stderr")
    logs.line("2026-01-01T00:00:00.000Z 4f1c [WARNING] slow backend", stream="output", resource="Web")
    shown = out.getvalue()
    assert '{"' not in shown, shown
    assert lines_of(shown, "Db") == ["WARNING crhelper.outbound: response refused  status=503 url=http://h/p?<redacted>",
                                     "ERROR crhelper.dispatch: handler raised",
                                     "    Traceback (most recent call last):", "    ValueError: x"]
    assert lines_of(shown, "Web") == ["WARNING slow backend"]
    assert parse_line("plain text\n").level == "" and parse_line("plain text\n").message == "plain text"


def test_the_terminal_keeps_framework_records_below_its_level_out_but_the_file_keeps_them(tmp_path: Path) -> None:
    out = io.StringIO()
    with ProviderLogs("quiet", tmp_path, out=out, level="WARNING") as logs:
        logs.serving("A")
        for _ in range(2):
            logs.line('{"level": "INFO", "logger": "crhelper.lifecycle", "message": "operation in progress", '
                      '"LogicalResourceId": "A", "attempt": 1}', stream="stderr")
        logs.line("a print", stream="stdout", resource="A")
    assert lines_of(out.getvalue(), "A") == ["a print"]
    assert [r.message for r in read_records(tmp_path, "quiet")] == ["operation in progress"] * 2 + ["a print"]
    assert logs.polls("A") == 2 and logs.polls("NotServed") is None


def test_a_providers_own_crhelper_logger_is_shown_and_every_framework_logger_is_known(tmp_path: Path) -> None:
    """`crhelper.get_logger("bootgroups")` in a provider is the provider's output (always shown, e.g. a
    boot group's tier timeline), while the framework's modules stay quiet below the level: every
    get_logger name used in crhelper/ must be a known framework logger for that to hold."""
    import re

    from crhelper.emulator.provider_logs import FRAMEWORK_LOGGERS

    out = io.StringIO()
    with ProviderLogs("mixed", tmp_path, out=out, level="WARNING") as logs:
        logs.serving("A")
        logs.line('{"level": "INFO", "logger": "crhelper.bootgroups", "message": "INSTANCE.BOOT.GROUP.START ok", '
                  '"LogicalResourceId": "A"}', stream="stderr")
        logs.line('{"level": "INFO", "logger": "crhelper.outbound", "message": "response delivered", '
                  '"LogicalResourceId": "A"}', stream="stderr")
    shown = lines_of(out.getvalue(), "A")
    assert len(shown) == 1 and "INSTANCE.BOOT.GROUP.START ok" in shown[0], out.getvalue()
    assert not any("response delivered" in line for line in lines_of(out.getvalue(), "A"))
    assignment = re.compile(r'^\s*\w+\s*=\s*(?:\w+\.)?get_logger\("([a-z_.]+)"\)', re.M)
    used = {name.split(".")[0] for path in (REPO / "crhelper").rglob("*.py") for name in assignment.findall(path.read_text())}
    assert used - FRAMEWORK_LOGGERS == set(), "a framework logger missing from provider_logs.FRAMEWORK_LOGGERS"


def test_handed_out_urls_never_reach_the_terminal_or_the_file(tmp_path: Path) -> None:
    out = io.StringIO()
    with ProviderLogs("secret", tmp_path, out=out) as logs:
        logs.protect(SIGNED)
        logs.line(f"whole event: {json.dumps({'ResponseURL': SIGNED})}", stream="stdout", resource="A")
        logs.line("just the signature: s3cr3tSIGNATUREvalue", stream="stdout", resource="A")
    kept = log_path(tmp_path, "secret").read_text()
    for text in (out.getvalue(), kept):
        assert "s3cr3tSIGNATUREvalue" not in text and "Expires=" not in text, text
        assert "/ros/public/abc123?<redacted>" in text


def test_in_process_capture_routes_writes_inside_a_request_and_passes_the_rest_through(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    saved, handlers = (sys.stdout, sys.stderr), logging.root.handlers[:]
    sys.stdout, sys.stderr = out, err  # what the capture wraps: the CLI's own streams
    logging.root.handlers[:] = []  # an unconfigured process, as the CLI is (pytest adds its own handlers)
    try:
        with ProviderLogs("cap", tmp_path, out=out, err=err) as logs, logs.capture():
            print("outside any request")

            def provider_thread(name: str) -> None:
                with request_context({"LogicalResourceId": name, "RequestType": "Create", "RequestId": name}):
                    for index in range(50):
                        sys.stdout.write(f"{name} part ")   # a line written in pieces stays one line
                        sys.stdout.write(f"{index}\n")
                    logging.getLogger("unconfigured.provider").warning("warned by %s", name)

            threads = [threading.Thread(target=provider_thread, args=(n,)) for n in ("A", "B")]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        sys.stdout, sys.stderr = saved
        logging.root.handlers[:] = handlers
    text = out.getvalue()
    assert "outside any request\n" in text
    for name in ("A", "B"):
        assert lines_of(text, name) == [f"{name} part {i}" for i in range(50)] + [f"WARNING unconfigured.provider: warned by {name}"]
    assert err.getvalue() == ""


def test_a_full_file_is_rotated_and_replayed_in_order(tmp_path: Path) -> None:
    with ProviderLogs("big", tmp_path, out=io.StringIO(), max_bytes=2000) as logs:
        for index in range(40):
            logs.line(f"line {index}", stream="stdout", resource="A")
    path = log_path(tmp_path, "big")
    assert path.stat().st_size <= 2000 and path.with_name(path.name + ".1").is_file()
    messages = [r.message for r in read_records(tmp_path, "big")]
    assert messages == [f"line {i}" for i in range(40 - len(messages), 40)] and len(messages) > 10


# ------------------------------------------------------------------------------ through the CLI (slow)


PATHS = [(FC2, ()), (FC3, ()), (QUEUE, ())]
PATH_IDS = ["fc2-endpoint", "fc3-endpoint", "mns-queue"]


@pytest.mark.slow
@pytest.mark.parametrize("token, extra", PATHS, ids=PATH_IDS)
def test_provider_output_shows_under_its_resource_and_replays_with_stack_logs(tmp_path: Path, token: str, extra: tuple[str, ...]) -> None:
    template = write(tmp_path, chatty_template(token, {"Good": {"Name": "good"}, "Bad": {"Name": "bad", "Fail": True}}))
    created = run_cli("create", template, "--stack", "chat", "-s", f"{token}={CHATTY}", *extra, "--disable-rollback")
    assert created.returncode == 1, created.stdout + created.stderr
    assert '{"' not in created.stdout and '{"' not in created.stderr, created.stdout + created.stderr
    good, bad = lines_of(created.stdout, "Good"), lines_of(created.stdout, "Bad")
    assert "print from good" in good and "stderr from good" in good, created.stdout
    assert any(line.startswith("WARNING") and line.endswith("warned good") for line in good), good
    assert "ERROR crhelper.dispatch: handler raised" in bad, bad
    assert "    RuntimeError: kaboom in bad" in bad and any("Traceback (most recent call last):" in line for line in bad), bad
    replayed = run_cli("logs", "--stack", "chat")
    assert replayed.returncode == 0 and lines_of(replayed.stdout, "Good") == good, replayed.stdout + replayed.stderr
    only_bad = run_cli("logs", "--stack", "chat", "Bad")
    assert only_bad.returncode == 0 and lines_of(only_bad.stdout, "Bad") == bad and not lines_of(only_bad.stdout, "Good")


@pytest.mark.slow
@pytest.mark.parametrize("token", [FC2, FC3], ids=["fc2-endpoint", "fc3-endpoint"])
def test_json_keeps_stdout_one_document_and_logs_json_lines_on_stderr_without_the_response_url(tmp_path: Path, token: str) -> None:
    template = write(tmp_path, chatty_template(token, {"Good": {"Name": "good", "PrintEvent": True}}))
    created = run_cli("create", template, "--stack", "js", "-s", f"{token}={CHATTY}", "--json")
    document = json.loads(created.stdout)  # exactly one JSON document
    assert document["Stack"]["status"] == "CREATE_COMPLETE", created.stderr
    records = [json.loads(line) for line in created.stderr.splitlines()]
    assert {"chatty provider loaded", "print from good", "stderr from good"} <= {r["message"] for r in records}, created.stderr
    assert all(r["stack"] == "js" and r["resource"] == "Good" and r["request_type"] == "Create" for r in records), records
    kept = log_path(Path(_home()), "js").read_text()
    for text in (created.stdout, created.stderr, kept):
        assert "Signature=" not in text and "Expires=" not in text, text
    assert "?<redacted>" in created.stderr and "?<redacted>" in kept
    replay = run_cli("logs", "--stack", "js", "--json")
    assert [json.loads(line)["message"] for line in replay.stdout.splitlines()] == [r["message"] for r in records]


def _home() -> str:
    import os

    return os.environ["CRHELPER_HOME"]


@pytest.mark.slow
def test_a_slow_create_shows_heartbeats_with_elapsed_time_and_polls(tmp_path: Path) -> None:
    template = write(tmp_path, chatty_template(FC3, {"Slow": {"Polls": 4, "Delay": 0.35}}))
    created = run_cli("create", template, "--stack", "beat", "-s", f"{FC3}={CHATTY}",
                      env={"CRHELPER_HEARTBEAT_INTERVAL": "0.3"})
    assert created.returncode == 0, created.stdout + created.stderr
    beats = [line.split("still running: ", 1)[1] for line in created.stdout.splitlines()
             if line.split()[1:3] == ["Slow", "CREATE_IN_PROGRESS"] and "still running: " in line]
    assert len(beats) >= 3, created.stdout
    polls = [int(beat.split(", ")[1].split()[0]) for beat in beats]
    assert polls == sorted(polls) and polls[-1] >= 2 and beats[-1].split()[1] == "s,", beats
    quiet = run_cli("create", template, "--stack", "beat-json", "-s", f"{FC3}={CHATTY}", "--json",
                    env={"CRHELPER_HEARTBEAT_INTERVAL": "0.3"})
    assert "still running" not in quiet.stdout + quiet.stderr and json.loads(quiet.stdout)["Stack"]["status"] == "CREATE_COMPLETE"


@pytest.mark.slow
def test_events_and_logs_follow_a_create_running_in_another_process(tmp_path: Path, home: Path) -> None:
    template = write(tmp_path, chatty_template(FC3, {"Slow": {"Polls": 8, "Delay": 0.3}}))
    command = [sys.executable, "-m", "crhelper.cli.stack", "create", template, "--stack", "far", "-s", f"{FC3}={CHATTY}"]
    creating = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:  # the stack exists once the create has claimed it
            with StackEmulator(home) as emulator:
                if emulator.store.operation_live("far") and emulator.store.load("far") is not None:
                    break
            assert time.monotonic() < deadline and creating.poll() is None, "the create never started"
            time.sleep(0.05)
        followers = [subprocess.Popen([sys.executable, "-m", "crhelper.cli.stack", *args, "--stack", "far", "--follow"],
                                      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for args in (("events",), ("logs",))]
        outputs = [f.communicate(timeout=30) for f in followers]
    finally:
        if creating.poll() is None:
            creating.kill()
        creating.wait(10)
    (events_out, events_err), (logs_out, _) = outputs
    assert all(f.returncode == 0 for f in followers), events_err
    statuses = [line.split()[1:3] for line in events_out.splitlines()]
    assert statuses[0] == ["far", "CREATE_IN_PROGRESS"] and statuses[-1] == ["far", "CREATE_COMPLETE"], events_out
    assert ["Slow", "CREATE_COMPLETE"] in statuses
    slow = lines_of(logs_out, "Slow")
    assert slow.count("print from Slow") == 8 and "step 7 of 8" in slow, logs_out
