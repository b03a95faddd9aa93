"""How a local ALIYUN:: resource type is declared, and the checks derived from it (pure).

Each service family module (`cloud_fc`, `cloud_mns`, `cloud_oss`, `cloud_ram`) declares its types
as `CloudType`s (`cloud_registry` collects them): the properties of deploy.md §1 with type,
required, editable, range or allowed values and default, an optional cross-field check, and the `Fn::GetAtt` attributes it answers.
Template-time checks (unknown and missing properties) and value checks (after intrinsics resolved;
values still UNKNOWN in a dry run are skipped) come from those declarations, so every error names
the property and the rule. Which properties are not editable decides replacement on update.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .intrinsics import UNKNOWN

STRING, INTEGER, NUMBER, BOOLEAN, MAP, LIST, ANY = "String", "Integer", "Number", "Boolean", "Map", "List", "Any"


@dataclass(frozen=True)
class Prop:
    """One property: `low`/`high` bound a number's value, a string's or list's length."""

    kind: str = STRING
    required: bool = False
    editable: bool = True
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()
    pattern: str | None = None
    rule: str = ""
    multiple: float | None = None
    default: Any = None


#: extra(properties, path) -> errors; for rules across properties (values may be UNKNOWN).
ExtraCheck = Callable[[Mapping[str, Any], str], list[str]]


@dataclass(frozen=True)
class CloudType:
    name: str
    properties: Mapping[str, Prop]
    #: The `Fn::GetAtt` attribute names (deploy.md §1).
    attribute_names: tuple[str, ...]
    #: physical_id(properties) -> the id ROS reports (the resource's name, or names joined by '|').
    physical_id: Callable[[Mapping[str, Any]], str]
    #: attributes(region, account, physical_id, properties) -> what `Fn::GetAtt` answers.
    attributes: Callable[[str, str, str, Mapping[str, Any]], dict[str, Any]]
    extra: ExtraCheck | None = None

    def with_defaults(self, properties: Mapping[str, Any]) -> dict[str, Any]:
        """The properties with ROS's defaults filled in for those left out."""
        filled = dict(properties)
        for name, prop in self.properties.items():
            if prop.default is not None and name not in filled:
                filled[name] = prop.default
        return filled

    def replaced_by(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
        """The non-editable properties an update changes: ROS replaces the resource for them."""
        return sorted(n for n, p in self.properties.items() if not p.editable and old.get(n) != new.get(n))


def template_errors(cloud: CloudType, properties: Any, path: str) -> list[str]:
    """Unknown and missing properties, before any value is known."""
    if not isinstance(properties, dict):
        return [f"{path}: must be a map"]
    errors = [
        f"{path}.{key}: unknown property of {cloud.name} (allowed: {', '.join(sorted(cloud.properties))})"
        for key in properties if key not in cloud.properties
    ]
    errors += [f"{path}.{name}: required" for name, p in cloud.properties.items() if p.required and name not in properties]
    return errors


def value_errors(cloud: CloudType, properties: Mapping[str, Any], path: str) -> list[str]:
    """Every rule a resolved property value breaks; UNKNOWN values (a dry run) pass."""
    errors: list[str] = []
    for name, prop in cloud.properties.items():
        if name not in properties:
            if prop.required:
                errors.append(f"{path}.{name}: required")
            continue
        errors.extend(check_value(properties[name], prop, f"{path}.{name}"))
    if cloud.extra is not None:
        errors.extend(cloud.extra(properties, path))
    return errors


def _is_kind(value: Any, kind: str) -> bool:
    if kind == STRING:
        return isinstance(value, str)
    if kind == INTEGER:
        return isinstance(value, int) and not isinstance(value, bool) or (isinstance(value, str) and value.lstrip("-").isdigit())
    if kind == NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool) or (isinstance(value, str) and _is_number(value))
    if kind == BOOLEAN:
        return isinstance(value, bool) or value in ("true", "false", "True", "False")
    if kind == MAP:
        return isinstance(value, dict)
    if kind == LIST:
        return isinstance(value, list)
    return True


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_value(value: Any, prop: Prop, path: str) -> list[str]:
    """The rules one value breaks (empty when it passes or is UNKNOWN)."""
    if value is UNKNOWN:
        return []
    if not _is_kind(value, prop.kind):
        return [f"{path}: must be a {prop.kind}, got {type(value).__name__}"]
    if prop.choices and value not in prop.choices:
        return [f"{path}: must be one of {', '.join(map(str, prop.choices))}, got {value!r}"]
    if prop.kind in (INTEGER, NUMBER):
        number = float(value)
        if (prop.low is not None and number < prop.low) or (prop.high is not None and number > prop.high):
            return [f"{path}: must be from {prop.low:g} to {prop.high:g}, got {value!r}"]
        if prop.multiple is not None and abs(round(number / prop.multiple) * prop.multiple - number) > 1e-9:
            return [f"{path}: must be a multiple of {prop.multiple:g}, got {value!r}"]
    if prop.kind in (STRING, LIST) and (prop.low is not None or prop.high is not None):
        size = len(value)
        low, high = int(prop.low or 0), int(prop.high if prop.high is not None else 10**9)
        unit = "characters" if prop.kind == STRING else "items"
        if not low <= size <= high:
            return [f"{path}: must have {low} to {high} {unit}, got {size}"]
    if prop.pattern is not None and isinstance(value, str) and not re.fullmatch(prop.pattern, value):
        return [f"{path}: {prop.rule or 'must match ' + prop.pattern}, got {value!r}"]
    return []
