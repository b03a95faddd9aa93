"""ROS intrinsic functions: static checks, evaluation and reference discovery (pure).

Static checks run before anything is deployed so that a typo fails the whole operation with
its template path; evaluation runs while resources are deployed, through a `Resolver` that
supplies parameter values, pseudo parameters, conditions and resource attributes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import ResolutionError

NO_VALUE_NAME = "ALIYUN::NoValue"
PSEUDO_PARAMETERS = frozenset(
    {
        "ALIYUN::StackName",
        "ALIYUN::StackId",
        "ALIYUN::Region",
        "ALIYUN::AccountId",
        "ALIYUN::TenantId",
        NO_VALUE_NAME,
    }
)
FUNCTIONS = frozenset(
    {
        "Ref",
        "Fn::GetAtt",
        "Fn::Sub",
        "Fn::Join",
        "Fn::Select",
        "Fn::Split",
        "Fn::If",
        "Fn::Equals",
        "Fn::And",
        "Fn::Or",
        "Fn::Not",
        "Fn::FindInMap",
        "Fn::Replace",
    }
)
_SUB_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")


class _Sentinel:
    """A named marker value that can never collide with template data."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: `Ref: ALIYUN::NoValue` — removes the enclosing map key or list item.
NO_VALUE: Any = _Sentinel("NO_VALUE")
#: A value that depends on a resource not deployed yet (dry-run evaluation before deploying).
UNKNOWN: Any = _Sentinel("UNKNOWN")


def function_call(expr: Any) -> tuple[str, Any] | None:
    """(name, args) when `expr` is a one-key function object such as {'Fn::Join': [...]}."""
    if isinstance(expr, dict) and len(expr) == 1:
        ((key, args),) = expr.items()
        if isinstance(key, str) and (key == "Ref" or key.startswith("Fn::")):
            return key, args
    return None


def contains_unknown(value: Any) -> bool:
    """True when a dry-run value still depends on some resource."""
    if value is UNKNOWN:
        return True
    if isinstance(value, dict):
        return any(contains_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_unknown(v) for v in value)
    return False


