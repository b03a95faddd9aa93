"""Template parameters: declarations, value coercion and constraints, and CLI/file input (pure)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import yaml

from crhelper.texts import scalar_text

PARAMETER_TYPES = ("String", "Number", "CommaDelimitedList", "Json", "Boolean")
#: Keys ROS accepts on a parameter; the console-only ones are accepted and ignored.
PARAMETER_KEYS = frozenset(
    {
        "Type",
        "Default",
        "AllowedValues",
        "MinLength",
        "MaxLength",
        "MinValue",
        "MaxValue",
        "AllowedPattern",
        "NoEcho",
        "Description",
        "Label",
        "ConstraintDescription",
        "AssociationProperty",
        "AssociationPropertyMetadata",
        "TextArea",
        "Confirm",
        "Placeholder",
    }
)
_MISSING: Any = object()


@dataclass(frozen=True)
class ParameterSpec:
    """One declared parameter; `default` is _MISSING when the template gives none."""

    name: str
    type: str
    default: Any = _MISSING
    allowed_values: tuple[Any, ...] | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_value: float | None = None
    max_value: float | None = None
    allowed_pattern: str | None = None
    no_echo: bool = False

    @property
    def has_default(self) -> bool:
        return self.default is not _MISSING


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _as_number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def parse_parameter_spec(name: str, raw: Any) -> tuple[ParameterSpec | None, list[str]]:
    """Validate one `Parameters` entry; the Default is checked against its own constraints."""
    path = f"Parameters.{name}"
    if not isinstance(raw, dict):
        return None, [f"{path}: must be a map"]
    errors = [f"{path}.{key}: unknown parameter key" for key in raw if key not in PARAMETER_KEYS]
    ptype = raw.get("Type")
    if ptype not in PARAMETER_TYPES:
        errors.append(f"{path}.Type: must be one of {', '.join(PARAMETER_TYPES)}, got {ptype!r}")
        return None, errors
    fields: dict[str, Any] = {}
    for key, attr in (("MinLength", "min_length"), ("MaxLength", "max_length")):
        if key in raw:
            number = _as_number(raw[key])
            if not isinstance(number, int) or number < 0:
                errors.append(f"{path}.{key}: must be a non-negative integer")
            else:
                fields[attr] = number
    for key, attr in (("MinValue", "min_value"), ("MaxValue", "max_value")):
        if key in raw:
            number = _as_number(raw[key])
            if number is None:
                errors.append(f"{path}.{key}: must be a number")
            else:
                fields[attr] = number
    if "AllowedValues" in raw:
        if not isinstance(raw["AllowedValues"], list) or not raw["AllowedValues"]:
            errors.append(f"{path}.AllowedValues: must be a non-empty list")
        else:
            fields["allowed_values"] = tuple(raw["AllowedValues"])
    if "AllowedPattern" in raw:
        pattern = raw["AllowedPattern"]
        try:
            re.compile(pattern)
            fields["allowed_pattern"] = pattern
        except (re.error, TypeError) as exc:
            errors.append(f"{path}.AllowedPattern: not a valid regular expression ({exc})")
    if "NoEcho" in raw:
        flag = _as_bool(raw["NoEcho"])
        if flag is None:
            errors.append(f"{path}.NoEcho: must be true or false")
        else:
            fields["no_echo"] = flag
    spec = ParameterSpec(name=name, type=ptype, **fields)
    if "Default" in raw:
        default, default_errors = coerce_value(spec, raw["Default"], f"{path}.Default")
        errors.extend(default_errors)
        spec = replace(spec, default=default)
    return (spec if not errors else None), errors


#: A value as AllowedValues compare it (one rule with the AppCenter forms: `crhelper.texts`).
_text_key = scalar_text


def coerce_value(spec: ParameterSpec, value: Any, path: str) -> tuple[Any, list[str]]:
    """Convert a given value to the parameter's type and check its constraints.

    Messages name the rule and never the value of a NoEcho parameter.
    """
    shown = "the value" if spec.no_echo else repr(value)
    converted: Any
    if spec.type == "String":
        if isinstance(value, (dict, list)) or value is None:
            return None, [f"{path}: {shown} is not a String"]
        converted = value if isinstance(value, str) else _text_key(value)
    elif spec.type == "Number":
        converted = _as_number(value)
        if converted is None:
            return None, [f"{path}: {shown} is not a Number"]
    elif spec.type == "Boolean":
        converted = _as_bool(value)
        if converted is None:
            return None, [f"{path}: {shown} is not a Boolean (true or false)"]
    elif spec.type == "CommaDelimitedList":
        if isinstance(value, str):
            converted = [item.strip() for item in value.split(",")] if value else []
        elif isinstance(value, list) and all(not isinstance(i, (dict, list)) for i in value):
            converted = [_text_key(item) for item in value]
        else:
            return None, [f"{path}: {shown} is not a comma-delimited list"]
    else:
        converted = value
        if isinstance(value, str):
            try:
                converted = json.loads(value)
            except json.JSONDecodeError as exc:
                return None, [f"{path}: not valid Json ({exc.msg} at position {exc.pos})"]
        if not isinstance(converted, (dict, list)):
            return None, [f"{path}: Json parameters take a JSON object or array"]
    return converted, _constraint_errors(spec, converted, path)


def _constraint_errors(spec: ParameterSpec, value: Any, path: str) -> list[str]:
    errors: list[str] = []
    items = value if spec.type == "CommaDelimitedList" else [value]
    if spec.allowed_values is not None:
        allowed = {_text_key(v) for v in spec.allowed_values}
        for item in items:
            if _text_key(item) not in allowed:
                shown = "the value" if spec.no_echo else repr(item)
                errors.append(f"{path}: {shown} is not in AllowedValues {list(spec.allowed_values)}")
    if spec.type == "String":
        if spec.min_length is not None and len(value) < spec.min_length:
            errors.append(f"{path}: length {len(value)} is below MinLength {spec.min_length}")
        if spec.max_length is not None and len(value) > spec.max_length:
            errors.append(f"{path}: length {len(value)} is above MaxLength {spec.max_length}")
    if spec.type == "Number":
        if spec.min_value is not None and value < spec.min_value:
            errors.append(f"{path}: {'the value' if spec.no_echo else value} is below MinValue {spec.min_value}")
        if spec.max_value is not None and value > spec.max_value:
            errors.append(f"{path}: {'the value' if spec.no_echo else value} is above MaxValue {spec.max_value}")
    if spec.allowed_pattern is not None and spec.type in ("String", "CommaDelimitedList"):
        for item in items:
            if re.fullmatch(spec.allowed_pattern, item) is None:
                shown = "the value" if spec.no_echo else repr(item)
                errors.append(f"{path}: {shown} does not match AllowedPattern {spec.allowed_pattern!r}")
    return errors


def resolve_parameters(specs: Mapping[str, ParameterSpec], given: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Values for every declared parameter: given, else Default; all problems collected."""
    errors = [f"Parameters.{name}: not declared in the template" for name in given if name not in specs]
    values: dict[str, Any] = {}
    for name, spec in specs.items():
        path = f"Parameters.{name}"
        if name in given:
            value, value_errors = coerce_value(spec, given[name], path)
            errors.extend(value_errors)
            values[name] = value
        elif spec.has_default:
            values[name] = spec.default
        else:
            errors.append(f"{path}: no value given and the parameter has no Default")
    return values, errors


def parse_key_values(items: Iterable[str]) -> dict[str, str]:
    """`Key=Value` strings from the command line; the value may itself contain '='."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"parameter {item.split('=')[0]!r}: expected Key=Value")
        result[key.strip()] = value
    return result


def load_parameter_file(text: str) -> dict[str, Any]:
    """A JSON/YAML map {Key: Value}, or the ROS API list [{ParameterKey, ParameterValue}]."""
    try:
        raw = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        # str(exc) quotes the offending line, which in a parameter file may hold a secret value.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"parameter file: not valid JSON or YAML ({problem}{where})") from None
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}
    if isinstance(raw, list):
        result: dict[str, Any] = {}
        for index, item in enumerate(raw):
            if not isinstance(item, dict) or "ParameterKey" not in item or "ParameterValue" not in item:
                raise ValueError(f"parameter file: item {index} needs ParameterKey and ParameterValue")
            result[str(item["ParameterKey"])] = item["ParameterValue"]
        return result
    raise ValueError("parameter file: expected a map of Key: Value or a list of {ParameterKey, ParameterValue}")
