"""Spec §2.3-§2.5 and test cases 5 (shared budget), 6-7 (aggregation, quorum) and 12 (the cache)."""

from __future__ import annotations

from bootgroup_fakes import FakeBackend, members_of
from crhelper.operations import ManualClock
from handlers.bootgroups.backends import CheckResult, VmState
from handlers.bootgroups.model import ERROR, NOT_READY, READY, UNKNOWN
from handlers.bootgroups.readiness import (
    GROUP_SCOPE, NOT_REVERIFIED, CacheEntry, ChildView, cache_as_read, cache_key, cached_vm_status, evaluate_group,
    evaluate_vm, prune_cache, quorum, record, reset_after_outside_restart, vm_rules,
)


def test_quorum_count_percentage_empty_and_unparseable() -> None:
    assert quorum("COUNT", "2", total=3, ready=2, failed=0).status == READY
    assert quorum("COUNT", "2", total=3, ready=1, failed=1).status == NOT_READY   # the third may still make it
    assert quorum("COUNT", "2", total=3, ready=1, failed=2).status == ERROR
    four = quorum("PERCENTAGE", "75", total=4, ready=1, failed=2)
    assert four.status == ERROR and "no longer achievable" in four.message and "2/4 gave up" in four.message
    assert quorum("percentage", "75", total=4, ready=3, failed=1).status == READY
    assert quorum("COUNT", "1", total=0, ready=0, failed=0).status == NOT_READY
    assert quorum("COUNT", "two", total=3, ready=3, failed=0).status == ERROR


def _group(rules: list[dict] | None = None):  # type: ignore[no-untyped-def]
    return members_of({"Members": [{"InstanceGroup": {"Name": "web", "Instances": ["a", "b", "c"]}, "BootOrder": 0,
                                    "ReadinessRules": rules or []}]})[0]


def test_without_quorum_a_child_that_gave_up_is_error_one_retrying_keeps_waiting() -> None:
    member = _group()
    assert evaluate_group(member, [ChildView("a", READY), ChildView("b", READY), ChildView("c", ERROR, gave_up=True)]).status == ERROR
    waiting = evaluate_group(member, [ChildView("a", READY), ChildView("b", READY), ChildView("c", ERROR)])
    assert waiting.status == NOT_READY and "not Ready yet: c" in waiting.message
    assert evaluate_group(member, [ChildView("a", READY), ChildView("b", READY), ChildView("c", READY)]).status == READY
    assert evaluate_group(member, []).status == NOT_READY


def test_an_inherited_rules_error_counts_only_from_a_child_that_gave_up() -> None:
    member = _group([{"Type": "PortCheck", "Details": {"port": 80}}])
    rule = member.inherited_rules()[0].id
    retrying = [ChildView("a", READY, False, {rule: READY}), ChildView("b", ERROR, False, {rule: ERROR})]
    assert evaluate_group(member, retrying).status == NOT_READY
    assert evaluate_group(member, retrying).results[rule].message == "1 of 2 instance(s) Ready by PortCheck"
    gave_up = [ChildView("a", READY, False, {rule: READY}), ChildView("b", ERROR, True, {rule: ERROR})]
    assert evaluate_group(member, gave_up).status == ERROR


def test_with_quorum_the_quorum_alone_decides() -> None:
    member = _group([{"Type": "PortCheck", "Details": {"port": 80}},
                     {"Type": "MemberQuorum", "Details": {"thresholdtype": "COUNT", "thresholdvalue": 2}}])
    rule = member.inherited_rules()[0].id
    verdict = evaluate_group(member, [ChildView("a", READY, False, {rule: READY}), ChildView("b", READY, False, {rule: READY}),
                                      ChildView("c", ERROR, True, {rule: ERROR})])
    assert verdict.status == READY
    assert verdict.results[member.inherited_rules()[0].id].status == ERROR  # still computed, for information


def test_vm_readiness_running_required_no_rules_ready_error_dominates() -> None:
    clock = ManualClock()
    backend = FakeBackend(clock)
    backend.add("a", state="Stopped", ready_after=0)
    member = members_of({"Members": [{"Instance": "a", "BootOrder": 0, "ReadinessRules": [
        {"Type": "Ping"}, {"Type": "PortCheck", "Details": {"port": 80}}]}]})[0]
    direct, inherited = vm_rules(member, "a")
    stopped = evaluate_vm(backend, "a", direct, 100, clock.now, "1/6")
    assert stopped.status == NOT_READY and backend.check_calls() == [] and stopped.message.endswith("(attempt 1/6)")
    backend.vms["a"].state = "Running"
    assert evaluate_vm(backend, "a", [], 100, clock.now).status == READY
    backend.vms["a"].ready_after = None
    verdict = evaluate_vm(backend, "a", direct + inherited, 100, clock.now, "2/6")
    assert verdict.status == ERROR and len(verdict.results) == 2
    assert verdict.message.startswith("Ping 'Ping-VirtualMachine-a': Error: connection refused")


def test_two_slow_rules_share_one_attempt_budget() -> None:
    clock = ManualClock()
    backend = FakeBackend(clock)
    backend.add("a", state="Running", last_power_change=clock.now(), ready_after=None)
    backend.check_cost["a"] = 40.0
    member = members_of({"Members": [{"Instance": "a", "BootOrder": 0, "ReadinessRules": [
        {"Type": "PortCheck", "Details": {"port": 1}}, {"Type": "PortCheck", "Details": {"port": 2}},
        {"Type": "Ping"}]}]})[0]
    evaluate_vm(backend, "a", member.direct_rules_of("a"), 70.0, clock.now)
    assert [call[4] for call in backend.check_calls()] == [70.0, 30.0, 0.0]


