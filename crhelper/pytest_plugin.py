"""pytest fixtures for testing ROS providers locally (entry point `pytest11: crhelper = crhelper.pytest_plugin`).

    def test_greeting(ros_event, ros_response_server):
        event = ros_event("Create", "Custom::Greeting", {"Name": "x"})
        provider.handle(event)
        assert ros_response_server.wait_for(event["RequestId"])["Status"] == "SUCCESS"

    def test_contract(run_contract):
        report = run_contract(provider, "Custom::Greeting", {"Name": "x"}, update={"Name": "x", "Times": 2})
        assert report.passed, report.failures()

    def test_stack(stack_emulator, stack_delivery):
        with stack_delivery({"acs:fc:cn-hangzhou:123456789:functions/greeting": "samples/greeting.py:provider"}) as deliver:
            stack_emulator.create("demo", template_text, {}, deliver)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from .emulator.protocol import StackContext, build_request


@pytest.fixture
def ros_response_server() -> Iterator[Any]:
    """A started `ResponseServer` (real HTTP on 127.0.0.1), stopped after the test."""
    from .local.response_server import ResponseServer

    with ResponseServer() as server:
        yield server


@pytest.fixture
def ros_event(ros_response_server: Any) -> Callable[..., dict[str, Any]]:
    """`ros_event(request_type, resource_type, properties, physical_id=None, old=None, **faults)`:
    a ROS request with fresh ResponseURLs on `ros_response_server` (faults: fail_first, fail_status, delay)."""
    context = StackContext(f"pytest-{uuid.uuid4()}", "pytest-stack", "cn-hangzhou", "123456789")

    def make(
        request_type: str,
        resource_type: str,
        properties: Mapping[str, Any] | None = None,
        physical_id: str | None = None,
        old: Mapping[str, Any] | None = None,
        *,
        logical_id: str = "Resource",
        **faults: Any,
    ) -> dict[str, Any]:
        event = build_request(context, request_type, logical_id, resource_type, dict(properties or {}), physical_id,
                              dict(old) if old is not None else None)
        return ros_response_server.attach(event, **faults)

    return make


@pytest.fixture
def stack_emulator(tmp_path: Path) -> Iterator[Any]:
    """A `StackEmulator` whose state lives in the test's tmp_path."""
    from .emulator import StackEmulator

    with StackEmulator(tmp_path / "crhelper-home") as emulator:
        yield emulator


@pytest.fixture
def stack_delivery() -> Iterator[Callable[..., Any]]:
    """`stack_delivery({token: "module:provider"}, mode="inprocess", **faults)` -> a StackDelivery (use with `with`)."""
    from .emulator.delivery import StackDelivery
    from .emulator.delivery_bindings import Bindings, Faults

    made: list[Any] = []

    def make(providers: Mapping[str, str], mode: str = "inprocess", **faults: Any) -> Any:
        bindings = Bindings(mode=mode, faults=Faults(**faults)).with_flags(f"{t}={s}" for t, s in providers.items())
        delivery = StackDelivery(bindings)
        made.append(delivery)
        return delivery

    yield make
    for delivery in made:
        delivery.stop()


@pytest.fixture
def run_contract() -> Callable[..., Any]:
    """`run_contract(provider, type, properties, update=None, secrets=(), budget=60) -> ContractReport`."""
    from .contract import run_contract as run

    return run
