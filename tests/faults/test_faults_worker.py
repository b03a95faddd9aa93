"""The MNS queue worker under faults, against LocalMNS with the real aliyun-mns-sdk: final delivery
errors, requests in flight elsewhere, absurd bodies, BaseExceptions from handlers, SIGTERM with a
handler still running, and a restart after SIGKILL with no new message.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from mns.queue import Message, QueueMeta

from crhelper import Provider, Result
from crhelper.local.mns_server import LocalMNS
from crhelper.testing import ResponseServer, make_event, wait_until
from faults_support import KILLED_STEP_PROVIDER
from crhelper.transports.mns_worker import Action, QueueWorker, defer_visibility, disposition

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def local_mns() -> Iterator[LocalMNS]:
    with LocalMNS(retry_time_scale=0.005) as mns:
        yield mns


@pytest.fixture()
def queue_name(local_mns: LocalMNS) -> str:
    name = "f-" + uuid.uuid4().hex[:12]
    queue = local_mns.account().get_queue(name)
    queue.create(QueueMeta(vis_timeout=2))
    return name


def _queue(local_mns: LocalMNS, name: str) -> Any:
    queue = local_mns.account().get_queue(name)
    queue.set_encoding(False)
    return queue


def _counts(local_mns: LocalMNS, name: str) -> dict[str, int]:
    attrs = local_mns.account().get_queue(name).get_attributes()
    return {"active": attrs.active_messages, "inactive": attrs.inactive_messages, "delay": attrs.delay_messages}


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CRHELPER_STORE", f"sqlite:///{tmp_path / 'state.sqlite'}")
    monkeypatch.setenv("CRHELPER_BACKOFF_BASE", "0.05")
    monkeypatch.setenv("CRHELPER_BACKOFF_CAP", "0.2")


@pytest.fixture()
def start_worker(local_mns: LocalMNS) -> Iterator[Any]:
    made: list[tuple[QueueWorker, Provider]] = []

    def start(provider: Provider, name: str, **kw: Any) -> QueueWorker:
        options: dict[str, Any] = {"wait_seconds": 1, "visibility_timeout": 2, "extend_every": 0.5, "grace": 2.0}
        options.update(kw)
        worker = QueueWorker(provider, endpoint=local_mns.endpoint, queue=name, access_key_id=local_mns.access_key_id,
                             access_key_secret=local_mns.access_key_secret, **options)
        made.append((worker, provider))
        return worker.start()

    yield start
    for worker, provider in made:
        worker.stop(grace=2.0)
        provider.close()


def _subprocess_env(local_mns: LocalMNS, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "ALIBABA_CLOUD_ACCESS_KEY_ID": local_mns.access_key_id,
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET": local_mns.access_key_secret,
            "CRHELPER_STORE": f"sqlite:///{tmp_path / 'state.sqlite'}", "PYTHONPATH": str(REPO), **extra}


def _terminate(process: subprocess.Popen) -> None:
    """SIGTERM a worker subprocess and reap it; SIGKILL it if it does not stop in time."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


# ------------------------------------------------------------------------------- dispositions
def test_disposition_rules() -> None:
    body = {"Status": "SUCCESS"}
    assert disposition(body, True)[0] is Action.DELETE
    assert disposition(body, False)[0] is Action.KEEP
    assert disposition(body, False, final=True)[0] is Action.DELETE
    assert disposition(None, False)[0] is Action.DELETE
    assert disposition(None, False, retry_after=3.2)[0] is Action.DEFER
    assert (defer_visibility(0.2), defer_visibility(3.2), defer_visibility(1e9)) == (1, 4, 43_200)


