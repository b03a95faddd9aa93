"""The outbound policy: back-off, budgets and the retry schedule on a driven clock; then its two
users against real local servers: the ResponseURL delivery refuses a redirect, and the Flynn client
retries idempotent calls only, refuses redirects and logs URLs redacted."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from cloud_support import CaptureServer

from crhelper.cloud.http import OutboundPolicy
from crhelper.config import DeliverySettings
from crhelper.outbound import deliver, delivery_policy
from handlers.routes import errors as E
from handlers.routes.flynn_client import FlynnClient


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_backoff_is_full_jitter_capped_and_retry_after_wins_up_to_the_cap() -> None:
    policy = OutboundPolicy(backoff_base=0.5, backoff_cap=8.0)
    assert [policy.backoff(n, rand=lambda a, b: b) for n in (1, 2, 3, 4, 5, 6, 500)] == [0.5, 1, 2, 4, 8, 8, 8]
    assert policy.backoff(3, rand=lambda a, b: a) == 0.0
    assert policy.retry_delay(1, retry_after=3.0) == 3.0 and policy.retry_delay(1, retry_after=60.0) == 8.0
    assert (policy.retry_after("7"), policy.retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), policy.retry_after(None)) == (7.0, None, None)
    assert [s for s in (200, 302, 404, 429, 500, 503, 599, 600) if policy.retryable_status(s)] == [429, 500, 503, 599]


def test_budgets_follow_the_settings() -> None:
    policy = OutboundPolicy(connect_timeout=2, read_timeout=3, max_attempts=4, backoff_cap=1)
    assert (policy.attempt_budget, policy.total_budget) == (5, 4 * 5 + 3 * 1)
    assert OutboundPolicy(budget=7).total_budget == 7
    settings = DeliverySettings(connect_timeout=0.5, read_timeout=2.0, max_attempts=4, backoff_cap=1.0)
    assert delivery_policy(settings) == OutboundPolicy(0.5, 2.0, 4, 0.5, 1.0)
    with pytest.raises(ValueError, match="max_attempts"):
        OutboundPolicy(max_attempts=0)


def test_a_schedule_bounds_attempts_and_never_starts_one_too_late() -> None:
    clock = Clock()
    policy = OutboundPolicy(connect_timeout=1, read_timeout=1, max_attempts=3, backoff_base=1, backoff_cap=4)
    schedule = policy.schedule(ends=10.0, margin=0.5, clock=clock, sleep=clock.sleep, rand=lambda a, b: b)
    assert schedule.begin() == 2 and schedule.wait_for_retry()
    clock.now += 2  # the attempt took its whole budget
    assert schedule.begin() == 2 and schedule.wait_for_retry(retry_after=4)
    assert schedule.attempts == 2 and clock.sleeps == [1, 4]
    clock.now = 9.4
    assert schedule.begin() == pytest.approx(0.1)  # cut to what is left before the margin
    assert schedule.exhausted
    late = policy.schedule(ends=1.0, margin=0.5, clock=clock)
    assert late.begin() == 0.0 and late.attempts == 0  # no time left: not an attempt
    waiting = policy.schedule(ends=clock.now + 3, clock=clock, sleep=clock.sleep, rand=lambda a, b: b)
    waiting.begin()
    assert not waiting.wait_for_retry(retry_after=3)  # it would start at the very end


def test_redirects_are_refused_with_the_target_redacted() -> None:
    policy = OutboundPolicy()
    text = policy.refused_redirect(302, "https://user:pw@evil.example/x?Signature=abc")
    assert text == "HTTP 302 redirect to https://evil.example/x?<redacted> not followed (redirects are not allowed)"
    assert policy.refused_redirect(200, None) is None
    assert OutboundPolicy(follow_redirects=True).refused_redirect(302, "/x") is None


def test_delivery_does_not_follow_a_redirect_and_says_so_redacted(capture: CaptureServer) -> None:
    capture.replies = [(302, {"Location": "http://elsewhere.example/ros?Signature=secret"}, b"moved")]
    report = deliver(b"{}", capture.url + "/ros/public?Signature=s", None, DeliverySettings(max_attempts=3))
    assert not report.delivered and report.final and report.attempts == 1
    assert "HTTP 302 redirect to http://elsewhere.example/ros?<redacted> not followed" in (report.error or "")
    assert "secret" not in (report.error or "") and len(capture.requests) == 1


APP = json.dumps({"id": "a1", "name": "web", "meta": {}}).encode()


def flynn(url: str, clock: Clock) -> FlynnClient:
    policy = OutboundPolicy(connect_timeout=1, read_timeout=2, max_attempts=3, backoff_base=0.5, backoff_cap=2)
    return FlynnClient(url, "the-controller-key", policy=policy, sleep=clock.sleep)


def test_flynn_retries_an_idempotent_call_after_5xx_and_429(capture: CaptureServer,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    capture.replies = [(503, {}, b""), (429, {"Retry-After": "1"}, b""), (200, {}, APP)]
    clock = Clock()
    assert flynn(capture.url, clock).get_app("web").id == "a1"
    assert [(r.method, r.target) for r in capture.requests] == [("GET", "/apps/web")] * 3
    assert len(clock.sleeps) == 2 and 0 <= clock.sleeps[0] <= 0.5 and clock.sleeps[1] == 1.0
    retries = [r for r in caplog.records if r.getMessage() == "controller call failed; trying again"]
    assert [r.fields["error"] for r in retries] == ["HTTP 503", "HTTP 429"]  # type: ignore[attr-defined]
    assert "the-controller-key" not in caplog.text + repr([r.__dict__ for r in caplog.records])


def test_flynn_sends_a_post_once_and_gives_up_on_a_persistent_5xx(capture: CaptureServer) -> None:
    capture.replies = [(503, {}, json.dumps({"code": "unknown_error", "message": "busy", "retry": True}).encode())]
    clock = Clock()
    with pytest.raises(E.FlynnError) as info:
        flynn(capture.url, clock).create_app("web")
    assert (info.value.status, info.value.code, len(capture.requests), clock.sleeps) == (503, "unknown_error", 1, [])
    with pytest.raises(E.FlynnError):
        flynn(capture.url, clock).get_app("web")
    assert len(capture.requests) == 1 + 3 and len(clock.sleeps) == 2  # bounded by max_attempts


def test_flynn_refuses_a_redirect_without_following_it(capture: CaptureServer) -> None:
    capture.replies = [(307, {"Location": "/elsewhere?token=abc"}, b"")]
    with pytest.raises(E.FlynnError) as info:
        flynn(capture.url, Clock()).delete_app("web")
    assert info.value.code == "unknown_error"
    assert info.value.hint == (f"controller answered HTTP 307 redirect to {capture.url}/elsewhere?<redacted> "
                               "not followed (redirects are not allowed)")
    assert [(r.method, r.target) for r in capture.requests] == [("DELETE", "/apps/web")]


def test_flynn_retries_an_unreachable_controller_for_reads_only(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/base?k=secret"
    clock = Clock()
    with pytest.raises(E.FlynnError) as info:
        flynn(url, clock).list_routes()
    assert info.value.hint == "controller unreachable: ConnectionError" and len(clock.sleeps) == 2
    urls = [r.fields["url"] for r in caplog.records if hasattr(r, "fields")]  # type: ignore[attr-defined]
    assert len(urls) == 2 and all(u.endswith("/base?<redacted>") for u in urls)
    assert "secret" not in repr([r.__dict__ for r in caplog.records])
    with pytest.raises(E.FlynnError):
        flynn(url, clock).create_app("x")
    assert len(clock.sleeps) == 2  # no retry for the POST


def test_a_threaded_caller_sees_its_own_schedule(capture: CaptureServer) -> None:
    """Schedules are per call: two concurrent reads each get their full attempts."""
    capture.replies = [(503, {}, b""), (503, {}, b""), (200, {}, APP)]
    clock, results = Clock(), []
    client = flynn(capture.url, clock)
    threads = [threading.Thread(target=lambda: results.append(client.get_app("web").id)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == ["a1", "a1"]
