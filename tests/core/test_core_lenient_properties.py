"""Properties deployed earlier never block a delete or a rollback: a Delete's ResourceProperties and an
Update's OldResourceProperties that fail today's model reach the handler unvalidated, with
`request.invalid_properties` saying why; Create's and Update's new ResourceProperties stay strict.
End to end through a real ResponseURL server; the best-effort building is also checked on its own."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any, Optional

import msgspec
import pytest
import typing_extensions
from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints

from crhelper import Failure, Request, Result
from crhelper.properties import unvalidated, validate_leniently
from crhelper.testing import make_event


class Volume(BaseModel):
    """Today's model: Size tightened to at most 10, Zone newly required, Name at least 3 characters."""

    Name: str = Field(min_length=3)
    Size: int = Field(default=1, ge=1, le=10)
    Zone: str
    Password: Optional[SecretStr] = Field(default=None, min_length=12)


class VolumeStruct(msgspec.Struct):
    Name: Annotated[str, msgspec.Meta(min_length=3)]
    Zone: str
    Size: Annotated[int, msgspec.Meta(ge=1, le=10)] = 1
    Password: Annotated[str, msgspec.Meta(extra={"secret": True}, min_length=12)] = ""


@dataclasses.dataclass
class VolumeData:
    Name: Annotated[str, StringConstraints(min_length=3)]
    Zone: str
    Size: Annotated[int, Field(ge=1, le=10)] = 1
    Tags: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.Name.startswith("x"):
            raise ValueError("names starting with x are reserved")


#: Deployed when Size could be 50 and Zone did not exist yet.
DEPLOYED = {"Name": "vol-sekrit", "Size": "50"}


def run(provider, server, event):
    server.attach(event)
    provider.handle(event)
    return server.wait_for(event["RequestId"], timeout=5)


def log_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def warnings_of(text: str) -> list[dict[str, Any]]:
    return [line for line in log_lines(text) if line["level"] == "WARNING" and "today's model" in line["message"]]


def recording_delete(providers, model: Any, seen: list[tuple[Any, Request]]):
    """A provider whose Create and Delete take `model` and record what they were called with."""
    provider = providers()

    def create(props: Any, request: Request) -> Result:
        seen.append((props, request))
        return Result(physical_id="vol-1")

    def delete(props: Any, request: Request) -> None:
        seen.append((props, request))

    for operation, handler in ((provider.create, create), (provider.delete, delete)):
        handler.__annotations__["props"] = model  # the model of this test, as a handler would declare it
        operation("Custom::Volume")(handler)
    return provider


def test_delete_with_properties_todays_pydantic_model_refuses_calls_the_handler(providers, response_server, capsys):
    seen: list[tuple[Any, Request]] = []
    provider = recording_delete(providers, Volume, seen)
    body = run(provider, response_server, make_event("Delete", "Custom::Volume", DEPLOYED, physical_resource_id="vol-1"))
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "vol-1"
    [(props, request)] = seen
    assert isinstance(props, Volume)
    assert (props.Name, props.Size) == ("vol-sekrit", 50)  # converted by the field's type, its rule aside
    assert not hasattr(props, "Zone")  # a required field it never had stays unset, not invented
    assert props.Password is None  # an absent optional field takes its default
    assert request.invalid_properties == (
        "invalid ResourceProperties: ResourceProperties.Size: Input should be less than or equal to 10; "
        "ResourceProperties.Zone: Field required")
    [warning] = warnings_of(capsys.readouterr().err)
    assert warning["message"] == ("Delete's ResourceProperties fail today's model: ResourceProperties.Size, "
                                  "ResourceProperties.Zone; the handler is called with them unvalidated")
    assert warning["InvalidFields"] == ["ResourceProperties.Size", "ResourceProperties.Zone"]
    assert warning["RequestType"] == "Delete" and "sekrit" not in json.dumps(warning)
    assert "50" not in warning["message"] + warning["Problem"]


def test_delete_with_valid_properties_is_unchanged(providers, response_server, capsys):
    seen: list[tuple[Any, Request]] = []
    provider = recording_delete(providers, Volume, seen)
    body = run(provider, response_server, make_event("Delete", "Custom::Volume", {"Name": "vol-1", "Zone": "z-a"},
                                                     physical_resource_id="vol-1"))
    assert body["Status"] == "SUCCESS"
    [(props, request)] = seen
    assert props == Volume(Name="vol-1", Zone="z-a") and request.invalid_properties is None
    assert warnings_of(capsys.readouterr().err) == []


