"""Structural and parameter-dependent validation: every problem reported with its key path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from emulator_support import as_text, custom, template

from crhelper.emulator import StackEmulator, TemplateValidationError, load_template

GOOD_YAML = """
ROSTemplateFormatVersion: '2015-09-01'
Parameters:
  Greeting: {Type: String, Default: hello}
Resources:
  Echo:
    Type: Custom::Echo
    Properties:
      ServiceToken: acs:fc:cn-hangzhou:123456789:functions/echo-provider
      Timeout: 120
      Parameters: {Text: {Ref: Greeting}}
Outputs:
  All: {Value: {'Fn::GetAtt': [Echo, Outputs]}}
"""


def errors_of(text: str, emulator: StackEmulator | None = None, parameters: dict[str, Any] | None = None) -> list[str]:
    with pytest.raises(TemplateValidationError) as caught:
        if emulator is None:
            load_template(text)
        else:
            emulator.validate(text, parameters or {})
    return caught.value.errors


def test_spec_example_template_loads() -> None:
    loaded = load_template(GOOD_YAML)
    assert list(loaded.resources) == ["Echo"]
    assert loaded.resources["Echo"].type == "Custom::Echo"
    assert loaded.parameters["Greeting"].default == "hello"


def test_json_template_loads() -> None:
    loaded = load_template(as_text(template({"A": custom()})))
    assert loaded.resources["A"].deletion_policy == "Delete"


def test_unquoted_version_date_is_accepted() -> None:
    load_template(GOOD_YAML.replace("'2015-09-01'", "2015-09-01"))


def test_yaml_short_form_tags() -> None:
    text = """
ROSTemplateFormatVersion: '2015-09-01'
Resources:
  A:
    Type: Custom::A
    Properties:
      ServiceToken: t
  B:
    Type: Custom::B
    Properties:
      ServiceToken: t
      Parameters:
        Id: !Ref A
        Att: !GetAtt A.Name
        Sub: !Sub '${A}-x'
        Joined: !Join [',', [a, b]]
