"""Structural validation of a ROS template, independent of parameter values (pure).

`load_template` returns a `Template` or raises TemplateValidationError listing every problem
with its key path, e.g. `Resources.Echo.Properties.Parameters.Text: Ref to unknown name 'X'`.
The ALIYUN:: types of `cloud_registry` are checked against their declared properties and
attributes; every other ALIYUN:: type is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .cloud_registry import cloud_type
from .cloud_schema import CloudType, template_errors
from .errors import TemplateValidationError
from .intrinsics import Scope, check, check_condition, get_att_args
from .parameters import ParameterSpec, parse_parameter_spec
from .document import parse_document

FORMAT_VERSION = "2015-09-01"
GENERIC_TYPE = "ALIYUN::ROS::CustomResource"
TOP_LEVEL_KEYS = frozenset(
    {"ROSTemplateFormatVersion", "Description", "Metadata", "Parameters", "Mappings", "Conditions", "Resources", "Outputs"}
)
#: Real ROS sections this emulator does not evaluate; rejected rather than silently ignored.
UNSUPPORTED_TOP_LEVEL_KEYS = frozenset({"Rules", "Locals", "Workspace"})
RESOURCE_KEYS = frozenset({"Type", "Properties", "Condition", "DependsOn", "DeletionPolicy", "Metadata", "Description"})
PROPERTY_KEYS = frozenset({"ServiceToken", "Timeout", "Parameters", "HttpConfig"})
OUTPUT_KEYS = frozenset({"Value", "Description", "Condition", "Label"})
DELETION_POLICIES = ("Delete", "Retain")
_CUSTOM_TYPE = re.compile(r"Custom::[A-Za-z0-9_@-]{1,68}")
_LOGICAL_ID = re.compile(r"[A-Za-z0-9_-]{1,255}")


@dataclass(frozen=True)
class ResourceSpec:
    """A custom resource entry; property values are still unevaluated expressions."""

    logical_id: str
    type: str
    service_token: Any
    timeout: Any
    parameters: Any
    condition: str | None
    depends_on: tuple[str, ...]
    deletion_policy: str
    #: ROS-side delivery settings for `web:` tokens (ContentType, Headers, SignKey); None when absent.
    http_config: Any = None


@dataclass(frozen=True)
class OutputSpec:
    key: str
    value: Any
    description: str
    condition: str | None


@dataclass(frozen=True)
class Template:
    """A structurally valid template (what still depends on parameter values is checked in plan.py)."""

    parameters: dict[str, ParameterSpec]
    mappings: dict[str, Any]
    conditions: dict[str, Any]
    resources: dict[str, ResourceSpec]
    outputs: dict[str, OutputSpec]
    description: str = ""


def load_template(text: str) -> Template:
    """Parse and validate template text; raises TemplateValidationError with all problems."""
    try:
        document = parse_document(text)
    except ValueError as exc:
        raise TemplateValidationError([str(exc)]) from None
    errors: list[str] = []
    template = _build(document, errors)
    if errors or template is None:
        raise TemplateValidationError(errors)
    return template


def _section(document: dict[str, Any], key: str, errors: list[str]) -> dict[str, Any]:
    value = document.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        errors.append(f"{key}: must be a map")
        return {}
    return value


def _build(document: Any, errors: list[str]) -> Template | None:
    if not isinstance(document, dict):
        errors.append("template: the document must be a map of sections")
        return None
    version = document.get("ROSTemplateFormatVersion")
    if version is None:
        errors.append(f"ROSTemplateFormatVersion: required, must be '{FORMAT_VERSION}'")
    elif str(version) != FORMAT_VERSION:
        errors.append(f"ROSTemplateFormatVersion: must be '{FORMAT_VERSION}', got {version!r}")
    for key in document:
        if key in UNSUPPORTED_TOP_LEVEL_KEYS:
            errors.append(f"{key}: section not supported by the local emulator")
        elif key not in TOP_LEVEL_KEYS:
            errors.append(f"{key}: unknown top-level key")

    parameters: dict[str, ParameterSpec] = {}
    for name, raw in _section(document, "Parameters", errors).items():
        spec, spec_errors = parse_parameter_spec(str(name), raw)
        errors.extend(spec_errors)
        if spec is not None:
            parameters[str(name)] = spec
    mappings = _mappings(_section(document, "Mappings", errors), errors)
    conditions = _section(document, "Conditions", errors)
    raw_resources = _section(document, "Resources", errors)
    if not raw_resources and isinstance(document.get("Resources", {}), dict):
        errors.append("Resources: at least one resource is required")
    raw_outputs = _section(document, "Outputs", errors)

    declared_parameters = frozenset(_section(document, "Parameters", []).keys())
    scope = Scope(
        parameters=declared_parameters,
        resources=frozenset(str(k) for k in raw_resources),
        conditions=frozenset(str(k) for k in conditions),
        mappings=mappings,
    )
    clash = scope.parameters & scope.resources
    errors.extend(f"Resources.{name}: the name is also a parameter name" for name in sorted(clash))
    condition_scope = Scope(scope.parameters, scope.resources, scope.conditions, mappings, in_conditions=True)
    for name, expr in conditions.items():
        errors.extend(check_condition(expr, f"Conditions.{name}", condition_scope))

    resources: dict[str, ResourceSpec] = {}
    for name, raw in raw_resources.items():
        resource = _resource(str(name), raw, scope, errors)
        if resource is not None:
            resources[str(name)] = resource
    outputs: dict[str, OutputSpec] = {}
    for name, raw in raw_outputs.items():
        output = _output(str(name), raw, scope, errors)
        if output is not None:
            outputs[str(name)] = output
    local_types = {name: local for name, spec in resources.items() if (local := cloud_type(spec.type)) is not None}
    if local_types:
        for name, raw in raw_resources.items():
            errors.extend(_attribute_errors(raw, f"Resources.{name}", local_types))
        for name, raw in raw_outputs.items():
            errors.extend(_attribute_errors(raw, f"Outputs.{name}", local_types))
    description = document.get("Description")
    return Template(
        parameters=parameters,
        mappings=mappings,
        conditions=conditions,
        resources=resources,
        outputs=outputs,
        description=description if isinstance(description, str) else "",
    )


def _mappings(raw: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    for name, level in raw.items():
        if not isinstance(level, dict) or not all(isinstance(v, dict) for v in level.values()):
            errors.append(f"Mappings.{name}: must be a map of maps (Name: {{TopKey: {{SecondKey: value}}}})")
    return {str(k): v for k, v in raw.items()}


def _condition_name(value: Any, path: str, scope: Scope, errors: list[str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in scope.conditions:
        errors.append(f"{path}: unknown condition {value!r}")
        return None
    return value


def _resource(name: str, raw: Any, scope: Scope, errors: list[str]) -> ResourceSpec | None:
    path = f"Resources.{name}"
    if not _LOGICAL_ID.fullmatch(name):
        errors.append(f"{path}: logical id may only use letters, digits, '_' and '-'")
    if not isinstance(raw, dict):
        errors.append(f"{path}: must be a map")
        return None
    for key in raw:
        if key not in RESOURCE_KEYS:
            errors.append(f"{path}.{key}: unknown resource key")
    rtype = raw.get("Type")
    local_type = cloud_type(rtype) if isinstance(rtype, str) else None
    if local_type is not None:
        return _cloud_resource(name, raw, local_type, scope, errors)
    if not isinstance(rtype, str) or not (rtype == GENERIC_TYPE or _CUSTOM_TYPE.fullmatch(rtype)):
        errors.append(
            f"{path}.Type: unsupported resource type {rtype!r}; the emulator runs "
            f"'Custom::<Name>' (letters, digits, _ @ -, up to 68) and '{GENERIC_TYPE}'"
        )
    properties = raw.get("Properties")
    if not isinstance(properties, dict):
        errors.append(f"{path}.Properties: required map with ServiceToken")
        properties = {}
    for key in properties:
        if key not in PROPERTY_KEYS:
            errors.append(f"{path}.Properties.{key}: unknown property (allowed: {', '.join(sorted(PROPERTY_KEYS))})")
    if "ServiceToken" not in properties and isinstance(raw.get("Properties"), dict):
        errors.append(f"{path}.Properties.ServiceToken: required")
    for key in ("ServiceToken", "Timeout", "Parameters", "HttpConfig"):
        if key in properties:
            errors.extend(check(properties[key], f"{path}.Properties.{key}", scope))
    depends_on = _depends_on(name, raw, scope, errors)
    policy = _deletion_policy(raw, path, errors)
    condition = _condition_name(raw.get("Condition"), f"{path}.Condition", scope, errors)
    return ResourceSpec(
        logical_id=name,
        type=rtype if isinstance(rtype, str) else "",
        service_token=properties.get("ServiceToken"),
        timeout=properties.get("Timeout"),
        parameters=properties.get("Parameters", {}),
        condition=condition,
        depends_on=depends_on,
        deletion_policy=policy,
        http_config=properties.get("HttpConfig"),
    )


def _cloud_resource(name: str, raw: dict[str, Any], local_type: CloudType, scope: Scope, errors: list[str]) -> ResourceSpec:
    """An ALIYUN:: type run as a local resource: its Properties are checked against its declaration;
    the spec's `parameters` hold them (no ServiceToken: the engine applies them itself)."""
    path = f"Resources.{name}"
    properties = raw.get("Properties", {})
    errors.extend(template_errors(local_type, properties, f"{path}.Properties"))
    if isinstance(properties, dict):
        errors.extend(check(properties, f"{path}.Properties", scope))
    return ResourceSpec(
        logical_id=name,
        type=local_type.name,
        service_token=None,
        timeout=None,
        parameters=properties if isinstance(properties, dict) else {},
        condition=_condition_name(raw.get("Condition"), f"{path}.Condition", scope, errors),
        depends_on=_depends_on(name, raw, scope, errors),
        deletion_policy=_deletion_policy(raw, path, errors),
    )


