"""`crhelper contract` on Custom::AppCluster with the sample package on the local backend: every
check of the provider contract, the long-running one with a lifecycle split into InProgress steps."""

from __future__ import annotations

import pytest

from appcenter_resource_support import SAMPLE
from crhelper.contract import run_contract
from crhelper.local.supervisor import SupervisorClient

pytestmark = pytest.mark.slow


def test_the_provider_contract_passes_with_the_lifecycle_in_inprogress_steps(
        supervisor: SupervisorClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from handlers.appcenter.provider import build_provider

    monkeypatch.setenv("CRHELPER_APPCENTER_STEP_BUDGET", "0.2")  # a step walks 0.2 s, then continues later
    provider = build_provider()
    try:
        props = {"Package": str(SAMPLE), "Version": "1.0.0", "Inputs": {"env.port": 18094}}
        update = {**props, "Inputs": {"env.port": 18094, "env.greeting": "hey"}}
        report = run_contract(provider, "Custom::AppCluster", props, update, budget=60)
    finally:
        provider.close()
    assert report.passed, [f"{c.name}: {c.detail}" for c in report.failures()]
    assert report.check("long-running").passed  # not skipped: the Create answered InProgress first
    assert [s.name for s in supervisor.list() if s.running] == []  # every cluster it made was deleted
