"""Readiness settings (spec §3): four per-group overrides over fixed defaults, three globals from
the environment. Pure but for `GlobalSettings.from_env`, which reads a mapping it is given."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Mapping

from crhelper.config import env_choice, env_float, env_int

from .model import BACKENDS, SettingsProps

DEFAULT_TIMEOUT = 300.0
DEFAULT_MAX_RETRIES = 5
DEFAULT_INITIAL_DELAY = 30.0
DEFAULT_REBOOT_ON_RETRY = False

DEFAULT_POLL_INTERVAL = 10.0
DEFAULT_CHECK_CONCURRENCY = 10
DEFAULT_MAX_MEMBERS = 10

ENV_POLL_INTERVAL = "CRHELPER_BOOTGROUP_POLL_INTERVAL"
ENV_CHECK_CONCURRENCY = "CRHELPER_BOOTGROUP_CHECK_CONCURRENCY"
ENV_MAX_MEMBERS = "CRHELPER_BOOTGROUP_MAX_MEMBERS"
ENV_BACKEND = "CRHELPER_BOOTGROUP_BACKEND"


@dataclasses.dataclass(frozen=True)
class GroupSettings:
    """The effective per-group values (what responses report, §3)."""

    timeout: float = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    initial_delay: float = DEFAULT_INITIAL_DELAY
    reboot_on_retry: bool = DEFAULT_REBOOT_ON_RETRY

    @property
    def attempts(self) -> int:
        """Evaluations a VM gets: the first one and `max_retries` retries (§9 #4)."""
        return self.max_retries + 1

    def report(self) -> dict[str, Any]:
        """The effective values under the property names."""
        return {
            "ReadinessTimeoutSeconds": _plain(self.timeout),
            "MaxRetryAttempts": self.max_retries,
            "InitialDelaySeconds": _plain(self.initial_delay),
            "RebootOnRetry": self.reboot_on_retry,
        }


def _plain(seconds: float) -> float | int:
    return int(seconds) if float(seconds).is_integer() else seconds


def _override(value: float | None, default: float) -> float:
    """Absent or negative (−1 clears) ⇒ the default."""
    return default if value is None or value < 0 else value


def effective(props: SettingsProps | None) -> GroupSettings:
    """Overrides over the defaults. Validation has refused non-finite numbers and a zero timeout."""
    props = props or SettingsProps()
    retries = props.MaxRetryAttempts
    return GroupSettings(
        timeout=float(_override(props.ReadinessTimeoutSeconds, DEFAULT_TIMEOUT)),
        max_retries=DEFAULT_MAX_RETRIES if retries is None or retries < 0 else retries,
        initial_delay=float(_override(props.InitialDelaySeconds, DEFAULT_INITIAL_DELAY)),
        reboot_on_retry=DEFAULT_REBOOT_ON_RETRY if props.RebootOnRetry is None else props.RebootOnRetry,
    )


def settings_problems(props: SettingsProps | None, where: str = "Settings") -> list[tuple[str, str]]:
    """(property path, rule) for override values that are neither a clear (negative) nor usable."""
    problems: list[tuple[str, str]] = []
    if props is None:
        return problems
    for name in ("ReadinessTimeoutSeconds", "InitialDelaySeconds"):
        value = getattr(props, name)
        if value is not None and not math.isfinite(value):
            problems.append((f"{where}.{name}", "must be a finite number of seconds (a negative value clears the override)"))
    if props.ReadinessTimeoutSeconds == 0:
        problems.append((f"{where}.ReadinessTimeoutSeconds",
                         "must be greater than 0: it is each attempt's budget (a negative value clears the override)"))
    return problems


@dataclasses.dataclass(frozen=True)
class GlobalSettings:
    """Global only (no per-group override): the poll interval, the check concurrency, the member
    limit, and the default backend."""

    poll_interval: float = DEFAULT_POLL_INTERVAL
    check_concurrency: int = DEFAULT_CHECK_CONCURRENCY
    max_members: int = DEFAULT_MAX_MEMBERS
    backend: str = "local"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "GlobalSettings":
        """A bad value raises crhelper.config.ConfigError naming the variable and the rule."""
        env = os.environ if env is None else env
        return cls(
            poll_interval=env_float(env, ENV_POLL_INTERVAL, DEFAULT_POLL_INTERVAL, minimum=0.01),
            check_concurrency=env_int(env, ENV_CHECK_CONCURRENCY, DEFAULT_CHECK_CONCURRENCY, minimum=1),
            max_members=env_int(env, ENV_MAX_MEMBERS, DEFAULT_MAX_MEMBERS, minimum=1),
            backend=env_choice(env, ENV_BACKEND, "local", BACKENDS),
        )


def tier_deadline(group: GroupSettings, poll_interval: float) -> float:
    """§4.1.8: `initialDelay + (N+1)·timeout + N·poll`, counted from the start of a tier's wait
    (1880 s with the defaults). The wait starts once the tier's start calls were answered, so on a
    backend whose start returns before the instance runs (ECS, CloudStack's queued jobs) the deadline
    also covers the boot (no attempt counts while an instance boots, but the clock runs): a bound on
    the whole tier, as a user reads it, tens of seconds of boot against 1880 s by default."""
    n = group.max_retries
    return group.initial_delay + (n + 1) * group.timeout + n * poll_interval


def worst_case(tier_count: int, group: GroupSettings, poll_interval: float) -> float:
    """The longest a start may take: the tier deadlines summed (what Create compares with the
    type's deadline). Only the start: Create runs nothing else. A reboot (an Update) also stops the
    tiers first, each bounded by `stop_tier_timeout`, and the start calls themselves come before a
    tier's wait; neither is counted here. An Update past the type's deadline is answered FAILED by
    the framework, like any operation."""
    return tier_count * tier_deadline(group, poll_interval)


def stop_tier_timeout(group: GroupSettings) -> float:
    """How long a stop (or a reboot's stop half) waits for one tier's instances to read Stopped:
    ReadinessTimeoutSeconds. The spec sets no bound; a stop must end, and an instance still not
    Stopped then is reported as failed to stop while the lower tiers are still stopped (§4.4)."""
    return group.timeout
