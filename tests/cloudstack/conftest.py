"""Fixtures of the CloudStack tests: local endpoints made with the settings a test needs, stopped
(guests killed) when it ends, and the real `cs` client."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any, Callable, Iterator

import pytest

from crhelper.local.cloudstack_server import LocalCloudStack
from crhelper.local.cloudstack_state import CloudStackSettings

#: Steps short enough for tests, long enough that a poll sees the transitional state.
FAST = {"start_seconds": 0.05, "stop_seconds": 0.05, "guest_stop_grace": 1.0}


@pytest.fixture
def cs() -> ModuleType:
    """The `cs` package; skipped locally when missing, a failure on CI (it is a test dependency)."""
    if os.environ.get("CI") == "true":
        import cs as module
        return module
    return pytest.importorskip("cs")


@pytest.fixture
def api_error(cs: ModuleType) -> Callable[[Callable[[], Any]], Any]:
    """`api_error(lambda: client.call(...))`: the CloudStackApiException the call raises."""
    def expect(call: Callable[[], Any]) -> Any:
        with pytest.raises(cs.CloudStackApiException) as info:
            call()
        return info.value
    return expect


@pytest.fixture
def make_cloud() -> Iterator[Callable[..., LocalCloudStack]]:
    """`make_cloud(pending_polls=2, clock=..., api_key=...)`: a started endpoint; settings
    default to FAST."""
    made: list[LocalCloudStack] = []

    def make(**kw: Any) -> LocalCloudStack:
        settings = CloudStackSettings(**{**FAST, **{k: kw.pop(k) for k in list(kw) if k in CloudStackSettings.__dataclass_fields__}})
        cloud = LocalCloudStack(settings=settings, **kw).start()
        made.append(cloud)
        return cloud

    yield make
    for cloud in made:
        cloud.stop()


@pytest.fixture
def cloud(make_cloud: Callable[..., LocalCloudStack]) -> LocalCloudStack:
    return make_cloud()