def to_text(value: Any, path: str) -> str:
    """String form used by Fn::Sub, Fn::Join and Fn::Replace."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    raise ResolutionError(path, f"cannot convert {type(value).__name__} to a string")


def sub_names(text: str) -> list[str]:
    """Placeholder names in an Fn::Sub string, without `${!Literal}` escapes."""
    names = []
    for match in _SUB_PLACEHOLDER.finditer(text):
        inner = match.group(1).strip()
        if inner and not inner.startswith("!"):
            names.append(inner)
    return names


def get_att_args(args: Any) -> tuple[str, str] | None:
    """Accept [Resource, Attribute] and the YAML short form 'Resource.Attribute'."""
    if isinstance(args, str) and "." in args:
        resource, attribute = args.split(".", 1)
        return resource, attribute
    if isinstance(args, list) and len(args) == 2 and all(isinstance(a, str) for a in args):
        return args[0], args[1]
    return None


# --------------------------------------------------------------------------- static checks


@dataclass(frozen=True)
class Scope:
    """Names a template defines; `in_conditions` forbids resource references (ROS rule)."""

    parameters: frozenset[str]
    resources: frozenset[str]
    conditions: frozenset[str]
    mappings: Mapping[str, Any]
    in_conditions: bool = False


def check(expr: Any, path: str, scope: Scope) -> list[str]:
    """Every problem in `expr` that can be found without parameter values."""
    errors: list[str] = []
    _check(expr, path, scope, errors)
    return errors


def check_condition(expr: Any, path: str, scope: Scope) -> list[str]:
    """Like `check`, for a place that expects a condition ({'Condition': Name} allowed)."""
    errors: list[str] = []
    _check_condition(expr, path, scope, errors)
    return errors


def _check(expr: Any, path: str, scope: Scope, errors: list[str]) -> None:
    if isinstance(expr, list):
        for index, item in enumerate(expr):
            _check(item, f"{path}[{index}]", scope, errors)
        return
    if not isinstance(expr, dict):
        return
    call = function_call(expr)
    if call is not None:
        _check_call(call[0], call[1], path, scope, errors)
        return
    for key, value in expr.items():
        if isinstance(key, str) and (key == "Ref" or key.startswith("Fn::")):
            errors.append(f"{path}: function '{key}' must be the only key of its object")
            continue
        _check(value, f"{path}.{key}", scope, errors)


def _check_condition(expr: Any, path: str, scope: Scope, errors: list[str]) -> None:
    if isinstance(expr, dict) and list(expr) == ["Condition"]:
        name = expr["Condition"]
        if not isinstance(name, str) or name not in scope.conditions:
            errors.append(f"{path}: unknown condition {name!r}")
        return
    if isinstance(expr, bool):
        return
    if function_call(expr) is None:
        errors.append(f"{path}: expected a condition function (Fn::Equals/And/Or/Not) or {{Condition: Name}}")
        return
    _check(expr, path, scope, errors)


def _check_name(name: Any, path: str, scope: Scope, errors: list[str], what: str) -> None:
    if not isinstance(name, str):
        errors.append(f"{path}: {what} needs a literal name, got {type(name).__name__}")
    elif name in scope.resources:
        if scope.in_conditions:
            errors.append(f"{path}: {what} to resource '{name}' is not allowed in Conditions")
    elif name not in scope.parameters and name not in PSEUDO_PARAMETERS:
        errors.append(f"{path}: {what} to unknown name '{name}'")


def _arity(args: Any, name: str, low: int, high: int, path: str, errors: list[str]) -> bool:
    if isinstance(args, list) and low <= len(args) <= high:
        return True
    want = str(low) if low == high else f"{low} to {high}"
    errors.append(f"{path}.{name}: expects a list of {want} items")
    return False


def _check_call(name: str, args: Any, path: str, scope: Scope, errors: list[str]) -> None:
    fpath = f"{path}.{name}"
    if name not in FUNCTIONS:
        errors.append(f"{path}: unknown function '{name}'")
        return
    if name == "Ref":
        _check_name(args, path, scope, errors, "Ref")
    elif name == "Fn::GetAtt":
        parsed = get_att_args(args)
        if parsed is None:
            errors.append(f"{fpath}: expects [ResourceName, AttributeName]")
        elif scope.in_conditions:
            errors.append(f"{path}: Fn::GetAtt is not allowed in Conditions")
        elif parsed[0] not in scope.resources:
            errors.append(f"{path}: Fn::GetAtt of unknown resource '{parsed[0]}'")
    elif name == "Fn::Sub":
        _check_sub(args, path, scope, errors)
    elif name in ("Fn::Join", "Fn::Split"):
        if _arity(args, name, 2, 2, path, errors):
            if not isinstance(args[0], str):
                errors.append(f"{fpath}[0]: the delimiter must be a literal string")
            _check(args[1], f"{fpath}[1]", scope, errors)
    elif name in ("Fn::Select", "Fn::Equals", "Fn::Replace"):
        if _arity(args, name, 2, 2, path, errors):
            _check(args, fpath, scope, errors)
    elif name == "Fn::FindInMap":
        if _arity(args, name, 3, 3, path, errors):
            if isinstance(args[0], str) and args[0] not in scope.mappings:
                errors.append(f"{fpath}[0]: unknown mapping '{args[0]}'")
            _check(args, fpath, scope, errors)
    elif name == "Fn::If":
        if _arity(args, name, 3, 3, path, errors):
            if not isinstance(args[0], str) or args[0] not in scope.conditions:
                errors.append(f"{fpath}[0]: unknown condition {args[0]!r}")
            _check(args[1], f"{fpath}[1]", scope, errors)
            _check(args[2], f"{fpath}[2]", scope, errors)
    elif name in ("Fn::And", "Fn::Or", "Fn::Not"):
        low, high = (1, 1) if name == "Fn::Not" else (2, 10)
        if _arity(args, name, low, high, path, errors):
            for index, item in enumerate(args):
                _check_condition(item, f"{fpath}[{index}]", scope, errors)


def _check_sub(args: Any, path: str, scope: Scope, errors: list[str]) -> None:
    fpath = f"{path}.Fn::Sub"
    variables: dict[str, Any] = {}
    if isinstance(args, str):
        text = args
    elif isinstance(args, list) and len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], dict):
        text, variables = args
        _check(variables, f"{fpath}[1]", scope, errors)
    else:
        errors.append(f"{fpath}: expects a string or [string, {{Name: value}}]")
        return
    for name in sub_names(text):
        if name in variables:
            continue
        if "." in name:
            resource = name.split(".", 1)[0]
            if scope.in_conditions or resource not in scope.resources:
                errors.append(f"{path}: Fn::Sub references unknown resource '{resource}' in '${{{name}}}'")
        else:
            _check_name(name, path, scope, errors, "Fn::Sub reference")


# --------------------------------------------------------------------------- evaluation


class Resolver(Protocol):
    """Supplies what intrinsic functions read; raises ResolutionError with the path on failure."""

    def ref(self, name: str, path: str) -> Any: ...

    def get_att(self, resource: str, attribute: str, path: str) -> Any: ...

    def condition(self, name: str, path: str) -> bool: ...


class _UnknownValue(Exception):
    """Internal: a dry-run Fn::Sub placeholder depends on a resource."""


class Evaluator:
    """Evaluates template expressions; NoValue removes keys and items, UNKNOWN propagates."""

    def __init__(self, resolver: Resolver, mappings: Mapping[str, Any]) -> None:
        self._resolver = resolver
        self._mappings = mappings

    def evaluate(self, expr: Any, path: str) -> Any:
        if isinstance(expr, list):
            items = [self.evaluate(item, f"{path}[{i}]") for i, item in enumerate(expr)]
            return [item for item in items if item is not NO_VALUE]
        if isinstance(expr, dict):
            call = function_call(expr)
            if call is not None:
                return self._call(call[0], call[1], path)
            result = {}
            for key, value in expr.items():
                resolved = self.evaluate(value, f"{path}.{key}")
                if resolved is not NO_VALUE:
                    result[key] = resolved
            return result
        return expr

    def condition_value(self, expr: Any, path: str) -> Any:
        """A condition's truth value (or UNKNOWN); {'Condition': Name} refers to another one."""
        if isinstance(expr, dict) and list(expr) == ["Condition"]:
            return self._resolver.condition(expr["Condition"], path)
        value = self.evaluate(expr, path)
        if value is UNKNOWN or isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ResolutionError(path, f"expected a condition (true or false), got {type(value).__name__}")

    def _call(self, name: str, args: Any, path: str) -> Any:
        fpath = f"{path}.{name}"
        if name == "Ref":
            return self._resolver.ref(args, path)
        if name == "Fn::GetAtt":
            parsed = get_att_args(args)
            if parsed is None:
                raise ResolutionError(fpath, "expects [ResourceName, AttributeName]")
            return self._resolver.get_att(parsed[0], parsed[1], path)
        if name == "Fn::Sub":
            return self._sub(args, fpath)
        if name == "Fn::If":
            chosen = args[1] if self._resolver.condition(args[0], fpath) else args[2]
            return self.evaluate(chosen, fpath)
        if name in ("Fn::And", "Fn::Or", "Fn::Not"):
            values = [self.condition_value(a, f"{fpath}[{i}]") for i, a in enumerate(args)]
            if any(v is UNKNOWN for v in values):
                return UNKNOWN
            if name == "Fn::Not":
                return not values[0]
            return all(values) if name == "Fn::And" else any(values)
        values = self.evaluate(args, fpath)
        if contains_unknown(values):
            return UNKNOWN
        return _PURE[name](values, fpath, self._mappings)

    def _sub(self, args: Any, fpath: str) -> Any:
        if isinstance(args, str):
            text, variables = args, {}
        else:
            text = args[0]
            # Evaluated one by one: a variable that resolves to NoValue must still shadow a Ref of
            # the same name (and render as ''), not vanish from the map the way a property would.
            variables = {name: self.evaluate(value, f"{fpath}[1].{name}") for name, value in args[1].items()}

        def replace(match: re.Match[str]) -> str:
            inner = match.group(1).strip()
            if inner.startswith("!"):
                return "${" + inner[1:] + "}"
            if inner in variables:
                value = variables[inner]
            elif "." in inner:
                resource, attribute = inner.split(".", 1)
                value = self._resolver.get_att(resource, attribute, fpath)
            else:
                value = self._resolver.ref(inner, fpath)
            if contains_unknown(value):
                raise _UnknownValue
            if value is NO_VALUE:
                return ""
            return to_text(value, fpath)

        try:
            return _SUB_PLACEHOLDER.sub(replace, text)
        except _UnknownValue:
            return UNKNOWN


