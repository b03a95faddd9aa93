"""The pure parts of `crhelper deploy`: trigger and function plans, credentials from a profile
file, errors that say what to do next (no sockets, no SDK calls)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from crhelper.cloud.credentials import Credentials, ProfileError, load_profile
from crhelper.cli.deploy import default_function_name
from crhelper.cli.main import main
from crhelper.deploy import DeployError
from crhelper.deploy.clients import explain, resolve_target
from crhelper.deploy.plan import (
    MANAGED_MARK, FunctionSettings, TriggerSpec, foreign_conflicts, function_changes, needs_replacing, plan_triggers,
    service_token, wanted_triggers,
)

TIMER = TriggerSpec("crhelper-resume", "timer", {"cronExpression": "@every 5m", "enable": True, "payload": ""})


def held(name: str, config: dict[str, object], description: str = MANAGED_MARK, kind: str = "timer") -> dict[str, object]:
    return {"triggerName": name, "triggerType": kind, "triggerConfig": json.dumps(config), "description": description}


def test_triggers_are_created_updated_kept_and_only_deploys_own_are_pruned() -> None:
    current = [held("crhelper-old", {"cronExpression": "@every 1m"}), held("theirs", {"cronExpression": "@every 1h"}, "")]
    plan = plan_triggers(current, [TIMER])
    assert (plan.create, plan.update, plan.delete, plan.unchanged) == ((TIMER,), (), ("crhelper-old",), ())
    same = plan_triggers([held("crhelper-resume", dict(TIMER.config))], [TIMER])
    assert (same.create, same.update, same.delete, same.unchanged) == ((), (), (), ("crhelper-resume",))
    moved = plan_triggers([held("crhelper-resume", {**TIMER.config, "cronExpression": "@every 9m"})], [TIMER])
    assert moved.update == (TIMER,)
    assert foreign_conflicts([held("crhelper-resume", {}, "someone else's")], [TIMER]) == ["crhelper-resume"]
    assert needs_replacing(held("crhelper-resume", {}, kind="http"), TIMER)


def test_wanted_triggers_and_tokens_take_their_versions_forms() -> None:
    triggers = wanted_triggers(timer=None, mns_topic="events", region="cn-hangzhou", account_id="42",
                               invocation_role="acs:ram::42:role/mns")
    assert [(t.name, t.trigger_type, t.source_arn) for t in triggers] == [
        ("crhelper-mns", "mns_topic", "acs:mns:cn-hangzhou:42:/topics/events")]
    assert service_token("cn-hangzhou", "42", "f", None) == "acs:fc:cn-hangzhou:42:functions/f"
    assert service_token("cn-hangzhou", "42", "f", "s") == "acs:fc:cn-hangzhou:42:services/s/functions/f"


def test_function_changes_name_only_what_differs() -> None:
    wanted = FunctionSettings("f", "index.handler", "python3.12", 256, 300, {"CRHELPER_PROVIDER": "m:provider"}, "d")
    same = {"handler": "index.handler", "runtime": "python3.12", "memorySize": 256, "timeout": 300,
            "environmentVariables": {"CRHELPER_PROVIDER": "m:provider"}, "description": "d", "codeSize": 1}
    assert function_changes(same, wanted) == {}
    assert function_changes({**same, "timeout": 60, "environmentVariables": None}, wanted) == {
        "timeout": 300, "environmentVariables": {"CRHELPER_PROVIDER": "m:provider"}}
    assert default_function_name("samples/greeting.py:provider") == "greeting"
    assert default_function_name("pkg.my_mod:provider") == "my_mod"


def test_a_log_config_fc_answers_with_more_keys_is_unchanged_and_a_bad_log_option_is_named() -> None:
    from crhelper.cli.deploy import log_config

    log = log_config("ros/fns")
    assert log == {"project": "ros", "logstore": "fns"}
    wanted = FunctionSettings("f", "index.handler", "python3.12", 256, 300, {}, "d", log=log)
    same = {"handler": "index.handler", "runtime": "python3.12", "memorySize": 256, "timeout": 300,
            "environmentVariables": {}, "description": "d",
            "logConfig": {"project": "ros", "logstore": "fns", "enableRequestMetrics": False, "logBeginRule": "None"}}
    assert function_changes(same, wanted) == {}
    assert function_changes({**same, "logConfig": {"project": "ros", "logstore": "other"}}, wanted) == {
        "logConfig": {"project": "ros", "logstore": "fns"}}
    assert function_changes({**same, "logConfig": None}, wanted) == {"logConfig": log}
    for bad in ("ros", "/fns", "ros/", "a/b/c"):
        with pytest.raises(DeployError) as found:
            log_config(bad)
        assert found.value.problem == f"--log {bad!r} is not PROJECT/LOGSTORE"


def write_config(tmp_path: Path, profiles: list[dict[str, str]], current: str = "default") -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"current": current, "profiles": profiles}))
    return path


def test_profiles_of_the_aliyun_cli_config_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, [
        {"name": "default", "mode": "AK", "access_key_id": "LTAIa", "access_key_secret": "s1", "region_id": "cn-beijing"},
        {"name": "sts", "mode": "StsToken", "access_key_id": "STS.b", "access_key_secret": "s2", "sts_token": "t"},
        {"name": "role", "mode": "RamRoleArn", "access_key_id": "LTAIc", "access_key_secret": "s3"}])
    first = load_profile(None, path, env={})
    assert first is not None and (first.name, first.credentials, first.region) == (
        "default", Credentials("LTAIa", "s1"), "cn-beijing")
    sts = load_profile(None, path, env={"ALIBABA_CLOUD_PROFILE": "sts"})
    assert sts is not None and sts.credentials.temporary and "s2" not in repr(sts)
    with pytest.raises(ProfileError, match="mode RamRoleArn, which needs a call to STS"):
        load_profile("role", path, env={})
    with pytest.raises(ProfileError, match=r"no profile 'nope' in .* \(profiles: default, sts, role\)"):
        load_profile("nope", path, env={})
    assert load_profile(None, tmp_path / "absent.json", env={}) is None
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile("x", tmp_path / "absent.json", env={})


def test_the_environment_wins_over_the_current_profile_and_a_region_is_required(tmp_path: Path) -> None:
    path = str(write_config(tmp_path, [{"name": "default", "mode": "AK", "access_key_id": "LTAIp",
                                        "access_key_secret": "sp"}]))
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIe", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "se"}
    target = resolve_target(profile=None, region="cn-hangzhou", account_id=None, endpoint=None, env=env,
                            config_file=path)
    assert target.credentials.access_key_id == "LTAIe"
    assert resolve_target(profile="default", region="r-1", account_id="7", endpoint="127.0.0.1:1", env=env,
                          config_file=path).credentials.access_key_id == "LTAIp"
    with pytest.raises(DeployError, match="no region given") as no_region:
        resolve_target(profile=None, region=None, account_id=None, endpoint=None, env={}, config_file=path)
    assert "--region" in no_region.value.next_step
    with pytest.raises(DeployError, match="no Alibaba Cloud credentials") as none:
        resolve_target(profile=None, region="r", account_id=None, endpoint=None, env={},
                       config_file=str(tmp_path / "absent.json"))
    assert "ALIBABA_CLOUD_ACCESS_KEY_ID" in none.value.next_step and "aliyun configure" in none.value.next_step


def test_fc_refusals_say_what_to_do_next() -> None:
    denied = explain("AccessDenied", 403, "not authorized", "create function f", "cn-hangzhou")
    assert "AliyunFCFullAccess" in denied.next_step and "region cn-hangzhou" in denied.next_step
    assert "access key" in explain("InvalidAccessKeyId", 401, "", "get function f", "r").next_step


def test_the_cli_without_credentials_exits_2_naming_the_next_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    assert main(["deploy", "samples/greeting.py:provider", "--region", "cn-hangzhou", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["problem"] == "no Alibaba Cloud credentials found" and "aliyun configure" in error["next_step"]