def test_the_cache_keeps_the_last_result_unknown_after_an_outside_restart() -> None:  # Marvin test 4
    clock = ManualClock()
    backend = FakeBackend(clock)
    backend.add("a", state="Running", last_power_change=clock.now())
    member = members_of({"Members": [{"Instance": "a", "BootOrder": 0, "ReadinessRules": [{"Type": "Ping"}]}]})[0]
    cache: dict[str, CacheEntry] = {}
    record(cache, "a", evaluate_vm(backend, "a", member.rules, 10, clock.now), clock.now())
    record(cache, "a", evaluate_vm(backend, "a", member.rules, 10, clock.now), clock.now())
    assert list(cache) == [cache_key(member.rules[0].id, "a")] and cache[cache_key(member.rules[0].id, "a")].status == READY
    assert cached_vm_status(cache, "a", member.rules, running=True) == (READY, "1 rule(s) Ready")
    assert cached_vm_status(cache, "a", member.rules, running=False)[0] == NOT_READY
    assert cached_vm_status(cache, "a", member.rules, running=False, ignore_instance_state=True)[0] == READY
    assert reset_after_outside_restart(cache, "a", clock.now()) == 1
    status, message = cached_vm_status(cache, "a", member.rules, running=True)
    assert status == UNKNOWN and NOT_REVERIFIED in message


def test_a_type_without_a_checker_evaluates_to_error() -> None:
    clock = ManualClock()
    backend = FakeBackend(clock)
    backend.add("a", state="Running")
    member = _group([{"Type": "MemberQuorum", "Details": {"thresholdtype": "COUNT", "thresholdvalue": 1}}])
    verdict = evaluate_vm(backend, "a", member.rules, 10, clock.now)
    assert verdict.status == ERROR and "no checker" in verdict.message
    assert isinstance(next(iter(verdict.results.values())), CheckResult)


def test_a_read_sees_an_outside_restart_as_unknown_without_changing_the_cache() -> None:
    ready = CacheEntry(READY, "TCP connect accepted", 5.0)
    cache = {"a/ping@a": ready, "b/ping@b": ready}
    states = {"a": VmState("Running", 20.0), "b": VmState("Running", 9.0)}
    view = cache_as_read(cache, {"a": 10.0, "b": 9.0}, states, 30.0)  # a booted at 20 s, after the group's boot at 10 s
    assert view["a/ping@a"] == CacheEntry(UNKNOWN, NOT_REVERIFIED, 30.0) and view["b/ping@b"] == ready
    assert cache == {"a/ping@a": ready, "b/ping@b": ready}  # a copy: the stored cache is untouched
    assert cache_as_read(cache, {"a": 20.0}, states, 30.0) == cache  # the group's own boot


def test_an_update_keeps_only_the_results_its_plan_can_still_use() -> None:  # B11
    old = members_of({"Members": [
        {"Instance": "db", "BootOrder": 0, "ReadinessRules": [{"Type": "Ping"}, {"Type": "PortCheck", "Details": {"port": 1}}]},
        {"InstanceGroup": {"Name": "web", "Instances": ["w1", "w2"]}, "BootOrder": 1, "ReadinessRules": [{"Type": "Ping"}],
         "InstanceRules": {"w2": [{"Type": "PortCheck", "Details": {"port": 2}}]}},
        {"Instance": "gone", "BootOrder": 2, "ReadinessRules": [{"Type": "Ping"}]}]})
    db_ping, db_port = (rule.id for rule in old[0].rules)
    web_ping, w2_port, gone_ping = old[1].rules[0].id, old[1].instance_rules["w2"][0].id, old[2].rules[0].id
    entry = CacheEntry(READY, "ok", 1.0)
    cache = {cache_key(rule, vm): entry for rule, vm in ((db_ping, "db"), (db_port, "db"), (web_ping, "w1"),
                                                         (web_ping, "w2"), (web_ping, GROUP_SCOPE), (w2_port, "w2"),
                                                         (gone_ping, "gone"))}
    new = members_of({"Members": [
        {"Instance": "db", "BootOrder": 0, "ReadinessRules": [{"Type": "Ping"}]},           # its PortCheck removed
        {"InstanceGroup": {"Name": "web", "Instances": ["w1"]}, "BootOrder": 1,              # w2 left the group
         "ReadinessRules": [{"Type": "Ping"}]}]})                                           # and the member 'gone' went
    assert [rule.id for rule in new[0].rules] == [db_ping] and new[1].rules[0].id == web_ping
    assert sorted(prune_cache(cache, new)) == sorted([cache_key(db_ping, "db"), cache_key(web_ping, "w1"),
                                                      cache_key(web_ping, GROUP_SCOPE)])
    tagged = members_of({"Backend": "ecs", "Members": [{"InstanceGroup": {"Name": "web", "Tag": {"Key": "tier", "Value": "web"}},
                                                       "BootOrder": 1, "ReadinessRules": [{"Type": "Ping"}]}]})
    kept = prune_cache(cache, tagged)  # a Tag group's instances are not known here: its rules' results all stay
    assert sorted(kept) == sorted(cache_key(web_ping, vm) for vm in ("w1", "w2", GROUP_SCOPE))