def _join(values: list[Any], path: str, _: Mapping[str, Any]) -> str:
    delimiter, items = values
    if not isinstance(items, list):
        raise ResolutionError(path, f"the second item must be a list, got {type(items).__name__}")
    return to_text(delimiter, path).join(to_text(item, f"{path}[1][{i}]") for i, item in enumerate(items))


def _split(values: list[Any], path: str, _: Mapping[str, Any]) -> list[str]:
    delimiter, text = values
    if not isinstance(delimiter, str) or not delimiter:
        raise ResolutionError(path, "the delimiter must be a non-empty string")
    if not isinstance(text, str):
        raise ResolutionError(path, f"the second item must be a string, got {type(text).__name__}")
    return text.split(delimiter)


def _select(values: list[Any], path: str, _: Mapping[str, Any]) -> Any:
    index, items = values
    try:
        position = int(index)
    except (TypeError, ValueError):
        raise ResolutionError(path, f"the index must be an integer, got {index!r}") from None
    if not isinstance(items, list):
        raise ResolutionError(path, f"the second item must be a list, got {type(items).__name__}")
    if not 0 <= position < len(items):
        raise ResolutionError(path, f"index {position} is out of range for a list of {len(items)} items")
    return items[position]


def _scalar_key(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)):
        return to_text(value, "")
    return value


