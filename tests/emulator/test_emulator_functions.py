"""Intrinsic functions and pseudo parameters, observed in the requests a provider receives."""

from __future__ import annotations

from typing import Any

from emulator_support import TOKEN, Provider, as_text, custom, template

from crhelper.emulator import StackEmulator


def deploy(emulator: StackEmulator, provider: Provider, doc: dict[str, Any], **parameters: Any) -> dict[str, Any]:
    described = emulator.create("fn", as_text(doc), parameters, provider)
    assert described.status == "CREATE_COMPLETE", described.status_reason
    return described.output_values()


def props(provider: Provider, logical_id: str) -> dict[str, Any]:
    return provider.last(logical_id, "Create")["ResourceProperties"]


def test_ref_parameters_pseudo_parameters_and_resources(emulator: StackEmulator, provider: Provider) -> None:
    doc = template(
        {
            "First": custom(Parameters={"Name": {"Ref": "Name"}}),
            "Second": custom(
                Parameters={
                    "Name": {"Ref": "Name"},
                    "Count": {"Ref": "Count"},
                    "Items": {"Ref": "Items"},
                    "Blob": {"Ref": "Blob"},
                    "Flag": {"Ref": "Flag"},
                    "FirstId": {"Ref": "First"},
                    "Stack": {"Ref": "ALIYUN::StackName"},
                    "StackId": {"Ref": "ALIYUN::StackId"},
                    "Region": {"Ref": "ALIYUN::Region"},
                    "Account": {"Ref": "ALIYUN::AccountId"},
                }
            ),
        },
        Parameters={
            "Name": {"Type": "String"},
            "Count": {"Type": "Number", "Default": 3},
            "Items": {"Type": "CommaDelimitedList", "Default": "a,b"},
            "Blob": {"Type": "Json", "Default": {"k": "v"}},
            "Flag": {"Type": "Boolean", "Default": "false"},
        },
    )
    emulator.create("fn", as_text(doc), {"Name": "n1"}, provider)
    first = provider.last("First", "Create")
    second = props(provider, "Second")
    assert second == {
        "Name": "n1",
        "Count": 3,
        "Items": ["a", "b"],
        "Blob": {"k": "v"},
        "Flag": False,
        "FirstId": emulator.describe("fn").resources[0].physical_id,
        "Stack": "fn",
        "StackId": first["StackId"],
        "Region": "cn-hangzhou",
        "Account": "123456789",
    }


def test_get_att_outputs_and_single_keys(emulator: StackEmulator, provider: Provider) -> None:
    provider.on("Src", "Create", data={"Url": "http://x", "Nested": {"a": 1}})
    doc = template(
        {
            "Src": custom(),
            "Use": custom(Parameters={"All": {"Fn::GetAtt": ["Src", "Outputs"]}, "Url": {"Fn::GetAtt": ["Src", "Url"]}}),
        },
        Outputs={"All": {"Value": {"Fn::GetAtt": ["Src", "Outputs"]}}, "One": {"Value": {"Fn::GetAtt": ["Src", "Url"]}}},
    )
    outputs = deploy(emulator, provider, doc)
    assert props(provider, "Use") == {"All": {"Url": "http://x", "Nested": {"a": 1}}, "Url": "http://x"}
    assert outputs == {"All": {"Url": "http://x", "Nested": {"a": 1}}, "One": "http://x"}


def test_get_att_of_a_missing_key_fails_the_resource(emulator: StackEmulator, provider: Provider) -> None:
    provider.on("Src", "Create", data={"Url": "u"})
    doc = template({"Src": custom(), "Use": custom(Parameters={"X": {"Fn::GetAtt": ["Src", "Nope"]}})})
    described = emulator.create("fn", as_text(doc), {}, provider)
    assert described.status == "CREATE_ROLLBACK_COMPLETE"
    use = next(r for r in described.resources if r.logical_id == "Use")
    assert use.status_reason == (
        "Resources.Use.Properties.Parameters.X: Fn::GetAtt: resource 'Src' has no attribute 'Nope' (Data keys: Url)"
    )
    assert provider.sent() == [("Create", "Src"), ("Delete", "Src")]


