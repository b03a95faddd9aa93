"""`crhelper deploy` against the local Function Compute, through the real SDKs (fc2 and
alibabacloud-fc20230330): create, idempotence, code-only updates, pruning, the ServiceTokens."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from crhelper.cli.main import main
from crhelper.local.fc_server import LocalFunctionCompute
from crhelper.packaging.plan import INDEX_SOURCE

pytestmark = pytest.mark.slow

GREETING = Path(__file__).resolve().parent / "deploy_hello.py"
SPEC = f"{GREETING}:provider"


def package(tmp_path: Path, marker: str = "") -> Path:
    """A zip shaped as `crhelper package` writes it (index.py + the provider); the library comes
    from the worker's inherited sys.path, so no pip run is needed."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in (("index.py", INDEX_SOURCE), ("deploy_hello.py", (GREETING.read_text() + marker).encode())):
            archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)  # same inputs, same bytes
    path = tmp_path / f"hello{len(marker)}.zip"
    path.write_bytes(buffer.getvalue())
    return path


@pytest.fixture(scope="module")
def fc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFunctionCompute]:
    with LocalFunctionCompute(state_dir=tmp_path_factory.mktemp("fc-state")) as server:
        yield server


def deploy(fc: LocalFunctionCompute, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["deploy", SPEC, "--endpoint", fc.endpoint.removeprefix("http://"), "--region", fc.region,
                 "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def actions(result: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(s["action"], s["kind"], s["name"]) for s in result["steps"]}


def changes(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """What the deploy did, in the order it did it."""
    return [(s["action"], s["kind"], s["name"]) for s in result["steps"] if s["action"] != "unchanged"]


def test_fc3_deploy_creates_then_changes_nothing_then_updates_code_only_then_prunes_the_timer(
        fc: LocalFunctionCompute, keys: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from alibabacloud_fc20230330 import models

    first_zip = package(tmp_path)
    code, first = deploy(fc, capsys, "--zip", str(first_zip), "--function", "greet3", "--store", "sqlite:///tmp/x.db")
    assert code == 0, first
    assert first["service_token"] == f"acs:fc:{fc.region}:{fc.account_id}:functions/greet3"  # account from the ARN
    assert actions(first) == {("create", "function", "greet3"), ("create", "async-config", "greet3"),
                              ("create", "trigger", "crhelper-resume")}
    client = fc.client3()
    held = client.get_function("greet3", models.GetFunctionRequest()).body
    assert (held.handler, held.runtime) == ("index.handler", "python3.12")
    assert held.environment_variables == {"CRHELPER_PROVIDER": "deploy_hello:provider", "CRHELPER_STORE": "sqlite:///tmp/x.db"}
    triggers = client.list_triggers("greet3", models.ListTriggersRequest()).body.triggers
    assert [(t.trigger_name, t.trigger_type, json.loads(t.trigger_config)["cronExpression"]) for t in triggers] == [
        ("crhelper-resume", "timer", "@every 5m")]
    assert client.get_async_invoke_config("greet3", models.GetAsyncInvokeConfigRequest()).body \
        .max_async_retry_attempts == 3

    code, second = deploy(fc, capsys, "--zip", str(first_zip), "--function", "greet3", "--store", "sqlite:///tmp/x.db")
    assert code == 0 and second["changed"] is False
    assert {s["action"] for s in second["steps"]} == {"unchanged"}
    modified = client.get_function("greet3", models.GetFunctionRequest()).body.last_modified_time

    code, third = deploy(fc, capsys, "--zip", str(package(tmp_path, "\n# v2\n")), "--function", "greet3",
                         "--store", "sqlite:///tmp/x.db")
    assert code == 0 and third["changed"] is True
    assert changes(third) == [("update", "code", "greet3")]
    after = client.get_function("greet3", models.GetFunctionRequest()).body
    assert after.environment_variables["CRHELPER_STORE"] == "sqlite:///tmp/x.db" and after.last_modified_time >= modified

    # A trigger deploy did not create is never pruned; its own timer is, once no longer wanted.
    client.create_trigger("greet3", models.CreateTriggerRequest(body=models.CreateTriggerInput(
        trigger_name="mine", trigger_type="timer", trigger_config=json.dumps({"cronExpression": "@every 1h"}))))
    code, fourth = deploy(fc, capsys, "--zip", str(package(tmp_path, "\n# v2\n")), "--function", "greet3",
                          "--store", "sqlite:///tmp/x.db", "--timer", "none")
    assert code == 0
    assert changes(fourth) == [("delete", "trigger", "crhelper-resume")]
    assert [t.trigger_name for t in client.list_triggers("greet3", models.ListTriggersRequest()).body.triggers] == ["mine"]


def test_fc2_deploy_creates_the_service_and_function_and_is_idempotent(
        fc: LocalFunctionCompute, keys: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    zip_path = package(tmp_path)
    args = ("--fc-version", "2", "--service", "ros-providers", "--account-id", fc.account_id, "--zip", str(zip_path),
            "--timer", "0 */10 * * * *", "--mns-topic", "ros-events", "--invocation-role", "acs:ram::1:role/mns")
    code, first = deploy(fc, capsys, *args)
    assert code == 0, first
    assert first["service_token"] == f"acs:fc:{fc.region}:{fc.account_id}:services/ros-providers/functions/deploy_hello"
    assert actions(first) == {("create", "service", "ros-providers"), ("create", "function", "deploy_hello"),
                              ("create", "async-config", "deploy_hello"), ("create", "trigger", "crhelper-resume"),
                              ("create", "trigger", "crhelper-mns")}
    client = fc.client()
    held = client.get_function("ros-providers", "deploy_hello").data
    assert (held["runtime"], held["environmentVariables"]) == ("python3.10", {"CRHELPER_PROVIDER": "deploy_hello:provider"})
    mns = client.get_trigger("ros-providers", "deploy_hello", "crhelper-mns").data
    assert mns["sourceArn"] == f"acs:mns:{fc.region}:{fc.account_id}:/topics/ros-events"

    code, second = deploy(fc, capsys, *args)
    assert code == 0 and second["changed"] is False, second

    moved = [a if a != "ros-events" else "ros-events-2" for a in args]  # FC cannot change a sourceArn: replaced
    code, replaced = deploy(fc, capsys, *moved)
    assert code == 0 and changes(replaced) == [("update", "trigger", "crhelper-mns")]
    assert [s["detail"] for s in replaced["steps"] if s["name"] == "crhelper-mns"] == ["replaced: type or source changed"]
    assert client.get_trigger("ros-providers", "deploy_hello", "crhelper-mns").data["sourceArn"].endswith("/ros-events-2")

    code, third = deploy(fc, capsys, *args[:-4], "--memory", "512")  # no MNS topic any more, more memory
    assert code == 0
    assert changes(third) == [("update", "function", "deploy_hello"),
                                                                  ("delete", "trigger", "crhelper-mns")]
    assert client.get_function("ros-providers", "deploy_hello").data["memorySize"] == 512
    assert [s["detail"] for s in third["steps"] if s["kind"] == "code"] == ["same checksum"]


def test_both_service_token_forms_reach_their_functions(fc: LocalFunctionCompute, keys: None,
                                                         capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                         invoke_reaches: Callable[[Any, str, str], None]) -> None:
    zip_path = str(package(tmp_path))
    tokens = [deploy(fc, capsys, "--zip", zip_path, "--function", "token3", "--timer", "none")[1]["service_token"],
              deploy(fc, capsys, "--zip", zip_path, "--fc-version", "2", "--service", "tokens", "--function", "token2",
                     "--account-id", fc.account_id, "--timer", "none")[1]["service_token"]]
    for token, name in zip(tokens, ("three", "two")):
        invoke_reaches(fc, token, name)


def test_a_profile_file_gives_the_credentials_and_a_wrong_key_says_what_to_do(
        fc: LocalFunctionCompute, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_PROFILE",
                 "ALIBABA_CLOUD_REGION_ID"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / ".aliyun").mkdir()
    (tmp_path / ".aliyun" / "config.json").write_text(json.dumps({"current": "wrong", "profiles": [
        {"name": "local", "mode": "AK", "access_key_id": fc.access_key_id, "access_key_secret": fc.access_key_secret,
         "region_id": fc.region},
        {"name": "wrong", "mode": "AK", "access_key_id": fc.access_key_id, "access_key_secret": "not-the-secret",
         "region_id": fc.region}]}))
    endpoint = fc.endpoint.removeprefix("http://")
    zip_path = str(package(tmp_path))
    capsys.readouterr()
    assert main(["deploy", SPEC, "--endpoint", endpoint, "--zip", zip_path, "--function", "profiled",
                 "--profile", "local", "--json"]) == 0  # region from the profile too
    assert json.loads(capsys.readouterr().out)["service_token"].endswith(":functions/profiled")
    assert main(["deploy", SPEC, "--endpoint", endpoint, "--zip", zip_path, "--function", "profiled"]) == 2
    err = capsys.readouterr().err
    assert "SignatureDoesNotMatch" in err and "next: check the access key" in err and "not-the-secret" not in err
    assert main(["deploy", SPEC, "--endpoint", endpoint, "--zip", zip_path, "--fc-version", "2", "--account-id", "1"]) == 2
    err = capsys.readouterr().err  # FC 2.0: the ErrorMessage, not the raw JSON answer
    assert "FC answered 403 SignatureNotMatch: The request signature" in err and "next: check the access key" in err


def test_without_a_zip_it_builds_the_package_and_a_rebuild_of_the_same_inputs_changes_nothing(
        fc: LocalFunctionCompute, keys: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import importlib.util

    location = Path(__file__).resolve().parents[1] / "packaging" / "packaging_wheels.py"
    loaded = importlib.util.spec_from_file_location("packaging_wheels", location)
    assert loaded is not None and loaded.loader is not None
    wheels_module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(wheels_module)
    wheels = wheels_module.wheelhouse(tmp_path / "wheels", ("3.10",))  # stand-ins: no index is reached
    args = ("--function", "built", "--runtime", "python3.10", "--timer", "none", "--no-index", "--find-links", str(wheels))
    code, first = deploy(fc, capsys, *args)
    assert code == 0, first
    assert ("create", "function", "built") in actions(first)
    from alibabacloud_fc20230330 import models

    held = fc.client3().get_function("built", models.GetFunctionRequest()).body
    assert held.handler == "index.handler" and held.environment_variables["CRHELPER_PROVIDER"] == "deploy_hello:provider"
    code, second = deploy(fc, capsys, *args)
    assert code == 0 and second["changed"] is False, second  # the same bytes again: the checksum matches


def test_the_deployed_timer_reaches_the_providers_recovery_until_a_redeploy_prunes_it(
        fc: LocalFunctionCompute, keys: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import time

    zip_path = str(package(tmp_path))
    before = len(fc.records)
    assert deploy(fc, capsys, "--zip", zip_path, "--function", "ticker", "--timer", "@every 1s")[0] == 0
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not [r for r in fc.records[before:] if r.function == "ticker" and r.attempts]:
        time.sleep(0.1)
    code, pruned = deploy(fc, capsys, "--zip", zip_path, "--function", "ticker", "--timer", "none")
    assert code == 0 and changes(pruned) == [("delete", "trigger", "crhelper-resume")]
    assert fc.wait_idle(15)
    fired = [r for r in fc.records[before:] if r.function == "ticker"]
    assert fired and {(r.invocation_type, r.status) for r in fired} == {("Async", "succeeded")}
    assert json.loads(fired[0].attempts[0].result) == {"Recovered": 0}  # the provider's time-trigger answer
    settled = len(fc.records)
    time.sleep(1.5)
    assert [r for r in fc.records[settled:] if r.function == "ticker"] == []  # no timer any more


def test_the_log_option_sets_the_fc3_functions_and_the_fc2_services_log_config_once(
        fc: LocalFunctionCompute, keys: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from alibabacloud_fc20230330 import models

    zip_path = str(package(tmp_path))
    three = ("--zip", zip_path, "--function", "logged3", "--timer", "none", "--log", "ros/fn3")
    assert deploy(fc, capsys, *three)[0] == 0
    held = fc.client3().get_function("logged3", models.GetFunctionRequest()).body.log_config
    assert (held.project, held.logstore) == ("ros", "fn3")
    code, again = deploy(fc, capsys, *three)
    assert code == 0 and again["changed"] is False, again
    code, moved = deploy(fc, capsys, *three[:-1], "ros/other")
    assert code == 0 and changes(moved) == [("update", "function", "logged3")], moved

    two = ("--zip", zip_path, "--fc-version", "2", "--service", "logged", "--function", "logged2",
           "--account-id", fc.account_id, "--timer", "none", "--log", "ros/fn2")
    assert deploy(fc, capsys, *two)[0] == 0
    assert fc.client().get_service("logged").data["logConfig"] == {"project": "ros", "logstore": "fn2"}
    code, again = deploy(fc, capsys, *two)
    assert code == 0 and again["changed"] is False, again
    code, moved = deploy(fc, capsys, *two[:-1], "ros/other")
    assert code == 0 and changes(moved) == [("update", "service", "logged")], moved
    assert fc.client().get_service("logged").data["logConfig"]["logstore"] == "other"