def _equals(values: list[Any], path: str, _: Mapping[str, Any]) -> bool:
    left, right = values
    return bool(_scalar_key(left) == _scalar_key(right))


def _find_in_map(values: list[Any], path: str, mappings: Mapping[str, Any]) -> Any:
    name, top, second = (to_text(v, path) for v in values)
    if name not in mappings:
        raise ResolutionError(path, f"unknown mapping '{name}'")
    level = mappings[name]
    if top not in level:
        raise ResolutionError(path, f"mapping '{name}' has no key '{top}'")
    if not isinstance(level[top], dict) or second not in level[top]:
        raise ResolutionError(path, f"mapping '{name}.{top}' has no key '{second}'")
    return level[top][second]


def _replace(values: list[Any], path: str, _: Mapping[str, Any]) -> str:
    replacements, text = values
    if not isinstance(replacements, dict):
        raise ResolutionError(path, "the first item must be a map of old: new strings")
    if not isinstance(text, str):
        raise ResolutionError(path, f"the second item must be a string, got {type(text).__name__}")
    for old, new in replacements.items():
        text = text.replace(str(old), to_text(new, path))
    return text


_PURE = {
    "Fn::Join": _join,
    "Fn::Split": _split,
    "Fn::Select": _select,
    "Fn::Equals": _equals,
    "Fn::FindInMap": _find_in_map,
    "Fn::Replace": _replace,
}


# --------------------------------------------------------------------------- references


def references(expr: Any, conditions: Mapping[str, bool] | None = None) -> set[str]:
    """Names read by Ref, Fn::GetAtt and Fn::Sub; Fn::If follows only the chosen branch."""
    found: set[str] = set()
    _collect(expr, conditions, found)
    return found


def _collect(expr: Any, conditions: Mapping[str, bool] | None, found: set[str]) -> None:
    if isinstance(expr, list):
        for item in expr:
            _collect(item, conditions, found)
        return
    if not isinstance(expr, dict):
        return
    call = function_call(expr)
    if call is None:
        for value in expr.values():
            _collect(value, conditions, found)
        return
    name, args = call
    if name == "Ref" and isinstance(args, str):
        found.add(args)
    elif name == "Fn::GetAtt":
        parsed = get_att_args(args)
        if parsed is not None:
            found.add(parsed[0])
    elif name == "Fn::Sub":
        text, variables = (args, {}) if isinstance(args, str) else (args[0], args[1])
        if isinstance(text, str):
            for placeholder in sub_names(text):
                if isinstance(variables, dict) and placeholder in variables:
                    continue
                found.add(placeholder.split(".", 1)[0])
        _collect(variables, conditions, found)
    elif name == "Fn::If" and isinstance(args, list) and len(args) == 3:
        chosen = conditions.get(args[0]) if conditions is not None and isinstance(args[0], str) else None
        if chosen is None:
            _collect(args[1:], conditions, found)
        else:
            _collect(args[1] if chosen else args[2], conditions, found)
    else:
        _collect(args, conditions, found)