def test_delete_with_properties_todays_msgspec_struct_refuses_calls_the_handler(providers, response_server, capsys):
    seen: list[tuple[Any, Request]] = []
    provider = recording_delete(providers, VolumeStruct, seen)
    body = run(provider, response_server, make_event("Delete", "Custom::Volume", DEPLOYED, physical_resource_id="vol-1"))
    assert body["Status"] == "SUCCESS"
    [(props, request)] = seen
    assert isinstance(props, VolumeStruct)
    assert (props.Name, props.Size, props.Zone, props.Password) == ("vol-sekrit", 50, msgspec.UNSET, "")
    # msgspec stops at the first error it meets
    assert request.invalid_properties == "invalid ResourceProperties: ResourceProperties.Size: Expected `int` <= 10"
    [warning] = warnings_of(capsys.readouterr().err)
    assert warning["InvalidFields"] == ["ResourceProperties.Size"] and "sekrit" not in json.dumps(warning)


def test_delete_with_properties_todays_dataclass_refuses_calls_the_handler(providers, response_server, capsys):
    seen: list[tuple[Any, Request]] = []
    provider = recording_delete(providers, VolumeData, seen)
    deployed = {"Name": "xy", "Size": "50", "Zone": "z-a"}
    body = run(provider, response_server, make_event("Delete", "Custom::Volume", deployed, physical_resource_id="vol-1"))
    assert body["Status"] == "SUCCESS"
    [(props, request)] = seen
    assert isinstance(props, VolumeData)  # built without __init__: its __post_init__ would refuse "xy"
    assert (props.Name, props.Size, props.Zone, props.Tags) == ("xy", 50, "z-a", [])
    assert request.invalid_properties == (
        "invalid ResourceProperties: ResourceProperties.Name: String should have at least 3 characters; "
        "ResourceProperties.Size: Input should be less than or equal to 10")
    [warning] = warnings_of(capsys.readouterr().err)
    assert warning["InvalidFields"] == ["ResourceProperties.Name", "ResourceProperties.Size"]


def test_update_with_old_properties_todays_model_refuses_gets_them_best_effort(providers, response_server, capsys):
    provider = providers()
    seen: list[tuple[Volume, Any, Request]] = []

    @provider.update("Custom::Volume")
    def update(props: Volume, old: Volume, request: Request) -> Result:
        seen.append((props, old, request))
        return Result(data={"Grown": props.Size > old.Size})

    event = make_event("Update", "Custom::Volume", {"Name": "vol-1", "Size": 8, "Zone": "z-a"},
                       old_properties=DEPLOYED, physical_resource_id="vol-1")
    body = run(provider, response_server, event)
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Grown": False}
    [(props, old, request)] = seen
    assert props == Volume(Name="vol-1", Size=8, Zone="z-a")  # the new properties: validated
    assert isinstance(old, Volume) and (old.Name, old.Size) == ("vol-sekrit", 50)
    assert request.invalid_properties == (
        "invalid OldResourceProperties: OldResourceProperties.Size: Input should be less than or equal to 10; "
        "OldResourceProperties.Zone: Field required")
    [warning] = warnings_of(capsys.readouterr().err)
    assert warning["message"].startswith("Update's OldResourceProperties fail today's model: OldResourceProperties.Size")


def test_create_and_update_with_properties_the_model_refuses_stay_failed(providers, response_server):
    seen: list[tuple[Any, Request]] = []
    provider = recording_delete(providers, Volume, seen)

    @provider.update("Custom::Volume")
    def update(props: Volume, old: Volume, request: Request) -> None:
        seen.append((props, request))

    created = run(provider, response_server, make_event("Create", "Custom::Volume", DEPLOYED))
    assert created["Status"] == "FAILED"
    assert created["Reason"] == ("invalid ResourceProperties: ResourceProperties.Size: Input should be less than or "
                                 "equal to 10; ResourceProperties.Zone: Field required")
    updated = run(provider, response_server, make_event("Update", "Custom::Volume", DEPLOYED,
                                                        old_properties={"Name": "vol-1", "Zone": "z-a"},
                                                        physical_resource_id="vol-1"))
    assert updated["Status"] == "FAILED"
    assert updated["Reason"].startswith("invalid ResourceProperties: ResourceProperties.Size: Input should be less than "
                                        "or equal to 10; ResourceProperties.Zone: Field required (if this Update is a "
                                        "rollback, these are the properties deployed before it")
    assert seen == []


def test_a_delete_handler_may_still_refuse_invalid_properties(providers, response_server):
    provider = providers()

    @provider.delete("Custom::Volume")
    def delete(props: Volume, request: Request) -> None:
        if request.invalid_properties:
            raise Failure(f"cannot find the volume to delete: {request.invalid_properties}")

    body = run(provider, response_server, make_event("Delete", "Custom::Volume", DEPLOYED, physical_resource_id="vol-1"))
    assert body["Status"] == "FAILED" and body["PhysicalResourceId"] == "vol-1"
    assert body["Reason"] == ("cannot find the volume to delete: invalid ResourceProperties: ResourceProperties.Size: "
                              "Input should be less than or equal to 10; ResourceProperties.Zone: Field required")