def _attribute_errors(expr: Any, path: str, local_types: dict[str, CloudType]) -> list[str]:
    """`Fn::GetAtt` of a local ALIYUN:: resource must name one of its type's attributes."""
    if isinstance(expr, list):
        return [e for index, item in enumerate(expr) for e in _attribute_errors(item, f"{path}[{index}]", local_types)]
    if not isinstance(expr, dict):
        return []
    errors: list[str] = []
    if len(expr) == 1 and "Fn::GetAtt" in expr:
        parsed = get_att_args(expr["Fn::GetAtt"])
        local = local_types.get(parsed[0]) if parsed is not None else None
        if parsed is not None and local is not None and parsed[1] not in local.attribute_names:
            errors.append(f"{path}: Fn::GetAtt: {local.name} resource '{parsed[0]}' has no attribute '{parsed[1]}' "
                          f"(attributes: {', '.join(local.attribute_names) or 'none'})")
        return errors
    for key, value in expr.items():
        errors.extend(_attribute_errors(value, f"{path}.{key}", local_types))
    return errors


def _deletion_policy(raw: dict[str, Any], path: str, errors: list[str]) -> str:
    policy = raw.get("DeletionPolicy", "Delete")
    if policy not in DELETION_POLICIES:
        errors.append(f"{path}.DeletionPolicy: must be Delete or Retain, got {policy!r}")
    return policy if policy in DELETION_POLICIES else "Delete"


