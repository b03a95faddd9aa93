"""No stack a user cannot get out of (issue 11, "No dead ends"): each case through the command line
as a user runs it (`python -m crhelper.cli.main stack ...`, a real process with its own
CRHELPER_HOME), or through the emulator where the command line adds nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from stack_support import FC3, PROVIDERS, REPO, echo_template, spec

ARN = "arn:aws:lambda:us-east-1:123456789012:function:echo"
NO_ACCOUNT = "acs:fc:cn-hangzhou:services/tests/functions/echo"
EMPTY_ACCOUNT = "acs:fc:cn-hangzhou::functions/echo"
UNBOUND = "acs:fc:cn-hangzhou:123456789:functions/nobody"


def stack(*args: str, home: Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """`crhelper stack ...` exactly as typed, from `cwd`, on its own state directory."""
    env = {**os.environ, "CRHELPER_HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "crhelper.cli.main", "stack", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.stdout.strip(), f"no JSON on stdout (rc {result.returncode}); stderr: {result.stderr}"
    return json.loads(result.stdout)


def statuses(events: list[dict[str, Any]], logical_id: str) -> list[str]:
    return [e["status"] for e in events if e["logical_id"] == logical_id]


# ------------------------------------------------------------------ 1. bindings stored absolute


@pytest.mark.slow
def test_a_relative_provider_file_is_resolved_where_it_was_given_and_works_from_anywhere(tmp_path: Path, home: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(PROVIDERS, work / "provider.py")
    (work / "t.json").write_text(echo_template(FC3), encoding="utf-8")
    created = stack("create", "t.json", "--stack", "rel", "-s", f"{FC3}=provider.py:provider", home=home, cwd=work)
    assert created.returncode == 0, created.stdout + created.stderr
    remembered = json.loads((home / "stack-bindings.json").read_text(encoding="utf-8"))["rel"]["bindings"]
    assert remembered == {FC3: f"{(work / 'provider.py').resolve()}:provider"}
    # Later, from another directory: update and delete reach the same file (not <home>/provider.py).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    updated = stack("update", str(work / "t.json"), "--stack", "rel", home=home, cwd=elsewhere)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    deleted = stack("delete", "--stack", "rel", home=home, cwd=elsewhere)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert "stack rel: DELETE_COMPLETE" in deleted.stdout

    # A bindings file's relative entries are resolved against the file's own directory, and kept absolute.
    (work / "t.bindings.yaml").write_text(f"bindings:\n  {FC3}: provider.py:provider\n", encoding="utf-8")
    assert stack("create", str(work / "t.json"), "--stack", "file", home=home, cwd=elsewhere).returncode == 0
    remembered = json.loads((home / "stack-bindings.json").read_text(encoding="utf-8"))["file"]["bindings"]
    assert remembered == {FC3: f"{(work / 'provider.py').resolve()}:provider"}
    (work / "t.bindings.yaml").unlink()
    assert stack("delete", "--stack", "file", home=home, cwd=tmp_path).returncode == 0


# ------------------------------------------------------------------ 2. properties only from success:
# tests/emulator/test_emulator_dead_ends.py (the command line adds nothing there)


# ------------------------------------------------------------------ 3. ServiceToken forms


@pytest.mark.slow
def test_validate_create_and_update_refuse_malformed_service_tokens_listing_the_valid_forms(tmp_path: Path, home: Path) -> None:
    body = {name: {"Type": "Custom::Echo", "Properties": {"ServiceToken": token, "Parameters": {}}}
            for name, token in (("Aws", ARN), ("NoAccount", NO_ACCOUNT), ("EmptyAccount", EMPTY_ACCOUNT))}
    template = tmp_path / "bad.json"
    template.write_text(json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": body}), encoding="utf-8")

    checked = stack("validate", str(template), home=home)
    assert checked.returncode == 2
    assert f"Resources.Aws.Properties.ServiceToken: '{ARN}' is not a valid ServiceToken: the token must start with" in checked.stderr
    assert f"Resources.NoAccount.Properties.ServiceToken: '{NO_ACCOUNT}' is not a valid ServiceToken: an 'acs:' token " \
           "needs five ':'-separated parts" in checked.stderr
    assert "Resources.EmptyAccount.Properties.ServiceToken" in checked.stderr and "account id '' must be digits only" in checked.stderr
    assert "valid forms: acs:fc:<region_id>:<account_id>:services/<service_name>/functions/<function_name> (FC 2.0)" in checked.stderr
    assert "web:<http(s) url>" in checked.stderr

    created = stack("create", str(template), "--stack", "bad", "-s", f"{FC3}={spec()}", home=home)
    assert created.returncode == 2 and "not a valid ServiceToken" in created.stderr
    assert "no provider is bound" not in created.stderr  # malformed, not "not bound"
    assert "stack-not-found" == as_json(stack("describe", "--stack", "bad", "--json", home=home))["error"]["kind"]

    good = tmp_path / "good.json"
    good.write_text(echo_template(FC3), encoding="utf-8")
    assert stack("create", str(good), "--stack", "ok", "-s", f"{FC3}={spec()}", home=home).returncode == 0
    refused = stack("update", str(template), "--stack", "ok", home=home)
    assert refused.returncode == 2 and "not a valid ServiceToken" in refused.stderr
    assert stack("delete", "--stack", "ok", home=home).returncode == 0


@pytest.mark.slow
def test_a_resource_never_sent_a_request_is_deleted_without_one(tmp_path: Path, home: Path) -> None:
    """Tokens known only at run time (an attribute of another resource): malformed, or bound to nothing."""
    def write(name: str, token: str) -> str:
        doc = {"ROSTemplateFormatVersion": "2015-09-01", "Resources": {
            "Source": {"Type": "Custom::Echo", "Properties": {"ServiceToken": FC3, "Parameters": {"Name": "s", "Token": token}}},
            "Target": {"Type": "Custom::Echo", "Properties": {"ServiceToken": {"Fn::GetAtt": ["Source", "Token"]},
                                                               "Parameters": {"Name": "t"}}}}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        return str(path)

    rolled = as_json(stack("create", write("arn", ARN), "--stack", "arn", "-s", f"{FC3}={spec()}", "--json", home=home))
    assert rolled["Stack"]["status"] == "CREATE_ROLLBACK_COMPLETE", rolled["Stack"]["status_reason"]
    assert "Resource Target failed: Resources.Target.Properties.ServiceToken: " \
           f"'{ARN}' is not a valid ServiceToken" in rolled["Stack"]["status_reason"]
    assert "DELETE_IN_PROGRESS" not in statuses(rolled["Events"], "Target")
    assert statuses(rolled["Events"], "Source")[-1] == "DELETE_COMPLETE"

    kept = as_json(stack("create", write("unbound", UNBOUND), "--stack", "unbound", "-s", f"{FC3}={spec()}",
                         "--disable-rollback", "--json", home=home))
    assert kept["Stack"]["status"] == "CREATE_FAILED"
    assert f"no provider is bound to ServiceToken {UNBOUND}" in kept["Stack"]["status_reason"]
    deleted = as_json(stack("delete", "--stack", "unbound", "--json", home=home))
    assert deleted["Stack"]["status"] == "DELETE_COMPLETE", deleted["Stack"]["status_reason"]
    assert statuses(deleted["Events"], "Target") == []  # no Delete: nothing ever heard of it
    assert statuses(deleted["Events"], "Source") == ["DELETE_IN_PROGRESS", "DELETE_COMPLETE"]


# ------------------------------------------------------------------ 4. --retain / --retain-all


@pytest.mark.slow
def test_retain_gets_a_delete_failed_stack_deleted(tmp_path: Path, home: Path) -> None:
    template = tmp_path / "t.json"
    template.write_text(echo_template(FC3, {"Stuck": {"Name": "x", "FailDelete": "always"}, "Other": {"Name": "o"}}),
                        encoding="utf-8")
    assert stack("create", str(template), "--stack", "sticky", "-s", f"{FC3}={spec()}", home=home).returncode == 0

    failed = stack("delete", "--stack", "sticky", home=home)
    assert failed.returncode == 1
    assert "stack sticky: DELETE_FAILED: Resource Stuck failed: intentional delete failure: always" in failed.stdout
    assert "`crhelper stack delete --stack sticky --retain Stuck`" in failed.stdout  # the way out, named

    unknown = stack("delete", "--stack", "sticky", "--retain", "Nope", home=home)
    assert unknown.returncode == 2
    assert "cannot retain Nope: stack 'sticky' has no such resource (its resources: Other, Stuck)" in unknown.stderr
    assert "crhelper stack describe --stack sticky" in unknown.stderr

    retained = as_json(stack("delete", "--stack", "sticky", "--retain", "Stuck", "--json", home=home))
    assert retained["Stack"]["status"] == "DELETE_COMPLETE"
    stuck = [e for e in retained["Events"] if e["logical_id"] == "Stuck"]
    assert [e["status"] for e in stuck] == ["DELETE_COMPLETE"]  # no DELETE_IN_PROGRESS: no request sent
    assert stuck[0]["reason"].startswith("retained (RetainResources): no Delete request sent")
    assert statuses(retained["Events"], "Other") == []  # deleted by the first attempt already

    help_text = stack("delete", "--help", home=home).stdout
    assert "--retain RESOURCE" in help_text and "--retain-all" in help_text
    assert "crhelper stack delete --stack demo --retain Greeting" in help_text


@pytest.mark.slow
def test_retain_all_sends_no_request_even_when_the_provider_is_gone(tmp_path: Path, home: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(PROVIDERS, work / "gone.py")
    template = tmp_path / "t.json"
    template.write_text(echo_template(FC3, {"A": {"Name": "a"}, "B": {"Name": "b"}}), encoding="utf-8")
    assert stack("create", str(template), "--stack", "orphan", "-s", f"{FC3}={work / 'gone.py'}:provider",
                 home=home).returncode == 0
    (work / "gone.py").unlink()  # the provider is gone: every Delete would fail
    assert stack("delete", "--stack", "orphan", home=home).returncode == 1
    deleted = as_json(stack("delete", "--stack", "orphan", "--retain-all", "--json", home=home))
    assert deleted["Stack"]["status"] == "DELETE_COMPLETE"
    for name in ("A", "B"):
        events = [e for e in deleted["Events"] if e["logical_id"] == name]
        assert [e["status"] for e in events] == ["DELETE_COMPLETE"]
        assert events[0]["reason"].startswith("retained (RetainAllResources): no Delete request sent")
    described = as_json(stack("describe", "--stack", "orphan", "--json", home=home))
    assert described["status"] == "DELETE_COMPLETE"


# ------------------------------------------------------------------ 5. UsePreviousParameters


@pytest.mark.slow
def test_update_takes_template_defaults_unless_use_previous_parameters(tmp_path: Path, home: Path) -> None:
    template = tmp_path / "t.json"
    template.write_text(echo_template(FC3, {"Echo": {"Name": {"Ref": "Who"}, "Times": {"Ref": "Times"}}}, Parameters={
        "Who": {"Type": "String", "Default": "default"}, "Times": {"Type": "Number", "Default": 1},
        "Tag": {"Type": "String"}}, ), encoding="utf-8")
    created = stack("create", str(template), "--stack", "params", "-p", "Who=given", "-p", "Tag=t", "-s", f"{FC3}={spec()}",
                    home=home)
    assert created.returncode == 0, created.stdout + created.stderr

    kept = as_json(stack("update", "--stack", "params", "--use-previous-parameters", "-p", "Times=2", "--json", home=home))
    assert kept["Stack"]["status"] == "UPDATE_COMPLETE" and kept["Stack"]["parameters"] == {"Who": "given", "Times": 2, "Tag": "t"}

    missing = stack("update", "--stack", "params", "-p", "Times=3", home=home)  # Tag has no default: it must be given
    assert missing.returncode == 2 and "Parameters.Tag: no value given" in missing.stderr
    assert "--use-previous-parameters to keep the stack's current values" in missing.stderr

    reset = as_json(stack("update", "--stack", "params", "-p", "Tag=t", "--json", home=home))
    assert reset["Stack"]["parameters"] == {"Who": "default", "Times": 1, "Tag": "t"}  # ROS: the template's defaults
    assert reset["Outputs"] == {"EchoName": "default"}

    help_text = stack("update", "--help", home=home).stdout
    assert "--use-previous-parameters" in help_text and "template's defaults" in help_text


# ------------------------------------------------------------------ 6. errors under --json


@pytest.mark.slow
@pytest.mark.parametrize("args,kind,message", [
    (("validate", "BAD", "--json"), "template-invalid", "not a valid ServiceToken"),
    (("validate", "missing.yaml", "--json"), "usage", "cannot read template missing.yaml"),
    (("create", "BAD", "--stack", "x", "--json"), "template-invalid", "not a valid ServiceToken"),
    (("update", "--stack", "ghost", "--json"), "stack-not-found", "stack 'ghost' does not exist"),
    (("delete", "--json"), "usage", "the following arguments are required: --stack"),
    (("describe", "--stack", "ghost", "--json"), "stack-not-found", "stack 'ghost' does not exist"),
    (("events", "--stack", "ghost", "--json"), "stack-not-found", "stack 'ghost' does not exist"),
    (("outputs", "--stack", "bad name", "--json"), "stack-not-found", "does not exist"),
    (("create", "templates/demo.yaml", "--stack", "x", "-p", "oops", "--json"), "usage", "expected Key=Value"),
])
def test_errors_under_json_are_one_json_document(tmp_path: Path, home: Path, args: tuple[str, ...], kind: str,
                                                 message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(echo_template(ARN), encoding="utf-8")
    result = stack(*[str(bad) if a == "BAD" else a for a in args], home=home)
    assert result.returncode == 2
    document = as_json(result)
    error = document["error"]
    assert error["kind"] == kind and message in error["problem"] and error["next_step"], document
    if args[0] == "validate":
        assert document["valid"] is False
    if kind == "template-invalid":
        assert any("Resources.Echo.Properties.ServiceToken" in e for e in error["errors"])
    assert result.stderr == ""
