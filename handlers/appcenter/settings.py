"""The AppCluster provider's settings: delays and caps from the environment, so tests run in seconds.
Pure but for `AppCenterSettings.from_env`, which reads a mapping it is given (default os.environ)."""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping

from crhelper.config import env_choice, env_float

from .backends import BACKENDS

ENV_BACKEND = "CRHELPER_APPCENTER_BACKEND"
ENV_POLL_INTERVAL = "CRHELPER_APPCENTER_POLL_INTERVAL"
ENV_STEP_BUDGET = "CRHELPER_APPCENTER_STEP_BUDGET"
ENV_MAX_SERVICE_TIMEOUT = "CRHELPER_APPCENTER_MAX_SERVICE_TIMEOUT"
ENV_NODE_TIMEOUT = "CRHELPER_APPCENTER_NODE_TIMEOUT"
ENV_HEALTH_INTERVAL = "CRHELPER_APPCENTER_HEALTH_INTERVAL"
ENV_CHECK_INTERVAL = "CRHELPER_APPCENTER_CHECK_INTERVAL"


@dataclasses.dataclass(frozen=True)
class AppCenterSettings:
    """`backend`: the default of the Backend property. `poll_interval`: the InProgress delay between
    looks at running commands and booting nodes. `step_budget`: how long one handler call keeps
    walking the plan before it checkpoints and returns InProgress (well under a function's timeout).
    `max_service_timeout`: a cap on every service's `timeout` (86400 s by the spec; tests lower it).
    `node_timeout`: how long nodes may take to read Running after create or start.
    `health_interval`: replaces every health_check and monitor interval (None: the package's,
    at least 60 s; tests use a fraction of a second). `check_interval`: within one handler call, the
    seconds between looks at running commands (None: the backend's own, 0.05 s locally, 1 s on
    `ecs`, where each look is a DescribeInvocationResults call against the API's rate limits)."""

    backend: str = "local"
    poll_interval: float = 5.0
    step_budget: float = 20.0
    max_service_timeout: float = 86400.0
    node_timeout: float = 600.0
    health_interval: float | None = None
    check_interval: float | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "AppCenterSettings":
        """A bad value raises crhelper.config.ConfigError naming the variable and the rule."""
        env = os.environ if env is None else env
        return cls(
            backend=env_choice(env, ENV_BACKEND, "local", BACKENDS),
            poll_interval=env_float(env, ENV_POLL_INTERVAL, cls.poll_interval, minimum=0.01, maximum=3600.0),
            step_budget=env_float(env, ENV_STEP_BUDGET, cls.step_budget, minimum=0.0, maximum=3600.0),
            max_service_timeout=env_float(env, ENV_MAX_SERVICE_TIMEOUT, cls.max_service_timeout, minimum=0.1,
                                          maximum=86400.0),
            node_timeout=env_float(env, ENV_NODE_TIMEOUT, cls.node_timeout, minimum=0.1, maximum=86400.0),
            health_interval=env_float(env, ENV_HEALTH_INTERVAL, None, minimum=0.05, maximum=86400.0),
            check_interval=env_float(env, ENV_CHECK_INTERVAL, None, minimum=0.01, maximum=60.0),
        )
