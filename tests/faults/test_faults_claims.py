"""A holder that dies mid-handler must never block its own redelivery, and a duplicate that arrives
while a live holder works must never vanish: real processes on one shared SQLite store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from crhelper import Provider, Result
from crhelper.testing import make_event

pytestmark = pytest.mark.slow

PROVIDER = textwrap.dedent('''
    import os, time
    from crhelper import Provider, Result

    provider = Provider()
    CALLS = os.environ["CALLS_FILE"]

    @provider.create("Custom::Slow")
    def create(props, request):
        with open(CALLS, "a") as f:
            f.write(f"{os.getpid()}\\n")
        if os.environ.get("DIE_IN_HANDLER") == "exit":
            os._exit(3)
        time.sleep(float(os.environ.get("HANDLER_SLEEP", "0")))
        return Result(physical_id=f"slow-{os.getpid()}")
''')

# An FC-like invocation: a context with a function timeout, as Function Compute passes it.
RUNNER = textwrap.dedent('''
    import sys, time
    from types import SimpleNamespace
    sys.path.insert(0, sys.argv[1])
    from slow_provider import provider
    context = SimpleNamespace(request_id="r", credentials=None, function=SimpleNamespace(name="fn", timeout=30),
                              service=SimpleNamespace(name="svc", qualifier=None))
    print(provider.fc_handler(open(sys.argv[2], "rb").read(), context), flush=True)
''')


def _calls(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    (tmp_path / "slow_provider.py").write_text(PROVIDER)
    (tmp_path / "runner.py").write_text(RUNNER)
    env = {
        **os.environ,
        "CRHELPER_STORE": f"sqlite:///{tmp_path / 'state.sqlite'}",
        "CRHELPER_REENTRY": "local",
        "CALLS_FILE": str(tmp_path / "calls.txt"),
        "CRHELPER_LOG_LEVEL": "WARNING",
    }
    return tmp_path, env


def _invoke(workspace, event, **extra_env) -> subprocess.Popen:
    tmp_path, env = workspace
    path = tmp_path / f"event-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(event))
    return subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(tmp_path), str(path)],
                            env={**env, **extra_env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_calls(path: Path, count: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while len(_calls(path)) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(_calls(path)) >= count, "the handler never started"


@pytest.mark.parametrize("death", ["exit", "sigkill"])
def test_redelivery_after_the_holder_died_takes_over_at_once(workspace, response_server, death):
    tmp_path, _ = workspace
    event = response_server.attach(make_event("Create", "Custom::Slow"))
    first = _invoke(workspace, event, DIE_IN_HANDLER="exit" if death == "exit" else "", HANDLER_SLEEP="60")
    try:
        _wait_calls(tmp_path / "calls.txt", 1)
        if death == "sigkill":
            os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    # The redelivery comes well inside the step lease (the FC timeout, 30 s): the dead holder is
    # recognised by its pid and start time, so the request runs again now instead of vanishing.
    started = time.monotonic()
    second = _invoke(workspace, event, HANDLER_SLEEP="0")
    out, err = second.communicate(timeout=20)
    assert second.returncode == 0, err
    body = response_server.wait_for(event["RequestId"], timeout=5)
    assert body["Status"] == "SUCCESS", body
    assert time.monotonic() - started < 10
    assert len(_calls(tmp_path / "calls.txt")) == 2
    time.sleep(0.3)
    assert len(response_server.responses_for(event["RequestId"])) == 1


def test_duplicate_while_a_live_holder_works_is_absorbed_and_answered_once(workspace, response_server):
    tmp_path, _ = workspace
    event = response_server.attach(make_event("Create", "Custom::Slow"))
    first = _invoke(workspace, event, HANDLER_SLEEP="2")
    try:
        _wait_calls(tmp_path / "calls.txt", 1)
        second = _invoke(workspace, event, HANDLER_SLEEP="0")
        out, err = second.communicate(timeout=20)
        assert second.returncode == 0, err
        assert "PENDING" in out  # nothing sent by the duplicate: the live holder answers
        first.communicate(timeout=20)
    finally:
        if first.poll() is None:
            first.kill()
    body = response_server.wait_for(event["RequestId"], timeout=5)
    assert body["PhysicalResourceId"] == f"slow-{first.pid}"
    assert len(_calls(tmp_path / "calls.txt")) == 1
    time.sleep(0.3)
    assert len(response_server.responses_for(event["RequestId"])) == 1


def test_a_live_holder_renews_its_lease_so_a_duplicate_past_it_does_not_run_twice(tmp_path, monkeypatch, response_server):
    """The step lease is short (1 s); the holder renews it while its handler runs for 3 s."""
    monkeypatch.setenv("CRHELPER_STORE", f"sqlite:///{tmp_path / 'state.sqlite'}")
    monkeypatch.setenv("CRHELPER_STEP_LEASE", "1")
    monkeypatch.setenv("CRHELPER_REENTRY", "local")
    calls: list[int] = []
    release = threading.Event()
    provider = Provider()

    @provider.create("Custom::Long")
    def create(props, request):
        calls.append(request.attempt)
        release.wait(10)
        return Result(physical_id="long-1")

    event = response_server.attach(make_event("Create", "Custom::Long"))
    first = threading.Thread(target=provider.handle, args=(event,))
    try:
        first.start()
        while not calls:
            time.sleep(0.01)
        time.sleep(2.5)  # more than twice the lease
        outcome = provider.process(event)
        assert outcome.body is None and calls == [0]
        release.set()
        first.join(10)
        assert response_server.wait_for(event["RequestId"])["PhysicalResourceId"] == "long-1"
        time.sleep(2.0)  # the follow-up the duplicate left fires, finds the answer, sends nothing
        assert calls == [0]
        assert len(response_server.responses_for(event["RequestId"])) == 1
    finally:
        release.set()
        first.join(10)
        provider.close()


def test_recovery_finds_an_abandoned_first_step_with_no_redelivery(workspace, response_server, monkeypatch):
    """Nobody redelivers: the claim the dead holder left is found by recovery (scheduler, timer, worker)."""
    tmp_path, env = workspace
    event = response_server.attach(make_event("Create", "Custom::Slow"))
    first = _invoke(workspace, event, DIE_IN_HANDLER="exit")
    first.communicate(timeout=20)
    assert first.returncode == 3
    for name in ("CRHELPER_STORE", "CRHELPER_REENTRY", "CALLS_FILE"):
        monkeypatch.setenv(name, env[name])
    provider = _load_provider(tmp_path)
    try:
        assert provider.recover() == 1  # the dead holder's pid is gone: its step is taken over at once
        body = response_server.wait_for(event["RequestId"], timeout=5)
        assert body["Status"] == "SUCCESS"
        assert provider.recover() == 0
    finally:
        provider.close()
    assert len(response_server.responses_for(event["RequestId"])) == 1


def _load_provider(tmp_path: Path) -> Provider:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"slow_provider_{time.monotonic_ns()}", tmp_path / "slow_provider.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    provider: Provider = module.provider
    return provider


def test_a_provider_recovers_only_the_store_it_has_been_using(workspace, response_server, monkeypatch):
    """A provider whose recovery passes started under one CRHELPER_HOME leaves the orphans of a store
    under another home alone, even once CRHELPER_HOME names that home: its handlers are not that
    store's, so it would answer another provider's operation with its own code. A provider of that
    store takes the orphan over."""
    tmp_path, env = workspace
    first_home, second_home = tmp_path / "first-home", tmp_path / "second-home"
    for name in ("CRHELPER_STORE", "FC_FUNCTION_NAME", "FC_FUNC_CODE_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CRHELPER_HOME", str(first_home))
    monkeypatch.setenv("CRHELPER_REENTRY", "local")
    monkeypatch.setenv("CRHELPER_STEP_LEASE", "1")  # a recovery pass every second
    stranger = Provider()
    answered: list[str] = []

    @stranger.create("Custom::Slow")
    def create(props, request):
        answered.append(request.request_id)
        return Result(physical_id="stranger")

    warm_up = response_server.attach(make_event("Create", "Custom::Slow"))
    try:
        stranger.handle(warm_up)  # its local scheduler and its recovery passes run from now on
        assert answered == [warm_up["RequestId"]]
        orphan = response_server.attach(make_event("Create", "Custom::Slow"))
        # The dying provider runs outside FC (its step lease is the 1 s setting), in the second home.
        child_env = {**{k: v for k, v in env.items() if k != "CRHELPER_STORE"}, "DIE_IN_HANDLER": "exit",
                     "CRHELPER_HOME": str(second_home), "CRHELPER_STEP_LEASE": "1"}
        child = subprocess.run(
            [sys.executable, "-c", "import json, sys; sys.path.insert(0, sys.argv[1]); from slow_provider import provider;"
             " provider.handle(json.loads(sys.argv[2]))", str(tmp_path), json.dumps(orphan)],
            env=child_env, capture_output=True, text=True, timeout=20)
        assert child.returncode == 3 and len(_calls(tmp_path / "calls.txt")) == 1, child.stderr
        monkeypatch.setenv("CRHELPER_HOME", str(second_home))
        time.sleep(3.0)  # two or three recovery passes of the stranger
        assert answered == [warm_up["RequestId"]]
        assert response_server.responses_for(orphan["RequestId"]) == []
        for name in ("CRHELPER_REENTRY", "CALLS_FILE"):
            monkeypatch.setenv(name, env[name])
        owner = _load_provider(tmp_path)  # the store's own provider, default store under second-home
        try:
            assert owner.recover() == 1
            body = response_server.wait_for(orphan["RequestId"], timeout=5)
            assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"].startswith("slow-")
        finally:
            owner.close()
    finally:
        stranger.close()
    assert len(response_server.responses_for(orphan["RequestId"])) == 1
