"""ResponseServer.wait_answer: a waiter for one ResponseURL (the emulator's FC and MNS deliveries)
wakes on that URL's own answer, not on another URL's, and returns after its timeout without one."""
from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from crhelper.local.response_server import ResponseServer


def _answer(url: str, request: dict[str, str]) -> None:
    body = json.dumps({"Status": "SUCCESS", "RequestId": request["RequestId"], "StackId": request["StackId"],
                       "LogicalResourceId": request["LogicalResourceId"], "PhysicalResourceId": "p-1"}).encode()
    put = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": ""})
    urllib.request.urlopen(put, timeout=10).read()


@pytest.mark.slow
def test_a_waiter_wakes_on_its_own_answer_only_and_times_out_without_one() -> None:
    request = {"RequestId": "r-1", "StackId": "s-1", "LogicalResourceId": "Res"}
    with ResponseServer() as server:
        mine, _ = server.new_urls(request)
        other, _ = server.new_urls(dict(request, RequestId="r-2"))
        started = time.monotonic()
        server.wait_answer(mine, 0.2)  # nothing arrives: back after the timeout
        assert 0.18 <= time.monotonic() - started < 2

        threading.Timer(0.1, _answer, (other, dict(request, RequestId="r-2"))).start()
        started = time.monotonic()
        server.wait_answer(mine, 0.5)  # another URL's answer does not wake this waiter
        assert time.monotonic() - started >= 0.45

        threading.Timer(0.1, _answer, (mine, request)).start()
        started = time.monotonic()
        server.wait_answer(mine, 10)
        assert time.monotonic() - started < 5  # woken by the answer, long before the timeout
        assert [c.status for c in server.captures if c.token in mine] == [200]

        started = time.monotonic()
        server.wait_answer(mine, 0.2)  # already reported: the next wait waits for a new answer
        assert time.monotonic() - started >= 0.18