def _depends_on(name: str, raw: dict[str, Any], scope: Scope, errors: list[str]) -> tuple[str, ...]:
    path = f"Resources.{name}"
    depends_on_raw = raw.get("DependsOn", [])
    depends_on = [depends_on_raw] if isinstance(depends_on_raw, str) else depends_on_raw
    if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
        errors.append(f"{path}.DependsOn: must be a resource name or a list of them")
        depends_on = []
    for target in depends_on:
        if target not in scope.resources:
            errors.append(f"{path}.DependsOn: unknown resource '{target}'")
        elif target == name:
            errors.append(f"{path}.DependsOn: a resource cannot depend on itself")
    return tuple(dict.fromkeys(depends_on))


def _output(name: str, raw: Any, scope: Scope, errors: list[str]) -> OutputSpec | None:
    path = f"Outputs.{name}"
    if not isinstance(raw, dict):
        errors.append(f"{path}: must be a map with Value")
        return None
    for key in raw:
        if key not in OUTPUT_KEYS:
            errors.append(f"{path}.{key}: unknown output key")
    if "Value" not in raw:
        errors.append(f"{path}.Value: required")
    errors.extend(check(raw.get("Value"), f"{path}.Value", scope))
    condition = _condition_name(raw.get("Condition"), f"{path}.Condition", scope, errors)
    description = raw.get("Description", "")
    return OutputSpec(name, raw.get("Value"), description if isinstance(description, str) else "", condition)
