"""Spec §3 and test case 1: per-group overrides over 300/5/30/false, −1 clears, globals from the environment."""

from __future__ import annotations

import pydantic
import pytest

from crhelper.config import ConfigError
from handlers.bootgroups.model import InstanceBootGroupProps, SettingsProps
from handlers.bootgroups.settings import GlobalSettings, GroupSettings, effective, tier_deadline, worst_case
from handlers.bootgroups.validation import check_group


def test_defaults_are_300_5_30_false_and_reported_as_effective_values() -> None:
    assert effective(None).report() == {"ReadinessTimeoutSeconds": 300, "MaxRetryAttempts": 5,
                                        "InitialDelaySeconds": 30, "RebootOnRetry": False}


def test_an_override_appears_and_minus_one_clears_it() -> None:
    props = SettingsProps(ReadinessTimeoutSeconds=60, MaxRetryAttempts=2, InitialDelaySeconds=0, RebootOnRetry=True)
    assert effective(props).report() == {"ReadinessTimeoutSeconds": 60, "MaxRetryAttempts": 2,
                                         "InitialDelaySeconds": 0, "RebootOnRetry": True}
    cleared = SettingsProps(ReadinessTimeoutSeconds=-1, MaxRetryAttempts=-1, InitialDelaySeconds=-1)
    assert effective(cleared) == GroupSettings()


def test_ros_strings_are_read_as_numbers_and_booleans() -> None:
    props = InstanceBootGroupProps.model_validate({"Name": "g", "Settings": {"MaxRetryAttempts": "3", "RebootOnRetry": "true"}})
    assert effective(props.Settings).max_retries == 3 and effective(props.Settings).reboot_on_retry is True


def test_poll_interval_and_concurrency_have_no_per_group_override() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        SettingsProps.model_validate({"PollIntervalSeconds": 1, "CheckConcurrency": 2})
    assert {error["loc"][0] for error in info.value.errors()} == {"PollIntervalSeconds", "CheckConcurrency"}


def test_a_zero_timeout_is_refused_naming_the_setting() -> None:
    checked = check_group(InstanceBootGroupProps.model_validate({"Name": "g", "Settings": {"ReadinessTimeoutSeconds": 0}}))
    assert [p.path for p in checked.problems] == ["Settings.ReadinessTimeoutSeconds"]


def test_globals_come_from_the_environment_with_defaults() -> None:
    assert GlobalSettings.from_env({}) == GlobalSettings(10.0, 10, 10, "local")
    env = {"CRHELPER_BOOTGROUP_POLL_INTERVAL": "0.1", "CRHELPER_BOOTGROUP_CHECK_CONCURRENCY": "3",
           "CRHELPER_BOOTGROUP_MAX_MEMBERS": "30", "CRHELPER_BOOTGROUP_BACKEND": "ECS"}
    assert GlobalSettings.from_env(env) == GlobalSettings(0.1, 3, 30, "ecs")
    with pytest.raises(ConfigError, match="CRHELPER_BOOTGROUP_CHECK_CONCURRENCY: must be at least 1"):
        GlobalSettings.from_env({"CRHELPER_BOOTGROUP_CHECK_CONCURRENCY": "0"})


def test_the_tier_deadline_is_1880_s_with_the_defaults() -> None:
    assert tier_deadline(GroupSettings(), 10.0) == 30 + 6 * 300 + 5 * 10 == 1880
    assert worst_case(3, GroupSettings(), 10.0) == 3 * 1880