def test_final_delivery_error_deletes_the_message_once_instead_of_reposting_every_visibility_period(
    local_mns: LocalMNS, queue_name: str, response_server: ResponseServer, start_worker: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = Provider()

    @provider.create("Custom::Echo")
    def create(props: dict, request: Any) -> Result:
        return Result(physical_id="echo")

    event = response_server.attach(make_event("Create", "Custom::Echo", {}), fail_first=100, fail_status=403)
    _queue(local_mns, queue_name).send_message(Message(json.dumps(event)))
    worker = start_worker(provider, queue_name)
    wait_until(lambda: worker.stats()["deleted"] == 1, timeout=10, what="message deleted")
    time.sleep(3.5)  # longer than the queue's 2 s visibility: a kept message would have come back
    stats = worker.stats()
    assert stats["final"] == 1 and stats["kept"] == 0 and stats["received"] == 1, stats
    assert response_server.attempts_for(event["ResponseURL"]) == 1  # a 403 is not retried, nor re-posted
    assert sum(_counts(local_mns, queue_name).values()) == 0


def test_a_request_in_flight_elsewhere_keeps_its_message_and_defers_it(
    local_mns: LocalMNS, queue_name: str, response_server: ResponseServer, start_worker: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRHELPER_STEP_LEASE", "3")
    monkeypatch.setenv("CRHELPER_REENTRY", "none")  # no follow-up can be scheduled: the message must wait
    provider = Provider()

    @provider.create("Custom::Slow")
    def create(props: dict, request: Any) -> Result:
        time.sleep(2.0)
        return Result(physical_id="slow")

    event = response_server.attach(make_event("Create", "Custom::Slow", {}))
    queue = _queue(local_mns, queue_name)
    worker = start_worker(provider, queue_name, concurrency=2, reentry="provider")
    queue.send_message(Message(json.dumps(event)))
    time.sleep(0.5)  # the first copy is running; the duplicate finds it in flight
    queue.send_message(Message(json.dumps(event)))
    wait_until(lambda: worker.stats()["deferred"] >= 1, timeout=6, what="duplicate deferred")
    assert worker.stats()["deleted"] == 0
    assert sum(_counts(local_mns, queue_name).values()) == 2  # neither copy is gone yet
    assert response_server.wait_for(event["RequestId"], timeout=10)["Status"] == "SUCCESS"
    # The deferred copy comes back once the holder's lease could have lapsed, finds the stored answer.
    wait_until(lambda: sum(_counts(local_mns, queue_name).values()) == 0, timeout=10, what="queue drained")
    assert worker.stats()["deleted"] == 2


def test_absurd_bodies_are_poison_deleted_with_a_log_line_never_a_crash(
    local_mns: LocalMNS, queue_name: str, response_server: ResponseServer, start_worker: Any,
) -> None:
    provider = Provider()

    @provider.create("Custom::Echo")
    def create(props: dict, request: Any) -> Result:
        return Result(physical_id="echo")

    good = response_server.attach(make_event("Create", "Custom::Echo", {}))
    queue = _queue(local_mns, queue_name)
    absurd = [
        "[" * 10_000 + "]" * 10_000,
        '{"a":' * 10_000 + "1" + "}" * 10_000,
        base64.b64encode(b"\xff\xfe\x00{not utf-8").decode(),
        base64.b64encode(("{" + '"a":{' * 8_000 + "}" * 8_001).encode()).decode(),
    ]
    for body in absurd:
        queue.send_message(Message(body))
    queue.send_message(Message(json.dumps(good)))
    worker = start_worker(provider, queue_name, concurrency=1)
    assert response_server.wait_for(good["RequestId"], timeout=10)["Status"] == "SUCCESS"
    wait_until(lambda: sum(_counts(local_mns, queue_name).values()) == 0, timeout=10, what="queue drained")
    stats = worker.stats()
    assert stats["poison"] == len(absurd) and stats["deleted"] == len(absurd) + 1 and stats["kept"] == 0, stats


@pytest.mark.parametrize("escape", [KeyboardInterrupt, asyncio.CancelledError, SystemExit])
def test_base_exceptions_from_a_handler_keep_the_message_and_the_thread(
    local_mns: LocalMNS, queue_name: str, response_server: ResponseServer, start_worker: Any,
    monkeypatch: pytest.MonkeyPatch, escape: type[BaseException],
) -> None:
    monkeypatch.setenv("CRHELPER_STEP_LEASE", "1")
    provider = Provider()
    calls: list[str] = []

    @provider.create("Custom::Flaky")
    def create(props: dict, request: Any) -> Result:
        calls.append(request.request_id)
        if len(calls) == 1:
            raise escape()
        return Result(physical_id="flaky")

    @provider.create("Custom::Echo")
    def echo(props: dict, request: Any) -> Result:
        return Result(physical_id="echo")

    flaky = response_server.attach(make_event("Create", "Custom::Flaky", {}))
    after = response_server.attach(make_event("Create", "Custom::Echo", {}))
    queue = _queue(local_mns, queue_name)
    worker = start_worker(provider, queue_name, concurrency=1)
    queue.send_message(Message(json.dumps(flaky)))
    wait_until(lambda: calls, timeout=10, what="handler called")
    queue.send_message(Message(json.dumps(after)))
    assert response_server.wait_for(after["RequestId"], timeout=10)["Status"] == "SUCCESS"  # the thread lived
    # Either the provider answered FAILED itself, or the kept message was redelivered and succeeded.
    answer = response_server.wait_for(flaky["RequestId"], timeout=15)
    assert answer["Status"] in ("SUCCESS", "FAILED")
    wait_until(lambda: sum(_counts(local_mns, queue_name).values()) == 0, timeout=15, what="queue drained")
    assert len({json.dumps(b, sort_keys=True) for b in response_server.responses_for(flaky["RequestId"])}) == 1
    assert worker.stats()["received"] >= 2


# ------------------------------------------------------------------------------------ SIGTERM
SLOW_PROVIDER = textwrap.dedent('''
    import time
    from pathlib import Path
    from crhelper import Provider, Result

    provider = Provider()

    @provider.create("Custom::Slow")
    def create(props, request):
        Path(props["Marker"]).write_text("started")
        time.sleep(float(props["Seconds"]))
        return Result(physical_id="slow")
''')


def test_sigterm_after_the_grace_leaves_running_messages_visible_soon_and_exits_0(
    local_mns: LocalMNS, queue_name: str, response_server: ResponseServer, tmp_path: Path,
) -> None:
    (tmp_path / "slow_provider.py").write_text(SLOW_PROVIDER)
    marker = tmp_path / "started"
    event = response_server.attach(make_event("Create", "Custom::Slow", {"Marker": str(marker), "Seconds": 60}))
    _queue(local_mns, queue_name).send_message(Message(json.dumps(event)))
    process = subprocess.Popen(
        [sys.executable, "-m", "crhelper.cli.worker", f"{tmp_path / 'slow_provider.py'}:provider",
         "--queue", queue_name, "--endpoint", local_mns.endpoint, "--wait-seconds", "1",
         "--visibility-timeout", "60", "--grace", "1"],
        env=_subprocess_env(local_mns, tmp_path), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        wait_until(marker.exists, timeout=15, what="handler started")
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
        exited = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr.decode()[-3000:]
    assert exited < 8, exited
    # Visible again within seconds, not after the 60 s visibility the worker had been extending.
    wait_until(lambda: _counts(local_mns, queue_name)["active"] == 1, timeout=5, what="message visible again")
    logs = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    assert any(entry.get("released") == 1 for entry in logs), stderr.decode()[-3000:]


# -------------------------------------------------------------------------- SIGKILL + restart



def test_restarted_worker_resumes_an_operation_left_by_a_sigkilled_one_without_any_new_message(
    local_mns: LocalMNS, queue_name: str, response_server: ResponseServer, tmp_path: Path,
) -> None:
    (tmp_path / "steps_provider.py").write_text(KILLED_STEP_PROVIDER)
    marker = tmp_path / "hanging"
    event = response_server.attach(make_event("Create", "Custom::Steps", {"Marker": str(marker)}))
    _queue(local_mns, queue_name).send_message(Message(json.dumps(event)))
    env = _subprocess_env(local_mns, tmp_path, CRHELPER_STEP_LEASE="2")
    command = [sys.executable, "-m", "crhelper.cli.worker", f"{tmp_path / 'steps_provider.py'}:provider",
               "--queue", queue_name, "--endpoint", local_mns.endpoint, "--wait-seconds", "1",
               "--reentry", "provider"]  # continuations on the provider's in-process timers: lost on SIGKILL
    first = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(marker.exists, timeout=15, what="second step running")
        first.kill()
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    assert response_server.responses_for(event["RequestId"]) == []
    assert sum(_counts(local_mns, queue_name).values()) == 0  # the queue holds nothing that could drive it
    restarted = time.monotonic()
    second = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        body = response_server.wait_for(event["RequestId"], timeout=12)
        took = time.monotonic() - restarted
    finally:
        _terminate(second)
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Attempt": 1}, body
    assert took < 12  # the 2 s step lease, then the restarted worker's own recovery
    assert len(response_server.responses_for(event["RequestId"])) == 1
    assert second.returncode == 0


FIRST_STEP_PROVIDER = '''
import os, time
from pathlib import Path
from crhelper import Provider, Result

provider = Provider()

@provider.create("Custom::Once")
def create(props, request):
    marker = Path(props["Marker"])
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        time.sleep(120)  # the first worker is SIGKILLed here, one second in
    return Result(physical_id="once-1")
'''


def test_worker_killed_one_second_into_a_handler_is_answered_by_the_redelivery(
    local_mns: LocalMNS, queue_name: str, response_server: ResponseServer, tmp_path: Path,
) -> None:
    """Default lease settings: the redelivered message finds the dead worker's claim; its holder is
    known dead (same machine, pid gone), so the request runs again instead of being deleted unanswered."""
    (tmp_path / "once_provider.py").write_text(FIRST_STEP_PROVIDER)
    marker = tmp_path / "started"
    event = response_server.attach(make_event("Create", "Custom::Once", {"Marker": str(marker)}))
    _queue(local_mns, queue_name).send_message(Message(json.dumps(event)))
    env = _subprocess_env(local_mns, tmp_path)
    env.pop("CRHELPER_STEP_LEASE", None)
    command = [sys.executable, "-m", "crhelper.cli.worker", f"{tmp_path / 'once_provider.py'}:provider",
               "--queue", queue_name, "--endpoint", local_mns.endpoint, "--wait-seconds", "1",
               "--visibility-timeout", "3"]  # redelivery 3 s after the kill, well inside the 60 s lease
    first = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(marker.exists, timeout=15, what="handler started")
        time.sleep(1.0)
        first.kill()
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    second = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        body = response_server.wait_for(event["RequestId"], timeout=15)
        wait_until(lambda: sum(_counts(local_mns, queue_name).values()) == 0, timeout=10, what="queue drained")
    finally:
        _terminate(second)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "once-1", body
    time.sleep(0.3)
    assert len(response_server.responses_for(event["RequestId"])) == 1
