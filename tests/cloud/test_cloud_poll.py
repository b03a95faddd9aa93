"""The poll helper on a driven clock (no waiting): backoff, the deadline, the invocation's budget,
off-path states, transient errors; and the transient-error rule against real SDK exceptions."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from cloud_support import CaptureServer, sdk, tea, tea_config

from crhelper.cloud.poll import (
    Done,
    Finished,
    OutOfBudget,
    OffPath,
    PollFailed,
    PollSettings,
    Waiting,
    is_throttling_or_server_error,
    poll,
)
from crhelper.config import ConfigError


class Clock:
    """A clock that only sleeping moves; each probe may cost `probe_cost` seconds."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


def states(*seen: Any, clock: Clock | None = None, cost: float = 0.0) -> Callable[[], Any]:
    """A probe answering `seen` in turn (an Exception instance is raised), the last one forever."""
    answers = list(seen)

    def probe() -> Any:
        if clock is not None:
            clock.now += cost
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return probe


def run(probe: Callable[[], Any], clock: Clock, **kw: Any) -> Any:
    kw.setdefault("deadline", clock.now + 3600)
    return poll(probe, clock=clock, sleep=clock.sleep, **kw)


def test_backoff_doubles_from_the_initial_interval_up_to_the_cap() -> None:
    clock = Clock()
    result = run(states(*[Waiting("Starting")] * 7, Done("i-1")), clock)
    assert result == Finished("i-1", polls=8)
    assert clock.sleeps == [1, 2, 4, 8, 10, 10, 10]


def test_an_off_path_state_fails_at_once_with_its_reason() -> None:
    clock = Clock()
    result = run(states(Waiting("Starting"), OffPath("instance i-1 went to Stopped while starting")), clock)
    assert result == PollFailed("instance i-1 went to Stopped while starting", polls=2, off_path=True)


def test_the_deadline_fails_naming_the_last_state_after_a_last_look_at_it() -> None:
    clock = Clock()
    result = run(states(Waiting("Starting")), clock, deadline=clock.now + 12, what="instance i-1")
    assert isinstance(result, PollFailed) and not result.off_path
    assert result.reason == "instance i-1 did not finish before its deadline (last state: Starting)"
    assert clock.sleeps == [1, 2, 4, 5] and clock.now == 1012  # the last wait is cut to the deadline
    assert result.polls == 5
    late = Clock()
    assert run(states(Done(1)), late, deadline=late.now).polls == 0  # already past: not looked at


def test_a_done_at_the_last_look_still_counts() -> None:
    clock = Clock()
    assert run(states(Waiting(), Waiting(), Done("up")), clock, deadline=clock.now + 2.5) == Finished("up", 3)
    assert clock.sleeps == [1, 1.5]


def test_the_invocation_budget_ends_in_not_yet_and_a_resume_continues_the_backoff() -> None:
    clock = Clock()
    first = run(states(Waiting("Pending")), clock, budget_ends=clock.now + 5)
    assert first == OutOfBudget("Pending", polls=3, delay=4.0, interval=8.0)
    assert clock.sleeps == [1, 2]
    clock.now += first.delay  # the InProgress delay passes; a later invocation resumes
    second = run(states(Waiting("Pending"), Done("ok")), clock, interval=first.interval)
    assert second == Finished("ok", 2) and clock.sleeps[-1] == 8


def test_a_probe_that_takes_time_is_counted_against_both_bounds() -> None:
    clock = Clock()
    result = run(states(Waiting("x"), clock=clock, cost=3.0), clock, deadline=clock.now + 10)
    assert isinstance(result, PollFailed) and clock.now <= 1000 + 10 + 3  # one probe may end past it


def test_transient_errors_are_retried_and_others_propagate() -> None:
    clock = Clock()
    throttled = RuntimeError("Throttling.User")
    result = run(states(throttled, throttled, Done(7)), clock, transient=lambda exc: "Throttling" in str(exc))
    assert result == Finished(7, 3) and clock.sleeps == [1, 2]
    last = run(states(throttled), Clock(), deadline=1003, transient=lambda exc: True)
    assert isinstance(last, PollFailed) and "transient error RuntimeError: Throttling.User" in last.reason
    with pytest.raises(KeyError):
        run(states(KeyError("boom")), Clock(), transient=lambda exc: "Throttling" in str(exc))


def test_settings_come_from_the_environment_and_are_checked() -> None:
    assert PollSettings.from_env({}) == PollSettings(1.0, 10.0)
    assert PollSettings.from_env({"CRHELPER_POLL_INITIAL": "0.01", "CRHELPER_POLL_CAP": "0.05"}) == PollSettings(0.01, 0.05)
    with pytest.raises(ConfigError, match="CRHELPER_POLL_CAP"):
        PollSettings.from_env({"CRHELPER_POLL_INITIAL": "2", "CRHELPER_POLL_CAP": "1"})
    with pytest.raises(ValueError, match="initial <= cap"):
        PollSettings(initial=5, cap=1)


@pytest.mark.slow  # drives the ECS SDK, whose import alone takes over a second
def test_throttling_and_server_errors_of_the_real_sdks_are_transient(capture: CaptureServer) -> None:
    client = tea.ecs.Client(tea_config(capture.endpoint))
    verdicts = {}
    for status, code in [(503, "ServiceUnavailable"), (400, "Throttling.User"), (403, "IncorrectInstanceStatus")]:
        body = f'{{"RequestId": "r", "Code": "{code}", "Message": "m"}}'.encode()
        capture.replies = [(status, {"Content-Type": "application/json"}, body)]
        with pytest.raises(Exception) as info:
            client.describe_instance_status(tea.ecs_models.DescribeInstanceStatusRequest(region_id="cn-hangzhou"))
        verdicts[code] = is_throttling_or_server_error(info.value)
    assert verdicts == {"ServiceUnavailable": True, "Throttling.User": True, "IncorrectInstanceStatus": False}


def test_cloudstack_server_errors_are_transient_and_parameter_errors_not(capture: CaptureServer) -> None:
    cs = sdk("cs")
    client = cs.CloudStack(endpoint=f"{capture.url}/client/api", key="K", secret="S")
    verdicts = {}
    for status in (530, 431):
        body = f'{{"listusersresponse": {{"errorcode": {status}, "errortext": "x"}}}}'.encode()
        capture.replies = [(status, {"Content-Type": "application/json; charset=UTF-8"}, body)]
        with pytest.raises(cs.CloudStackApiException) as info:
            client.listUsers()
        verdicts[status] = is_throttling_or_server_error(info.value)
    assert verdicts == {530: True, 431: False}