def test_sub_forms(emulator: StackEmulator, provider: Provider) -> None:
    provider.on("Src", "Create", data={"Host": "h.example"})
    doc = template(
        {
            "Src": custom(),
            "Use": custom(
                Parameters={
                    "Plain": {"Fn::Sub": "${Env}-${ALIYUN::Region}-${Src}"},
                    "Att": {"Fn::Sub": "https://${Src.Host}/x"},
                    "Escaped": {"Fn::Sub": "${!Literal} and ${Env}"},
                    "Vars": {"Fn::Sub": ["${Greeting}, ${Env}!", {"Greeting": {"Fn::Join": ["", ["hel", "lo"]]}}]},
                    "Number": {"Fn::Sub": "n=${Count}"},
                }
            ),
        },
        Parameters={"Env": {"Type": "String", "Default": "dev"}, "Count": {"Type": "Number", "Default": 2}},
    )
    deploy(emulator, provider, doc)
    src_id = emulator.describe("fn").resources[0].physical_id
    assert props(provider, "Use") == {
        "Plain": f"dev-cn-hangzhou-{src_id}",
        "Att": "https://h.example/x",
        "Escaped": "${Literal} and dev",
        "Vars": "hello, dev!",
        "Number": "n=2",
    }


def test_join_select_split_replace(emulator: StackEmulator, provider: Provider) -> None:
    doc = template(
        {
            "A": custom(
                Parameters={
                    "Join": {"Fn::Join": ["-", ["a", 1, True, {"Ref": "Env"}]]},
                    "Select": {"Fn::Select": ["1", {"Ref": "Items"}]},
                    "Split": {"Fn::Split": [";", "x;y;z"]},
                    "SelectSplit": {"Fn::Select": [2, {"Fn::Split": [",", "p,q,r"]}]},
                    "Replace": {"Fn::Replace": [{"$Env": {"Ref": "Env"}}, "name-$Env"]},
                }
            )
        },
        Parameters={"Env": {"Type": "String", "Default": "dev"}, "Items": {"Type": "CommaDelimitedList", "Default": "a,b,c"}},
    )
    deploy(emulator, provider, doc)
    assert props(provider, "A") == {
        "Join": "a-1-true-dev",
        "Select": "b",
        "Split": ["x", "y", "z"],
        "SelectSplit": "r",
        "Replace": "name-dev",
    }


def test_conditions_if_and_logic(emulator: StackEmulator, provider: Provider) -> None:
    doc = template(
        {
            "Always": custom(
                Parameters={
                    "Size": {"Fn::If": ["IsProd", "large", "small"]},
                    "Both": {"Fn::If": ["ProdAndEast", "yes", "no"]},
                    "Either": {"Fn::If": ["ProdOrTest", "yes", "no"]},
                    "Not": {"Fn::If": ["NotProd", "yes", "no"]},
                    "Equal": {"Fn::Equals": [{"Ref": "Count"}, "2"]},
                }
            ),
            "ProdOnly": {**custom(), "Condition": "IsProd"},
            "DevOnly": {**custom(), "Condition": "NotProd"},
        },
        Parameters={"Env": {"Type": "String", "Default": "prod"}, "Count": {"Type": "Number", "Default": 2}},
        Conditions={
            "IsProd": {"Fn::Equals": [{"Ref": "Env"}, "prod"]},
            "IsEast": {"Fn::Equals": [{"Ref": "ALIYUN::Region"}, "cn-shanghai"]},
            "ProdAndEast": {"Fn::And": [{"Condition": "IsProd"}, {"Condition": "IsEast"}]},
            "ProdOrTest": {"Fn::Or": [{"Condition": "IsProd"}, {"Fn::Equals": [{"Ref": "Env"}, "test"]}]},
            "NotProd": {"Fn::Not": [{"Condition": "IsProd"}]},
        },
        Outputs={
            "Prod": {"Value": "p", "Condition": "IsProd"},
            "Dev": {"Value": "d", "Condition": "NotProd"},
        },
    )
    outputs = deploy(emulator, provider, doc)
    assert props(provider, "Always") == {"Size": "large", "Both": "no", "Either": "yes", "Not": "no", "Equal": True}
    assert sorted(provider.sent()) == [("Create", "Always"), ("Create", "ProdOnly")]
    assert outputs == {"Prod": "p"}


