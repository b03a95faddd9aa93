"""Typed operation state: every supported kind survives the JSON round trip; mistakes in declaring
an operation are refused when the provider module loads, not on the first request."""

from __future__ import annotations

import dataclasses
import enum

import msgspec
import pytest
from pydantic import BaseModel

from crhelper import Request, Result, operations, tiers
from crhelper.operations import Budget
from crhelper.operations.codec import StateError, dump, load
from crhelper.testing import make_event


class Phase(enum.Enum):
    STARTING = "starting"
    READY = "ready"


@dataclasses.dataclass
class Nested:
    phase: Phase = Phase.STARTING
    ids: tuple[str, ...] = ()
    progress: tiers.TierProgress | None = None


class Model(BaseModel):
    count: int = 0
    inner: Nested = Nested()


class Struct(msgspec.Struct):
    count: int = 0
    progress: tiers.TierProgress | None = None


@dataclasses.dataclass
class Named:
    name: str


class Props(BaseModel):
    Name: str


@pytest.mark.parametrize("value", [
    Nested(Phase.READY, ("i-1", "i-2"), tiers.plan({"a": 0, "b": 1})),
    Model(count=3, inner=Nested(Phase.READY)),
    Struct(count=2, progress=tiers.plan({"a": 5}, descending=True)),
], ids=["dataclass", "pydantic", "msgspec"])
def test_every_kind_of_state_survives_the_json_round_trip(value):
    raw = dump(value)
    assert load(type(value), raw) == value


def test_a_state_that_cannot_be_json_is_named():
    @dataclasses.dataclass
    class Holder:
        thing: object = None

    with pytest.raises(StateError, match="Holder cannot be stored as JSON"):
        dump(Holder(thing=object()))


def test_declaration_mistakes_are_refused_at_import_time(providers):
    provider = providers()

    @dataclasses.dataclass
    class NeedsId:
        id: str

    with pytest.raises(TypeError, match=r"state NeedsId has fields without defaults \(id\): give them defaults or pass start="):
        operations.create(provider, "Custom::A", state=NeedsId)(lambda props, state, request, budget: None)
    with pytest.raises(TypeError, match="must be a dataclass, a pydantic model or a msgspec Struct"):
        operations.create(provider, "Custom::A", state=dict)(lambda props, state, request, budget: None)
    with pytest.raises(TypeError, match=r"the Update step .* must take \(props, old, state, request, budget\)"):
        operations.update(provider, "Custom::A", state=Nested)(lambda props, state, request, budget: None)
    with pytest.raises(ValueError, match="step_seconds must be a positive number of seconds, got 0"):
        operations.create(provider, "Custom::A", state=Nested, step_seconds=0)(lambda props, state, request, budget: None)
    assert provider.types == []  # nothing half-registered


def test_start_builds_the_first_state_and_one_step_needs_no_store(response_server, providers, monkeypatch):
    monkeypatch.setenv("CRHELPER_STORE", "none")
    provider = providers()

    @operations.create(provider, "Custom::Named", state=Named, start=lambda props, request: Named(props.Name))
    def create(props: Props, state: Named, request: Request, budget: Budget) -> Result:
        return Result(physical_id=state.name, data={"Left": budget.left() > 0})

    event = response_server.attach(make_event("Create", "Custom::Named", {"Name": "n-1"}))
    body = provider.handle(event)
    assert body is not None and body["PhysicalResourceId"] == "n-1" and body["Data"] == {"Left": True}
    event = response_server.attach(make_event("Create", "Custom::Named", {}))
    body = provider.handle(event)  # the step's properties type is validated like any handler's
    assert body is not None and body["Reason"] == "invalid ResourceProperties: ResourceProperties.Name: Field required"
