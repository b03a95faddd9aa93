"""The fleet's state machine on a fake clock: every transition after its delay, in order, with the
checks ECS makes (cloud-apis.md §2); Cloud Assistant statuses and their aggregate."""

from __future__ import annotations

import pytest

from crhelper.local.ecs_state import (
    DELETED, EcsError, EcsTimings, Fleet, InstanceSpec, aggregate_status, capped, fill, loopback_address,
    placeholders,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture()
def fleet(clock: FakeClock) -> Fleet:
    return Fleet(timings=EcsTimings(pending=1, starting=2, stopping=3, forced_stopping=0.5), clock=clock)


def _at(fleet: Fleet, clock: FakeClock, when: float) -> str:
    clock.now = when
    fleet.advance()
    return fleet.instances()[0].status


def test_start_moves_through_starting_to_running_after_its_delay(fleet: Fleet, clock: FakeClock) -> None:
    instance = fleet.add(InstanceSpec())
    fleet.start(instance.instance_id)
    assert _at(fleet, clock, 1_001.9) == "Starting"
    assert _at(fleet, clock, 1_002.0) == "Running"
    assert [(t.old, t.new, t.at) for t in fleet.drain()] == [("Stopped", "Starting", 1_000.0),
                                                              ("Starting", "Running", 1_002.0)]


def test_a_late_advance_catches_up_each_step_at_its_own_time(fleet: Fleet, clock: FakeClock) -> None:
    instance = fleet.add(InstanceSpec(), "Running")
    fleet.drain()
    fleet.reboot(instance.instance_id)
    assert _at(fleet, clock, 1_100.0) == "Running"
    assert [(t.old, t.new, t.at) for t in fleet.drain()] == [
        ("Running", "Stopping", 1_000.0), ("Stopping", "Starting", 1_003.0), ("Starting", "Running", 1_005.0)]


def test_forced_stop_is_quicker_and_marked_forced(fleet: Fleet, clock: FakeClock) -> None:
    instance = fleet.add(InstanceSpec(), "Running")
    fleet.stop(instance.instance_id, forced=True, stopped_mode="StopCharging")
    assert _at(fleet, clock, 1_000.5) == "Stopped"
    assert all(t.forced for t in fleet.drain()[1:])
    assert fleet.get(instance.instance_id).stopped_mode == "StopCharging"


def test_wrong_state_is_refused_and_changes_nothing(fleet: Fleet, clock: FakeClock) -> None:
    instance = fleet.add(InstanceSpec())
    fleet.start(instance.instance_id)
    with pytest.raises(EcsError) as caught:
        fleet.stop(instance.instance_id)
    assert (caught.value.status, caught.value.code) == (403, "IncorrectInstanceStatus")
    assert "needs instance" in caught.value.message and "it is Starting" in caught.value.message
    assert _at(fleet, clock, 1_002.0) == "Running"
    fleet.stop(instance.instance_id)  # retried once Running: accepted
    assert fleet.get(instance.instance_id).status == "Stopping"


def test_unknown_instance_is_not_found(fleet: Fleet) -> None:
    with pytest.raises(EcsError) as caught:
        fleet.start("i-nope")
    assert (caught.value.status, caught.value.code) == (404, "InvalidInstanceId.NotFound")


def test_run_instances_is_pending_first_and_idempotent_per_client_token(fleet: Fleet, clock: FakeClock) -> None:
    spec = InstanceSpec(instance_name="web", host_name="web", unique_suffix=True)
    ids = fleet.run_instances(spec, 3, 3, "token-1", ("a",))
    assert fleet.run_instances(spec, 3, 3, "token-1", ("a",)) == ids
    assert len(fleet.instances()) == 3
    assert [fleet.get(i).instance_name for i in ids] == ["web001", "web002", "web003"]
    assert {fleet.get(i).status for i in ids} == {"Pending"}
    with pytest.raises(EcsError) as caught:
        fleet.run_instances(spec, 3, 3, "token-1", ("b",))
    assert caught.value.code == "IdempotentParameterMismatch"
    assert _at(fleet, clock, 1_003.0) == "Running"


def test_min_amount_bounds_a_partial_batch(clock: FakeClock) -> None:
    fleet = Fleet(clock=clock, capacity=2)
    assert len(fleet.run_instances(InstanceSpec(), 5, 2, "", ())) == 2
    with pytest.raises(EcsError) as caught:
        fleet.run_instances(InstanceSpec(), 1, 1, "", ())
    assert (caught.value.status, caught.value.code) == (403, "OperationDenied.NoStock")


def test_deleting_a_running_instance_needs_force(fleet: Fleet) -> None:
    instance = fleet.add(InstanceSpec(), "Running")
    with pytest.raises(EcsError) as caught:
        fleet.delete(instance.instance_id, force=False)
    assert caught.value.code == "IncorrectInstanceStatus"
    fleet.delete(instance.instance_id, force=True)
    assert fleet.instances() == [] and fleet.drain()[-1].new == DELETED


def test_each_instance_gets_its_own_loopback_address(fleet: Fleet) -> None:
    addresses = [fleet.add(InstanceSpec()).private_ip for _ in range(3)]
    assert addresses == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert loopback_address(254) == "127.0.0.254" and loopback_address(255) == "127.0.1.1"


@pytest.mark.parametrize("statuses, expected", [
    (["Success", "Success"], "Success"), (["Failed", "Timeout"], "Failed"),
    (["Success", "Failed"], "PartialFailed"), (["Success", "Running"], "Running"),
    (["Pending", "Aborted"], "Pending"), (["Stopped"], "Stopped"), (["Success", "Stopped"], "Success"),
])
def test_aggregate_invocation_status(statuses: list[str], expected: str) -> None:
    assert aggregate_status(statuses) == expected


def test_placeholders_and_output_cap() -> None:
    content = "echo {{name}} {{ ACS::InstanceId }} {{name}}"
    assert placeholders(content) == ["name", "ACS::InstanceId"]
    assert fill(content, {"name": "a b", "ACS::InstanceId": "i-1"}) == "echo a b i-1 a b"
    assert capped(b"x" * 30_000) == (b"x" * 24_576, 30_000 - 24_576)