def test_find_in_map(emulator: StackEmulator, provider: Provider) -> None:
    doc = template(
        {"A": custom(Parameters={"Image": {"Fn::FindInMap": ["Regions", {"Ref": "ALIYUN::Region"}, "Image"]}})},
        Mappings={"Regions": {"cn-hangzhou": {"Image": "m-hz"}, "cn-beijing": {"Image": "m-bj"}}},
    )
    deploy(emulator, provider, doc)
    assert props(provider, "A") == {"Image": "m-hz"}


def test_no_value_removes_keys_and_items(emulator: StackEmulator, provider: Provider) -> None:
    doc = template(
        {
            "A": custom(
                Parameters={
                    "Kept": "k",
                    "Dropped": {"Ref": "ALIYUN::NoValue"},
                    "Maybe": {"Fn::If": ["Never", "x", {"Ref": "ALIYUN::NoValue"}]},
                    "List": ["a", {"Fn::If": ["Never", "b", {"Ref": "ALIYUN::NoValue"}]}, "c"],
                }
            )
        },
        Conditions={"Never": {"Fn::Equals": [1, 2]}},
    )
    deploy(emulator, provider, doc)
    assert props(provider, "A") == {"Kept": "k", "List": ["a", "c"]}


def test_timeout_service_token_and_generic_type_reach_the_deliverer(emulator: StackEmulator, provider: Provider) -> None:
    doc = template(
        {
            "Default": custom(),
            "Long": custom(name="ALIYUN::ROS::CustomResource", Timeout={"Ref": "Wait"}),
            "Sync": custom(token="web[sync,idempotent]:http://127.0.0.1:9/x", Timeout=600),
        },
        Parameters={"Wait": {"Type": "Number", "Default": 300}},
    )
    deploy(emulator, provider, doc)
    timeouts = {r["LogicalResourceId"]: call for r, call in zip(provider.requests, provider.calls)}
    assert timeouts == {
        "Default": (TOKEN, 60.0),
        "Long": (TOKEN, 300.0),
        "Sync": ("web[sync,idempotent]:http://127.0.0.1:9/x", 10.0),
    }
    assert provider.last("Long", "Create")["ResourceType"] == "ALIYUN::ROS::CustomResource"


def test_no_value_in_sub_variables_and_whole_properties(emulator: StackEmulator, provider: Provider) -> None:
    """NoValue in an Fn::Sub variable renders '' (not a Ref to an unknown name); on Timeout or
    Parameters it removes the property, so the defaults apply (60 s, no properties)."""
    no_value = {"Fn::If": ["Never", "x", {"Ref": "ALIYUN::NoValue"}]}
    doc = template(
        {
            "A": custom(Parameters={"Text": {"Fn::Sub": ["a${Suffix}b", {"Suffix": no_value}]}}),
            "B": custom(Timeout=no_value, Parameters=no_value),
        },
        Conditions={"Never": {"Fn::Equals": [1, 2]}},
    )
    deploy(emulator, provider, doc)
    assert props(provider, "A") == {"Text": "ab"}
    assert props(provider, "B") == {}
    timeouts = {r["LogicalResourceId"]: call[1] for r, call in zip(provider.requests, provider.calls)}
    assert timeouts["B"] == 60.0
