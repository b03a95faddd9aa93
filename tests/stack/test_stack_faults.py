"""Fault injection: duplicate delivery, ResponseURL errors, a slow ResponseURL, a killed FC worker, timeouts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from stack_support import FC2, FC3, echo_template, spec

from crhelper.emulator import StackEmulator
from crhelper.emulator.delivery import StackDelivery
from crhelper.emulator.delivery_bindings import Bindings, Faults


@pytest.fixture
def emulator(home: Path) -> Iterator[StackEmulator]:
    with StackEmulator(home) as instance:
        yield instance


def bound(token: str, attribute: str = "provider", *, mode: str = "endpoints", **faults: Any) -> Bindings:
    return Bindings(faults=Faults(**faults), mode=mode).with_flags([f"{token}={spec(attribute)}"])


def attempts(deliver: StackDelivery) -> list[int]:
    return [c.status for c in deliver.server.captures]


def test_duplicate_delivery_of_an_idempotent_provider_succeeds(emulator: StackEmulator) -> None:
    with StackDelivery(bound(FC3, duplicate=True, mode="inprocess")) as deliver:
        created = emulator.create("dup", echo_template(FC3), {}, deliver)
    assert created.status == "CREATE_COMPLETE", created.status_reason
    assert attempts(deliver) == [200]  # answered once: the duplicate finds its answer delivered


def test_duplicate_delivery_exposes_a_provider_that_invents_a_new_id(emulator: StackEmulator) -> None:
    with StackDelivery(bound(FC3, "rogue", duplicate=True, mode="inprocess")) as deliver:
        failed = emulator.create("dup", echo_template(FC3, {"Echo": {"Break": "random-id"}}), {}, deliver, disable_rollback=True)
    assert failed.resources[0].status_reason == (
        "the Create response broke the ROS protocol: a second, different response was sent for the same request"
    )


def test_responseurl_errors_for_the_first_tries_are_retried_by_the_provider(emulator: StackEmulator) -> None:
    with StackDelivery(bound(FC3, response_fail_first=2, response_fail_status=503, mode="inprocess")) as deliver:
        created = emulator.create("flaky", echo_template(FC3), {}, deliver)
    assert created.status == "CREATE_COMPLETE", created.status_reason
    assert attempts(deliver) == [503, 503, 200]


def test_responseurl_that_never_accepts_fails_the_resource_with_the_count(emulator: StackEmulator) -> None:
    with StackDelivery(bound(FC3, response_fail_first=50, mode="inprocess")) as deliver:
        failed = emulator.create("down", echo_template(FC3), {}, deliver, disable_rollback=True)
    refused = len(attempts(deliver))
    assert refused >= 2
    assert failed.resources[0].status_reason == (
        "the provider returned without an accepted response at the ResponseURL "
        f"(the ResponseURL refused {refused} attempt(s) with HTTP 500)"
    )


def test_slow_responseurl_still_completes(emulator: StackEmulator) -> None:
    with StackDelivery(bound(FC3, response_delay=0.4, mode="inprocess")) as deliver:
        started = time.monotonic()
        created = emulator.create("slow", echo_template(FC3), {}, deliver)
        elapsed = time.monotonic() - started
    assert created.status == "CREATE_COMPLETE", created.status_reason
    assert elapsed >= 0.4


@pytest.mark.slow
def test_killed_fc_worker_is_retried_by_fc_and_the_stack_completes(emulator: StackEmulator) -> None:
    with StackDelivery(bound(FC2, kill_provider=True)) as deliver:
        created = emulator.create("killed", echo_template(FC2), {}, deliver)
        assert deliver.fc.fc.wait_idle(5)
        record = deliver.fc.fc.records[0]
    assert created.status == "CREATE_COMPLETE", created.status_reason
    assert [a.outcome for a in record.attempts] == ["error", "success"]
    assert "exited unexpectedly" in (record.attempts[0].error_message or "")


@pytest.mark.slow
def test_fc_worker_killed_mid_handler_is_retried_and_the_stack_completes(emulator: StackEmulator) -> None:
    template = echo_template(FC2, {"Slow": {"Name": "slow", "CreateSleep": 1.0}})
    with StackDelivery(bound(FC2, kill_provider=True, kill_provider_after=0.3)) as deliver:
        created = emulator.create("killed-mid", template, {}, deliver)
        assert deliver.fc.fc.wait_idle(5)
        record = deliver.fc.fc.records[0]
    assert created.status == "CREATE_COMPLETE", created.status_reason
    assert [a.outcome for a in record.attempts] == ["error", "success"]
    first = record.attempts[0]
    assert first.ended - first.started >= 0.3  # it died inside the handler, not at its entry


def test_kill_fault_leaves_other_routes_alone(emulator: StackEmulator) -> None:
    with StackDelivery(bound(FC3, kill_provider=True, mode="inprocess")) as deliver:
        created = emulator.create("nokill", echo_template(FC3), {}, deliver)
    assert created.status == "CREATE_COMPLETE" and deliver.delivered[0].route == "inprocess"


@pytest.mark.slow
def test_resource_timeout_is_enforced_and_rolled_back(emulator: StackEmulator) -> None:
    # Through local FC, so the stuck worker process is killed when the operation's endpoints stop.
    template = echo_template(FC2, {"Quick": {"Name": "q"}, "Stuck": {"Name": "s", "Sleep": 3}}, timeout=1)
    with StackDelivery(bound(FC2)) as deliver:
        started = time.monotonic()
        failed = emulator.create("stuck", template, {}, deliver)
        elapsed = time.monotonic() - started
    stuck = next(r for r in failed.resources if r.logical_id == "Stuck")
    assert failed.status == "CREATE_ROLLBACK_COMPLETE"
    assert stuck.status == "DELETE_COMPLETE" or stuck.status_reason.startswith("timed out after 1 s")
    assert "Resource Stuck failed: timed out after 1 s" in failed.status_reason
    assert elapsed < 2.9