"""
    parameters = load_template(text).resources["B"].parameters
    assert parameters == {
        "Id": {"Ref": "A"},
        "Att": {"Fn::GetAtt": ["A", "Name"]},
        "Sub": {"Fn::Sub": "${A}-x"},
        "Joined": {"Fn::Join": [",", ["a", "b"]]},
    }


def test_missing_or_wrong_format_version() -> None:
    assert errors_of(as_text({"Resources": {"A": custom()}})) == [
        "ROSTemplateFormatVersion: required, must be '2015-09-01'"
    ]
    wrong = as_text({**template({"A": custom()}), "ROSTemplateFormatVersion": "2010-09-09"})
    assert errors_of(wrong) == ["ROSTemplateFormatVersion: must be '2015-09-01', got '2010-09-09'"]


def test_syntax_errors_name_the_line() -> None:
    (message,) = errors_of("ROSTemplateFormatVersion: '2015-09-01'\nResources: [\n")
    assert message.startswith("template is not valid YAML") and "line" in message
    (message,) = errors_of('{"ROSTemplateFormatVersion": ')
    assert message.startswith("template is not valid JSON") and "line 1" in message


def test_the_brief_example_error_message() -> None:
    text = GOOD_YAML.replace("{Ref: Greeting}", "{Ref: Greting}")
    assert errors_of(text) == ["Resources.Echo.Properties.Parameters.Text: Ref to unknown name 'Greting'"]


def test_all_errors_are_collected() -> None:
    doc = template(
        {
            "A": {**custom(), "Colour": "red", "DependsOn": "Nope"},
            "B": custom(name="ALIYUN::ECS::Instance"),
            "C": custom(Parameters={"X": {"Fn::Unknown": 1}, "Y": {"Fn::GetAtt": ["Ghost", "Outputs"]}}),
            "D": {"Type": "Custom::D", "Properties": {"Timeout": 5, "Extra": 1}},
        },
        Outputs={"O": {"Value": {"Fn::Sub": "${Missing}"}, "Colour": 1}},
        Rules={},
        Foo=1,
    )
    found = errors_of(as_text(doc))
    assert set(found) == {
        "Rules: section not supported by the local emulator",
        "Foo: unknown top-level key",
        "Resources.A.Colour: unknown resource key",
        "Resources.A.DependsOn: unknown resource 'Nope'",
        "Resources.B.Type: unsupported resource type 'ALIYUN::ECS::Instance'; the emulator runs "
        "'Custom::<Name>' (letters, digits, _ @ -, up to 68) and 'ALIYUN::ROS::CustomResource'",
        "Resources.C.Properties.Parameters.X: unknown function 'Fn::Unknown'",
        "Resources.C.Properties.Parameters.Y: Fn::GetAtt of unknown resource 'Ghost'",
        "Resources.D.Properties.Extra: unknown property (allowed: HttpConfig, Parameters, ServiceToken, Timeout)",
        "Resources.D.Properties.ServiceToken: required",
        "Outputs.O.Colour: unknown output key",
        "Outputs.O.Value: Fn::Sub reference to unknown name 'Missing'",
    }


def test_generic_type_and_custom_name_rules() -> None:
    load_template(as_text(template({"A": custom(name="ALIYUN::ROS::CustomResource")})))
    too_long = "Custom::" + "x" * 69
    (message,) = errors_of(as_text(template({"A": custom(name=too_long)})))
    assert message.startswith("Resources.A.Type: unsupported resource type")


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ({"Fn::Join": [","]}, "Resources.A.Properties.Parameters.V.Fn::Join: expects a list of 2 items"),
        ({"Fn::Join": [{"Ref": "P"}, []]}, "Resources.A.Properties.Parameters.V.Fn::Join[0]: the delimiter must be a literal string"),
        ({"Fn::If": ["Nope", 1, 2]}, "Resources.A.Properties.Parameters.V.Fn::If[0]: unknown condition 'Nope'"),
        ({"Fn::FindInMap": ["NoMap", "a", "b"]}, "Resources.A.Properties.Parameters.V.Fn::FindInMap[0]: unknown mapping 'NoMap'"),
        ({"Fn::GetAtt": "NoDot"}, "Resources.A.Properties.Parameters.V.Fn::GetAtt: expects [ResourceName, AttributeName]"),
        ({"Fn::Sub": 5}, "Resources.A.Properties.Parameters.V.Fn::Sub: expects a string or [string, {Name: value}]"),
        ({"Fn::Sub": "${Ghost.Attr}"}, "Resources.A.Properties.Parameters.V: Fn::Sub references unknown resource 'Ghost' in '${Ghost.Attr}'"),
        ({"Ref": {"Fn::Join": ["", ["P"]]}}, "Resources.A.Properties.Parameters.V: Ref needs a literal name, got dict"),
        ({"Fn::Not": [1, 2]}, "Resources.A.Properties.Parameters.V.Fn::Not: expects a list of 1 items"),
        ({"Fn::And": [{"Condition": "Nope"}, True]}, "Resources.A.Properties.Parameters.V.Fn::And[0]: unknown condition 'Nope'"),
        ({"Ref": "P", "Other": 1}, "Resources.A.Properties.Parameters.V: function 'Ref' must be the only key of its object"),
    ],
)
def test_function_shape_errors(expr: Any, message: str) -> None:
    doc = template({"A": custom(Parameters={"V": expr})}, Parameters={"P": {"Type": "String", "Default": "x"}})
    assert errors_of(as_text(doc)) == [message]


def test_conditions_section_rules() -> None:
    doc = template(
        {"A": {**custom(), "Condition": "Missing"}},
        Conditions={
            "UsesResource": {"Fn::Equals": [{"Ref": "A"}, "x"]},
            "NotACondition": "yes",
        },
    )
    assert set(errors_of(as_text(doc))) == {
        "Conditions.UsesResource.Fn::Equals[0]: Ref to resource 'A' is not allowed in Conditions",
        "Conditions.NotACondition: expected a condition function (Fn::Equals/And/Or/Not) or {Condition: Name}",
        "Resources.A.Condition: unknown condition 'Missing'",
    }


def test_parameter_declaration_errors() -> None:
    doc = template(
        {"A": custom()},
        Parameters={
            "T": {"Type": "Text"},
            "L": {"Type": "String", "MinLength": -1, "AllowedPattern": "("},
            "N": {"Type": "Number", "Default": "abc", "Secret": True},
            "E": {"Type": "String", "Default": "b", "AllowedValues": ["a"]},
        },
    )
    assert set(errors_of(as_text(doc))) == {
        "Parameters.T.Type: must be one of String, Number, CommaDelimitedList, Json, Boolean, got 'Text'",
        "Parameters.L.MinLength: must be a non-negative integer",
        "Parameters.L.AllowedPattern: not a valid regular expression (missing ), unterminated subpattern at position 0)",
        "Parameters.N.Secret: unknown parameter key",
        "Parameters.N.Default: 'abc' is not a Number",
        "Parameters.E.Default: 'b' is not in AllowedValues ['a']",
    }


def test_deletion_policy_and_depends_on_shapes() -> None:
    doc = template(
        {
            "A": {**custom(), "DeletionPolicy": "Snapshot"},
            "B": {**custom(), "DependsOn": [1]},
            "C": {**custom(), "DependsOn": "C"},
        }
    )
    assert set(errors_of(as_text(doc))) == {
        "Resources.A.DeletionPolicy: must be Delete or Retain, got 'Snapshot'",
        "Resources.B.DependsOn: must be a resource name or a list of them",
        "Resources.C.DependsOn: a resource cannot depend on itself",
    }


def test_value_dependent_errors_each_reported(emulator: StackEmulator) -> None:
    doc = template(
        {
            "A": custom(Parameters={"Pick": {"Fn::Select": [5, {"Ref": "Names"}]}}),
            "B": custom(Parameters={"Look": {"Fn::FindInMap": ["Regions", {"Ref": "ALIYUN::Region"}, "Image"]}}),
            "C": custom(Timeout=0),
            "D": custom(Parameters={"Fn::If": ["Always", ["a"], {}]}),
        },
        Parameters={"Names": {"Type": "CommaDelimitedList", "Default": "a,b"}},
        Mappings={"Regions": {"cn-beijing": {"Image": "m-1"}}},
        Conditions={"Always": {"Fn::Equals": [1, 1]}},
    )
    assert set(errors_of(as_text(doc), emulator)) == {
        "Resources.A.Properties.Parameters.Pick.Fn::Select: index 5 is out of range for a list of 2 items",
        "Resources.B.Properties.Parameters.Look.Fn::FindInMap: mapping 'Regions' has no key 'cn-hangzhou'",
        "Resources.C.Properties.Timeout: must be a number of seconds from 1 to 43200, got 0",
        "Resources.D.Properties.Parameters: must be a map, got list",
    }


def test_reference_to_resource_whose_condition_is_false(emulator: StackEmulator) -> None:
    doc = template(
        {
            "Maybe": {**custom(), "Condition": "Never"},
            "User": custom(Parameters={"Id": {"Ref": "Maybe"}}),
            "Safe": custom(Parameters={"Id": {"Fn::If": ["Never", {"Ref": "Maybe"}, "none"]}}),
        },
        Conditions={"Never": {"Fn::Equals": ["a", "b"]}},
    )
    assert errors_of(as_text(doc), emulator) == [
        "Resources.User: depends on resource 'Maybe', which is not created because Condition 'Never' is false"
    ]


def test_cycle_is_reported_by_name(emulator: StackEmulator) -> None:
    doc = template(
        {
            "A": custom(Parameters={"B": {"Fn::GetAtt": ["B", "X"]}}),
            "B": {**custom(Parameters={"Sub": {"Fn::Sub": "${C}"}})},
            "C": {**custom(), "DependsOn": ["A"]},
        }
    )
    assert errors_of(as_text(doc), emulator) == ["cycle: A -> B -> C -> A"]


def test_circular_conditions(emulator: StackEmulator) -> None:
    doc = template(
        {"A": custom()},
        Conditions={"X": {"Fn::Not": [{"Condition": "Y"}]}, "Y": {"Fn::Not": [{"Condition": "X"}]}},
    )
    found = errors_of(as_text(doc), emulator)
    assert found and all("circular condition" in e for e in found)
    assert "Conditions.X: circular condition: X -> Y -> X" in found


def test_parameter_value_errors_are_collected(emulator: StackEmulator) -> None:
    doc = template(
        {"A": custom()},
        Parameters={"N": {"Type": "Number"}, "S": {"Type": "String", "MaxLength": 2}},
    )
    assert set(errors_of(as_text(doc), emulator, {"S": "long", "Z": 1})) == {
        "Parameters.Z: not declared in the template",
        "Parameters.N: no value given and the parameter has no Default",
        "Parameters.S: length 4 is above MaxLength 2",
    }


def test_value_errors_never_quote_a_no_echo_value(emulator: StackEmulator) -> None:
    doc = {
        "ROSTemplateFormatVersion": "2015-09-01",
        "Parameters": {"Secret": {"Type": "String", "NoEcho": True}},
        "Conditions": {"Odd": {"Fn::Equals": [{"Fn::FindInMap": ["M", {"Ref": "Secret"}, "k"]}, "v"]}},
        "Mappings": {"M": {"top": {"k": "v"}}},
        "Resources": {
            "A": {"Type": "Custom::A", "Properties": {"ServiceToken": "acs:fc:cn-hangzhou:1:functions/f",
                                                       "Timeout": {"Ref": "Secret"}}},
        },
    }
    for condition in (True, False):
        if not condition:
            del doc["Conditions"]
        with pytest.raises(TemplateValidationError) as caught:
            emulator.validate(json.dumps(doc), {"Secret": "hunter2-pw"})
        assert "hunter2-pw" not in str(caught.value)
        assert "******" in str(caught.value)