def test_a_secret_that_fails_todays_rules_stays_secret(providers, response_server, capsys):
    provider = providers()

    @provider.delete("Custom::Volume")
    def delete(props: Volume, request: Request) -> None:
        assert props.Password is not None
        raise RuntimeError(f"login refused with {props.Password.get_secret_value()}")

    deployed = {"Name": "vol-1", "Zone": "z-a", "Password": "hunter2"}  # 7 characters: today's rule wants 12
    body = run(provider, response_server, make_event("Delete", "Custom::Volume", deployed, physical_resource_id="vol-1"))
    assert body["Status"] == "FAILED" and body["Reason"] == "RuntimeError: login refused with ***"
    logged = capsys.readouterr().err
    [warning] = warnings_of(logged)
    assert warning["InvalidFields"] == ["ResourceProperties.Password"]
    assert "hunter2" not in logged and "RuntimeError" in logged


def test_a_msgspec_secret_that_fails_todays_rules_stays_secret(providers, response_server, capsys):
    provider = providers()

    @provider.delete("Custom::Volume")
    def delete(props: VolumeStruct, request: Request) -> None:
        raise Failure(f"{request.invalid_properties} with {props.Password}")

    deployed = {"Name": "vol-1", "Zone": "z-a", "Password": "hunter2"}
    body = run(provider, response_server, make_event("Delete", "Custom::Volume", deployed, physical_resource_id="vol-1"))
    assert body["Reason"] == "invalid ResourceProperties: ResourceProperties.Password: Expected `str` of length >= 12 with ***"
    assert "hunter2" not in capsys.readouterr().err


def test_untyped_handlers_get_the_raw_mapping_as_before(providers, response_server):
    provider = providers()
    seen: list[tuple[Any, Request]] = []
    provider.delete("Custom::Volume")(lambda props, request: seen.append((props, request)))
    body = run(provider, response_server, make_event("Delete", "Custom::Volume", DEPLOYED, physical_resource_id="vol-1"))
    assert body["Status"] == "SUCCESS"
    assert [(props, request.invalid_properties) for props, request in seen] == [(DEPLOYED, None)]


class Disk(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    size_gb: int = Field(alias="SizeGb", le=100)
    kind: str = Field(default="ssd", alias="Kind")


class Server(BaseModel):
    Name: str
    Boot: Disk
    Disks: list[Disk] = []


def test_unvalidated_pydantic_reads_aliases_and_builds_nested_models():
    value = unvalidated(Server, {"Name": "s", "Boot": {"SizeGb": "500", "Colour": "red"}, "Disks": "none"})
    assert isinstance(value, Server) and isinstance(value.Boot, Disk)
    assert (value.Boot.size_gb, value.Boot.kind, value.Boot.model_extra) == (500, "ssd", {"Colour": "red"})
    assert value.Disks == "none"  # neither its type nor a model: kept as sent
    assert value.model_fields_set == {"Name", "Boot", "Disks"}


def test_unvalidated_msgspec_reads_renamed_keys():
    class Renamed(msgspec.Struct, rename="pascal", frozen=True):
        disk_size: Annotated[int, msgspec.Meta(le=100)]
        zone_id: str

    value = unvalidated(Renamed, {"DiskSize": "500"})
    assert isinstance(value, Renamed) and (value.disk_size, value.zone_id) == (500, msgspec.UNSET)


def test_unvalidated_typeddict_keeps_every_key():
    class Tags(typing_extensions.TypedDict):
        Count: int
        Owner: str

    assert unvalidated(Tags, {"Count": "3", "Extra": 1}) == {"Count": 3, "Extra": 1}


def test_a_model_nothing_can_be_built_for_gives_the_raw_mapping():
    class Refusing(BaseModel):
        Name: str = Field(min_length=3)

        def model_post_init(self, context: Any) -> None:
            raise ValueError("refused")

    checked = validate_leniently(Refusing, {"Name": "ab"}, "ResourceProperties")
    assert checked.value == {"Name": "ab"}
    assert checked.problem is not None and checked.problem.fields == ("ResourceProperties.Name",)
    assert unvalidated(int, {"a": 1}) == {"a": 1}


@pytest.mark.parametrize("model", [Volume, VolumeStruct, VolumeData])
def test_valid_properties_validate_as_strictly_as_before(model):
    checked = validate_leniently(model, {"Name": "vol-1", "Zone": "z-a", "Size": "4"}, "ResourceProperties")
    assert checked.problem is None and type(checked.value) is model and checked.value.Size == 4
