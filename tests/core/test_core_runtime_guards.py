"""The guards that make 'exactly one response' hold: deadlines, import failures, log hygiene."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from types import SimpleNamespace

import pytest

from crhelper import Provider, Result
from crhelper.fc import lazy_handler
from crhelper.testing import make_event


def fc_context(timeout: float) -> SimpleNamespace:
    return SimpleNamespace(request_id="r", function=SimpleNamespace(timeout=timeout, name="f"))


@pytest.mark.slow
def test_handler_near_the_deadline_is_answered_failed_once_and_late_result_dropped(response_server):
    finished = threading.Event()
    provider = Provider()

    @provider.create("Custom::Slow")
    def create(props, request):
        time.sleep(2.0)
        finished.set()
        return Result(physical_id="late")

    event = response_server.attach(make_event("Create", "Custom::Slow"))
    started = time.monotonic()
    provider.handle(event, fc_context(timeout=1.5))
    elapsed = time.monotonic() - started
    body = response_server.wait_for(event["RequestId"])
    assert body["Status"] == "FAILED" and body["Reason"].startswith("timed out")
    assert elapsed < 1.5  # answered before the platform would kill the function
    assert finished.wait(3)  # the handler finished later ...
    time.sleep(0.2)
    assert len(response_server.captures) == 1  # ... and its result was dropped


def test_a_fast_handler_under_a_deadline_is_answered_normally(response_server):
    provider = Provider()
    provider.create("Custom::Fast")(lambda props, request: Result(physical_id="fast"))
    event = response_server.attach(make_event("Create", "Custom::Fast"))
    provider.handle(event, fc_context(timeout=30))
    assert response_server.wait_for(event["RequestId"])["PhysicalResourceId"] == "fast"


def test_lambda_style_remaining_time_is_understood(response_server):
    provider = Provider()

    @provider.create("Custom::Slow")
    def create(props, request):
        time.sleep(1.5)

    context = SimpleNamespace(get_remaining_time_in_millis=lambda: 1000)
    event = response_server.attach(make_event("Create", "Custom::Slow"))
    provider.handle(event, context)
    assert response_server.wait_for(event["RequestId"])["Reason"].startswith("timed out")


def test_import_failure_is_answered_failed_on_every_request(response_server, tmp_path, monkeypatch):
    (tmp_path / "broken_provider.py").write_text("import this_module_does_not_exist\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    handler = lazy_handler("broken_provider:provider")
    for _ in range(2):
        event = response_server.attach(make_event("Create", "Custom::Any"))
        returned = json.loads(handler(json.dumps(event).encode(), None))
        body = response_server.wait_for(event["RequestId"])
        assert body == returned
        assert body["Status"] == "FAILED"
        assert body["Reason"] == (
            "provider failed to initialise: ModuleNotFoundError: No module named 'this_module_does_not_exist'"
        )


def test_module_raising_at_import_and_missing_attribute(response_server, tmp_path, monkeypatch):
    (tmp_path / "raising_provider.py").write_text("raise RuntimeError('no config file')\n")
    (tmp_path / "empty_provider.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec, reason in [
        ("raising_provider:provider", "RuntimeError: no config file"),
        ("empty_provider:provider", "module 'empty_provider' has no attribute 'provider'"),
        ("empty_provider:x", "is a int, not a crhelper Provider"),
    ]:
        event = response_server.attach(make_event("Create", "Custom::Any"))
        lazy_handler(spec)(json.dumps(event), None)
        assert reason in response_server.wait_for(event["RequestId"])["Reason"]


def test_env_configured_lazy_handler_loads_the_provider(response_server, tmp_path, monkeypatch):
    (tmp_path / "good_provider.py").write_text(textwrap.dedent("""
        from crhelper import Provider, Result
        provider = Provider()
        provider.create("Custom::Good")(lambda props, request: Result(physical_id="good"))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CRHELPER_PROVIDER", "good_provider:provider")
    event = response_server.attach(make_event("Create", "Custom::Good"))
    lazy_handler()(json.dumps(event).encode(), fc_context(10))
    assert response_server.wait_for(event["RequestId"])["PhysicalResourceId"] == "good"


def test_unset_provider_setting_is_explained(response_server, monkeypatch):
    monkeypatch.delenv("CRHELPER_PROVIDER", raising=False)
    event = response_server.attach(make_event("Create", "Custom::Any"))
    lazy_handler()(json.dumps(event), None)
    assert "CRHELPER_PROVIDER is not set" in response_server.wait_for(event["RequestId"])["Reason"]


def test_log_lines_are_json_with_request_fields_and_no_url_query(response_server, capsys, monkeypatch):
    monkeypatch.setenv("CRHELPER_LOG_LEVEL", "DEBUG")
    provider = Provider()
    provider.create("Custom::Log")(lambda props, request: Result(physical_id="p"))
    event = response_server.attach(make_event("Create", "Custom::Log"))
    provider.handle(event)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert lines, "expected log lines"
    for entry in lines:
        for field in ("RequestId", "StackId", "LogicalResourceId", "ResourceType"):
            assert entry[field] == event[field]
    text = json.dumps(lines)
    assert "Signature=" not in text and "Expires=" not in text


def test_log_level_is_configurable(response_server, capsys, monkeypatch):
    monkeypatch.setenv("CRHELPER_LOG_LEVEL", "ERROR")
    provider = Provider()
    provider.create("Custom::Log")(lambda props, request: Result(physical_id="p"))
    provider.handle(response_server.attach(make_event("Create", "Custom::Log")))
    assert capsys.readouterr().err == ""


def test_bad_configuration_is_named(monkeypatch):
    from crhelper.config import ConfigError, Settings

    monkeypatch.setenv("CRHELPER_RESPONSE_METHOD", "PATCH")
    with pytest.raises(ConfigError, match="CRHELPER_RESPONSE_METHOD: must be one of POST, PUT, got 'PATCH'"):
        Settings.from_env()


def test_bad_configuration_still_answers_failed(response_server, monkeypatch):
    monkeypatch.setenv("CRHELPER_RESPONSE_METHOD", "PATCH")
    provider = Provider()
    provider.create("Custom::Any")(lambda props, request: Result(physical_id="p"))
    event = response_server.attach(make_event("Create", "Custom::Any"))
    provider.handle(event)
    reason = response_server.wait_for(event["RequestId"])["Reason"]
    assert reason == "provider misconfigured: CRHELPER_RESPONSE_METHOD: must be one of POST, PUT, got 'PATCH'"


def test_unusable_store_setting_still_answers_failed(response_server, monkeypatch):
    monkeypatch.setenv("CRHELPER_STORE", "redis://somewhere")
    provider = Provider()
    provider.create("Custom::Any")(lambda props, request: Result(physical_id="p"))
    event = response_server.attach(make_event("Create", "Custom::Any"))
    provider.handle(event)
    reason = response_server.wait_for(event["RequestId"])["Reason"]
    assert reason.startswith("state store unavailable: CRHELPER_STORE")
