"""Ordered tiers: the pure plan and report, and the runner resuming from stored progress (no I/O)."""

from __future__ import annotations

import pytest

from crhelper import Failure, tiers
from crhelper.operations import Budget, ManualClock, Memory, NotYet
from crhelper.operations.codec import dump, load


def budget_on(clock: ManualClock, step_seconds: float = 1e9, invocation_left: float = float("inf")) -> Budget:
    return Budget(clock=clock, step_started=clock.now(), step_seconds=step_seconds, deadline=clock.now() + 1800,
                  memory=Memory(), invocation_left=lambda: invocation_left)


def test_plan_groups_equal_orders_into_tiers_in_either_direction():
    orders = {"web": 2, "db-1": 0, "app": 1, "db-2": 0}
    up = tiers.plan(orders)
    assert [(t.order, t.items) for t in up.tiers] == [(0, ["db-1", "db-2"]), (1, ["app"]), (2, ["web"])]
    down = tiers.plan(orders, descending=True, policy=tiers.CONTINUE)
    assert [t.order for t in down.tiers] == [2, 1, 0] and down.direction == "descending" and down.policy == "continue"
    assert set(up.items) == set(orders) and all(o.status == "pending" for o in up.items.values())


def test_plan_refuses_bad_orders_and_policies_precisely():
    with pytest.raises(ValueError, match=r"the order of 'vm-1' must be an integer, got '1'"):
        tiers.plan({"vm-1": "1"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="got True"):
        tiers.plan({"vm-1": True})
    with pytest.raises(ValueError, match="policy must be 'halt' or 'continue', got 'stop'"):
        tiers.plan({"vm-1": 0}, policy="stop")


def test_worst_case_is_one_timeout_per_distinct_tier():
    assert tiers.worst_case({"a": 0, "b": 0, "c": 3}, 1880) == 3760
    assert tiers.worst_case({"a": 0, "c": 3}, lambda order: 100 * (order + 1)) == 500


class Readiness:
    """Items ready after `needed[item]` checks; calls and starts counted."""

    def __init__(self, needed: dict[str, int], failing: dict[str, BaseException] | None = None) -> None:
        self.needed, self.failing = needed, failing or {}
        self.calls: dict[str, int] = {}
        self.starts: list[str] = []
        self.checks: dict[str, int] = {}

    def __call__(self, item: str, run: tiers.ItemRun) -> dict:
        self.calls[item] = self.calls.get(item, 0) + 1
        run.once("start", lambda: self.starts.append(item))
        if item in self.failing:
            raise self.failing[item]
        run.wait_until(lambda: self._check(item), every=5, up_to=60, name=f"{item} ready")
        return {"item": item, "tier": run.order}

    def _check(self, item: str) -> bool:
        self.checks[item] = self.checks.get(item, 0) + 1
        return self.checks[item] >= self.needed.get(item, 1)


def stored(progress: tiers.TierProgress) -> tiers.TierProgress:
    """What a re-entry reads back: the progress through JSON."""
    return load(tiers.TierProgress, dump(progress))


def test_the_runner_resumes_at_the_right_tier_and_item_and_never_reruns_a_finished_one():
    clock = ManualClock()
    action = Readiness({"a": 1, "b": 3, "c": 2})
    progress = tiers.plan({"a": 0, "b": 0, "c": 1})
    items = {name: name for name in "abc"}
    with pytest.raises(NotYet) as first_call:
        tiers.run(progress, items, action, budget_on(clock))
    waiting = first_call.value
    assert waiting.delay == 5 and progress.current == 0
    assert progress.items["a"].status == "succeeded" and progress.items["b"].status == "running"
    resumed = 0
    while True:
        progress = stored(progress)
        clock.advance(waiting.delay)
        try:
            result = tiers.run(progress, items, action, budget_on(clock))
            break
        except NotYet as again:
            waiting, resumed = again, resumed + 1
    assert result.ok and result.reason is None and resumed == 2
    assert action.calls == {"a": 1, "b": 3, "c": 2} and action.starts == ["a", "b", "c"]
    assert progress.items["b"].value == {"item": "b", "tier": 0}
    first, second = progress.tiers
    assert first.status == second.status == "succeeded" and first.ended is not None and second.started is not None
    assert first.ended <= second.started


def test_halt_cancels_the_started_skips_the_rest_and_names_the_failure():
    clock = ManualClock()
    action = Readiness({"slow": 10}, failing={"bad": Failure("no capacity")})
    progress = tiers.plan({"slow": 0, "bad": 0, "later": 1})
    result = tiers.run(progress, {n: n for n in ("slow", "bad", "later")}, action, budget_on(clock), concurrency=1)
    assert not result.ok
    assert result.reason == "tier 1 of 2 (order 0) failed: bad: no capacity; later tiers were not started"
    assert [(f.item, f.order, f.reason) for f in result.failures] == [("bad", 0, "no capacity")]
    statuses = {name: progress.items[name].status for name in progress.items}
    assert statuses == {"slow": "cancelled", "bad": "failed", "later": "skipped"}
    assert progress.items["later"].started is None and progress.tiers[1].status == "skipped"
    assert "later" not in action.calls and progress.finished


def test_continue_runs_every_tier_and_reports_every_failure_including_surprises():
    clock = ManualClock()
    action = Readiness({}, failing={"a": Failure("a broke"), "c": KeyError("c")})
    progress = tiers.plan({"a": 2, "b": 1, "c": 0}, descending=True, policy=tiers.CONTINUE)
    result = tiers.run(progress, {n: n for n in "abc"}, action, budget_on(clock), concurrency=2)
    assert action.starts == ["a", "b", "c"]
    assert result.reason == "2 of 3 item(s) failed: a (order 2): a broke; c (order 0): KeyError: 'c'"
    assert [t.status for t in progress.tiers] == ["failed", "succeeded", "failed"]


def test_a_tier_timeout_bounds_waits_and_the_next_check_is_never_after_it():
    clock = ManualClock()
    action = Readiness({"x": 10**6})
    progress = tiers.plan({"x": 0})
    budget = budget_on(clock)
    delays = []
    while True:
        try:
            result = tiers.run(progress, {"x": "x"}, lambda item, run: action(item, run), budget, tier_timeout=12)
            break
        except NotYet as waiting:
            delays.append(waiting.delay)
            clock.advance(waiting.delay)
    assert delays == [5, 5, 2]
    assert result.reason == ("tier 1 of 1 (order 0) failed: x: x ready: tier 1 (order 0) did not finish within 12 s "
                             "(4 check(s))")


def test_budget_left_is_bounded_by_the_step_and_by_the_invocation():
    clock = ManualClock()
    assert budget_on(clock, step_seconds=30).left() == 30
    assert budget_on(clock, step_seconds=30, invocation_left=11).left() == 10  # 1 s kept for storing the step
    budget = budget_on(clock, step_seconds=30)
    clock.advance(45)
    assert budget.left() == 0 and budget.deadline_left() == 1755


def test_a_met_wait_is_not_probed_again_and_once_runs_once():
    clock, probes, calls = ManualClock(), [], []
    budget = budget_on(clock)
    budget.wait_until(lambda: probes.append(1) or True, every=1, name="up")
    budget.wait_until(lambda: probes.append(1) or True, every=1, name="up")
    assert probes == [1] and budget.memory.waits["up"].done
    assert budget.once("id", lambda: calls.append(1) or ("i-1", 2)) == ["i-1", 2]  # as read back after re-entry
    assert budget.once("id", lambda: calls.append(1) or "other") == ["i-1", 2] and calls == [1]
    with pytest.raises(ValueError, match="every must be a positive number of seconds"):
        budget.wait_until(lambda: True, every=0, name="bad")


def test_the_runner_refuses_a_bad_concurrency():
    with pytest.raises(ValueError, match="concurrency must be a whole number ≥ 1, got 0"):
        tiers.run(tiers.plan({"a": 0}), {"a": "a"}, lambda item, run: None, budget_on(ManualClock()), concurrency=0)


def test_items_waiting_at_different_intervals_are_each_checked_on_their_own_schedule():
    clock, checked = ManualClock(), {"fast": [], "slow": []}
    every = {"fast": 5, "slow": 20}

    def act(item: str, run: tiers.ItemRun) -> None:
        def check() -> bool:
            checked[item].append(clock.now() - 1_000_000.0)
            return len(checked[item]) == 3
        run.wait_until(check, every=every[item], name=f"{item} ready")

    progress = tiers.plan({"fast": 0, "slow": 0})
    while True:
        try:
            assert tiers.run(progress, {"fast": "fast", "slow": "slow"}, act, budget_on(clock), concurrency=1).ok
            break
        except NotYet as waiting:
            clock.advance(waiting.delay)
    assert checked == {"fast": [0, 5, 10], "slow": [0, 20, 40]}
