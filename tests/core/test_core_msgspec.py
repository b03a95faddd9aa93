"""msgspec Structs as the properties type: same rules as pydantic models, errors without values."""

from __future__ import annotations

import pytest

from typing import Annotated, Literal

import msgspec

from crhelper import Provider, Request, Result
from crhelper.properties import _msgspec_error
from crhelper.testing import make_event


class Tag(msgspec.Struct):
    Key: str
    Value: str = ""


class Cluster(msgspec.Struct, forbid_unknown_fields=True):
    Name: Annotated[str, msgspec.Meta(min_length=1)]
    Size: Annotated[int, msgspec.Meta(ge=1, le=9)] = 3
    Tier: Literal["basic", "premium"] = "basic"
    Password: Annotated[str, msgspec.Meta(extra={"secret": True})] = ""
    Tags: list[Tag] = []


def cluster_provider() -> Provider:
    provider = Provider()

    @provider.create("Custom::Cluster")
    def create(props: Cluster, request: Request) -> Result:
        if props.Name == "boom":
            raise RuntimeError(f"cannot log in with {props.Password}")
        return Result(physical_id=f"cluster-{props.Name}", data={"Size": props.Size, "Tier": props.Tier})

    @provider.update("Custom::Cluster")
    def update(props: Cluster, old: Cluster, request: Request) -> Result:
        return Result(data={"Size": props.Size, "Was": old.Size})

    return provider


def run(provider, server, event):
    server.attach(event)
    provider.handle(event)
    return server.wait_for(event["RequestId"])


def test_numeric_strings_are_coerced_and_defaults_apply(response_server):
    body = run(cluster_provider(), response_server, make_event("Create", "Custom::Cluster", {"Name": "a", "Size": "5"}))
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Size": 5, "Tier": "basic"}


def test_errors_name_the_field_and_rule_without_values(response_server):
    provider = cluster_provider()
    cases = [
        ({"Name": "a", "Size": "many"}, "ResourceProperties.Size: Expected `int`, got `str`"),
        ({"Name": "a", "Size": 40}, "ResourceProperties.Size: Expected `int` <= 9"),
        ({"Size": 2}, "ResourceProperties.Name: required field is missing"),
        ({"Name": "a", "Tier": "sekrit-tier"}, "ResourceProperties.Tier: Invalid enum value"),
        ({"Name": "a", "Tags": [{"Value": "v"}]}, "ResourceProperties.Tags[0].Key: required field is missing"),
        ({"Name": "a", "Colour": "red"}, "ResourceProperties: Object contains unknown field `Colour`"),
    ]
    for properties, reason in cases:
        body = run(provider, response_server, make_event("Create", "Custom::Cluster", properties))
        assert body["Status"] == "FAILED"
        assert body["Reason"] == f"invalid ResourceProperties: {reason}", body["Reason"]
        assert "sekrit" not in body["Reason"] and "many" not in body["Reason"]


def test_secret_fields_are_masked(response_server, capsys):
    body = run(cluster_provider(), response_server,
               make_event("Create", "Custom::Cluster", {"Name": "boom", "Password": "hunter2"}))
    assert body["Reason"] == "RuntimeError: cannot log in with ***"
    assert "hunter2" not in capsys.readouterr().err


def test_update_validates_old_properties_too(response_server):
    body = run(cluster_provider(), response_server,
               make_event("Update", "Custom::Cluster", {"Name": "a", "Size": 4}, old_properties={"Name": "a", "Size": "2"},
                          physical_resource_id="cluster-a"))
    assert body["Data"] == {"Size": 4, "Was": 2}


def test_error_mapping_is_pure():
    assert _msgspec_error("Expected `int`, got `str` - at `$.A[2].B`", "ResourceProperties") == (
        "ResourceProperties.A[2].B: Expected `int`, got `str`")
    assert _msgspec_error("Object missing required field `X` - at `$.Inner`", "OldResourceProperties") == (
        "OldResourceProperties.Inner.X: required field is missing")
    assert _msgspec_error("Invalid enum value 'topsecret' - at `$.T`", "P") == "P.T: Invalid enum value"


@pytest.mark.slow
def test_fast_sample_matches_the_pydantic_sample(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    outputs = []
    for sample in ("samples/greeting.py", "samples/greeting_fast.py"):
        result = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "invoke", f"{sample}:provider",
                                 "--event", "samples/events/create.json"], cwd=repo, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        outputs.append(json.loads(result.stdout))
    assert outputs[0] == outputs[1]
