"""Parameter types, constraints, NoEcho and the CLI/file input formats."""

from __future__ import annotations

from typing import Any

import pytest

from crhelper.emulator import load_parameter_file, parse_key_values
from crhelper.emulator.parameters import ParameterSpec, coerce_value, resolve_parameters


def coerce(spec: ParameterSpec, value: Any) -> tuple[Any, list[str]]:
    return coerce_value(spec, value, f"Parameters.{spec.name}")


@pytest.mark.parametrize(
    ("ptype", "given", "expected"),
    [
        ("String", "abc", "abc"),
        ("String", 5, "5"),
        ("Number", "42", 42),
        ("Number", "2.5", 2.5),
        ("Number", 7, 7),
        ("Boolean", "TRUE", True),
        ("Boolean", False, False),
        ("CommaDelimitedList", "a, b,c", ["a", "b", "c"]),
        ("CommaDelimitedList", ["a", 1], ["a", "1"]),
        ("CommaDelimitedList", "", []),
        ("Json", '{"k": [1]}', {"k": [1]}),
        ("Json", [1, 2], [1, 2]),
    ],
)
def test_types_convert(ptype: str, given: Any, expected: Any) -> None:
    assert coerce(ParameterSpec("P", ptype), given) == (expected, [])


@pytest.mark.parametrize(
    ("ptype", "given", "message"),
    [
        ("String", {"a": 1}, "Parameters.P: {'a': 1} is not a String"),
        ("Number", "ten", "Parameters.P: 'ten' is not a Number"),
        ("Number", True, "Parameters.P: True is not a Number"),
        ("Number", "nan", "Parameters.P: 'nan' is not a Number"),
        ("Boolean", "yes", "Parameters.P: 'yes' is not a Boolean (true or false)"),
        ("CommaDelimitedList", {"a": 1}, "Parameters.P: {'a': 1} is not a comma-delimited list"),
        ("Json", "{bad", "Parameters.P: not valid Json (Expecting property name enclosed in double quotes at position 1)"),
        ("Json", "3", "Parameters.P: Json parameters take a JSON object or array"),
    ],
)
def test_type_errors(ptype: str, given: Any, message: str) -> None:
    assert coerce(ParameterSpec("P", ptype), given) == (None, [message])


def test_constraints() -> None:
    assert coerce(ParameterSpec("P", "String", min_length=3), "ab")[1] == ["Parameters.P: length 2 is below MinLength 3"]
    assert coerce(ParameterSpec("P", "String", max_length=1), "ab")[1] == ["Parameters.P: length 2 is above MaxLength 1"]
    assert coerce(ParameterSpec("P", "Number", min_value=1), 0)[1] == ["Parameters.P: 0 is below MinValue 1"]
    assert coerce(ParameterSpec("P", "Number", max_value=1), "2")[1] == ["Parameters.P: 2 is above MaxValue 1"]
    assert coerce(ParameterSpec("P", "String", allowed_pattern="[a-z]+"), "ab1")[1] == [
        "Parameters.P: 'ab1' does not match AllowedPattern '[a-z]+'"
    ]
    assert coerce(ParameterSpec("P", "Number", allowed_values=(1, 2)), "2.0") == (2.0, [])
    assert coerce(ParameterSpec("P", "CommaDelimitedList", allowed_values=("a", "b")), "a,c")[1] == [
        "Parameters.P: 'c' is not in AllowedValues ['a', 'b']"
    ]
    assert coerce(ParameterSpec("P", "String", allowed_pattern="[a-z]+", max_length=2), "abc")[1] == [
        "Parameters.P: length 3 is above MaxLength 2"
    ]


def test_no_echo_values_never_appear_in_messages() -> None:
    spec = ParameterSpec("Pw", "String", min_length=20, allowed_pattern="[0-9]+", allowed_values=("x",), no_echo=True)
    _, errors = coerce(spec, "hunter2")
    assert len(errors) == 3
    assert all("hunter2" not in e for e in errors)
    _, errors = coerce(ParameterSpec("N", "Number", no_echo=True), "s3cret")
    assert errors == ["Parameters.N: the value is not a Number"]


def test_resolve_uses_defaults_and_collects_errors() -> None:
    specs = {"A": ParameterSpec("A", "String", default="d"), "B": ParameterSpec("B", "Number")}
    assert resolve_parameters(specs, {"B": "3"}) == ({"A": "d", "B": 3}, [])
    values, errors = resolve_parameters(specs, {"C": 1})
    assert errors == ["Parameters.C: not declared in the template", "Parameters.B: no value given and the parameter has no Default"]


def test_key_value_arguments() -> None:
    assert parse_key_values(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(ValueError, match="parameter 'A': expected Key=Value"):
        parse_key_values(["A"])
    with pytest.raises(ValueError, match="expected Key=Value"):
        parse_key_values(["=v"])


def test_parameter_files() -> None:
    assert load_parameter_file('{"A": 1, "B": "x"}') == {"A": 1, "B": "x"}
    assert load_parameter_file("A: 1\nB: [1, 2]\n") == {"A": 1, "B": [1, 2]}
    api_style = '[{"ParameterKey": "A", "ParameterValue": "v"}]'
    assert load_parameter_file(api_style) == {"A": "v"}
    assert load_parameter_file("") == {}
    with pytest.raises(ValueError, match="item 0 needs ParameterKey and ParameterValue"):
        load_parameter_file('[{"Key": "A"}]')
    with pytest.raises(ValueError, match="expected a map"):
        load_parameter_file('"just text"')
    with pytest.raises(ValueError, match="not valid JSON or YAML"):
        load_parameter_file("a: [")


def test_parameter_file_syntax_errors_name_the_line_not_its_text() -> None:
    with pytest.raises(ValueError) as caught:
        load_parameter_file("User: admin\nPassword: hunter2-pw: x\n")
    message = str(caught.value)
    assert message.startswith("parameter file: not valid JSON or YAML (mapping values are not allowed here at line 2")
    assert "hunter2-pw" not in message
