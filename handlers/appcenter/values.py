"""The user's values for a package (spec §2, §5): layered, converted, then checked.

Layers, later wins: the items' defaults; the ``ResourceGroup`` preset (``cluster.resource_group``
and the role entries' aligned ``resource_group`` lists); the resource's ``Inputs`` (dotted paths
as in template tags, ``env.web.console.enabled``; ROS and ``--set`` pass strings, converted to the
item type); then the zone's ``replace_policy`` (the exact zone, else its region prefix; it rewrites
the chosen value and the item's range alike, so a replaced value still passes its range).

Checks, all reported at once and none echoing a value: type, range, multichoice with its
separator, min/max/step, pattern (a JavaScript RegExp translated by `config.js_pattern`, with
search semantics as ``RegExp.test``), required, dependencies (a hidden item is not checked), the §2.5
value sets of role entries, ``changeable: false`` against the deployed values on update and
``changeable_when_create: false`` at create. ``service_params`` items are checked when a service
is invoked (`service_params_for`), not at deploy.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from crhelper.texts import scalar_text

from .config import CLUSTER, SERVICE_PARAMS, TEXT_TYPES, Config, Item, convert, is_number, shape_of, type_matches
from .problems import ERROR, WARNING, Problem, Severity, errors_in

INPUTS = "Inputs"
RESOURCE_GROUP = "ResourceGroup"

#: §2.5: the values QingCloud offers for role entries, by entry key.
ROLE_VALUE_SETS: dict[str, tuple[Any, ...]] = {
    "cpu": (1, 2, 4, 8, 12, 16, 24, 32, 64),
    "cpu_model": ("", "Westmere", "SandyBridge", "IvyBridge", "Haswell", "Broadwell", "Skylake", "CascadeLake"),
    "memory": (1024, 2048, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 40960, 49152, 65536, 81920, 98304,
               114688, 131072, 163840, 196608, 229376, 262144, 327680),
    "instance_class": (0, 1, 101, 201, 202, 301),
    "gpu": (0, 1, 2, 4, 8),
    "gpu_class": (0, 2),
    "volume_class": (0, 2, 3, 5, 6, 100, 200),
}
REQUIRED_RULE = "is required and has no default: give it a value"
UTF8_RULE = "must be text that encodes as UTF-8 (it holds a lone surrogate, e.g. a \\ud800 escape)"
_REGION = re.compile(r"^(.*\d)[a-z]+$")


@dataclass(frozen=True)
class Values:
    """Every item's value by path, the preset and zone used, and what the checks found."""

    values: Mapping[str, Any]
    preset: str | None = None
    zone: str | None = None
    #: Paths whose dependencies do not hold: hidden in the form, not checked.
    hidden: frozenset[str] = frozenset()
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not errors_in(self.problems)

    def __getitem__(self, path: str) -> Any:
        return self.values[path]


def zone_rules(policy: Mapping[str, Any], zone: str | None) -> dict[str, dict[str, Any]]:
    """field -> {src: dst} for a zone: its own entry, else its region's (``pek3a`` -> ``pek3``)."""
    if not zone or not policy:
        return {}
    fields = policy.get(zone)
    if fields is None:
        match = _REGION.match(zone)
        fields = policy.get(match.group(1)) if match else None
    if not isinstance(fields, Mapping):
        return {}
    return {name: {rule["src"]: rule["dst"] for rule in rules if isinstance(rule, Mapping) and "src" in rule}
            for name, rules in fields.items() if isinstance(rules, list)}




def _replace(value: Any, rules: Mapping[str, Any]) -> Any:
    return rules.get(scalar_text(value), value) if rules and value is not None else value


def same_value(a: Any, b: Any) -> bool:
    """Equality that keeps booleans apart from numbers (``True`` is not ``1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if is_number(a) and is_number(b):
        return bool(a == b)
    return bool(type(a) is type(b) and a == b)


def effective_range(item: Item, rules: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The item's range with the zone's replacements applied (duplicates dropped, order kept)."""
    if item.range is None:
        return None
    found: list[Any] = []
    for value in item.range:
        replaced = _replace(value, rules)
        if not any(same_value(replaced, seen) for seen in found):
            found.append(replaced)
    return tuple(found)


def _describe(values: Iterable[Any], limit: int = 12) -> str:
    shown = [scalar_text(value) if value != "" else '""' for value in values]
    return ", ".join(shown[:limit]) + (f", ... ({len(shown)} values)" if len(shown) > limit else "")


def _dependency_holds(item: Item, values: Mapping[str, Any]) -> bool:
    for dep in item.dependencies:
        current = values.get(f"{item.parent}.{dep.refkey}")
        member = any(scalar_text(current) == scalar_text(value) for value in dep.values)
        if member != (dep.operator == "in"):
            return False
    return True


def encodes_as_utf8(text: str) -> bool:
    """Whether `text` can be written to a node's files and environment (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_item(item: Item, value: Any, rules: Mapping[str, Any], *, given_empty: bool = False,
               enforce_required: bool = True, check_range: bool = True) -> list[str]:
    """The rules a value breaks, as phrases (the caller names the item); `check_range` False
    leaves the range to the caller (see `outside_range`)."""
    if value is None:
        return [REQUIRED_RULE] if item.required and enforce_required else []
    if given_empty and item.required and enforce_required:
        return ["is required: an empty value was given"]
    if isinstance(value, str) and not encodes_as_utf8(value):
        return [UTF8_RULE]
    kind = item.type
    if not type_matches(kind, value):
        return [f"must be {shape_of(kind)}"]
    broken: list[str] = []
    outside = outside_range(item, value, rules) if check_range else None
    if outside:
        broken.append(outside)
    if is_number(value):
        if item.min is not None and value < item.min:
            broken.append(f"must be at least {scalar_text(item.min)}")
        if item.max is not None and value > item.max:
            broken.append(f"must be at most {scalar_text(item.max)}")
        if item.step:
            base = item.min if item.min is not None else 0
            ratio = (value - base) / item.step
            if not math.isclose(ratio, round(ratio), abs_tol=1e-9):
                broken.append(f"must be {scalar_text(base)} plus a multiple of the step {scalar_text(item.step)}")
    if item.pattern is not None and kind in TEXT_TYPES and isinstance(value, str) and item.pattern.search(value) is None:
        broken.append(f"does not match the pattern {item.pattern_source}")
    if item.section == CLUSTER and item.role is not None and not declared_by_package(item, value, rules):
        broken += _role_value_rules(item.key, value)
    return broken


def declared_by_package(item: Item, value: Any, rules: Mapping[str, Any]) -> bool:
    """Whether the package itself offers the value (its default, or in its range): then a §2.5
    value set the value is not in is outdated (OpenSearch's instance_class 203), a warning only."""
    if item.has_default and same_value(_replace(item.default, rules), value):
        return True
    allowed = effective_range(item, rules)
    return allowed is not None and any(same_value(value, option) for option in allowed)


def outside_range(item: Item, value: Any, rules: Mapping[str, Any]) -> str | None:
    """The range rule a (well-typed) value breaks, or None."""
    allowed = effective_range(item, rules)
    if allowed is None:
        return None
    if item.multichoice and isinstance(value, str):
        choices = [part for part in value.split(item.separator)] if value else []
        if any(not any(scalar_text(part) == scalar_text(option) for option in allowed) for part in choices):
            return f"every choice (separated by {item.separator!r}) must be one of {_describe(allowed)}"
    elif not any(same_value(value, option) for option in allowed):
        return f"must be one of {_describe(allowed)}"
    return None


def _role_value_rules(key: str, value: Any) -> list[str]:
    offered = ROLE_VALUE_SETS.get(key)
    if offered is not None and not any(same_value(value, option) for option in offered):
        return [f"is not a {key} QingCloud offers ({_describe(offered, 30)})"]
    if key in ("count", "replica") and is_number(value) and value < 0:
        return [f"{key} must not be negative"]
    return []


def _named(where: str, key: str) -> str:
    """An input as its caller knows it: ``Inputs.env.x`` (a property), ``--set env.x`` (an option)."""
    return f"{where} {key}" if where.startswith("-") else f"{where}.{key}"


def _suggest(path: str, config: Config) -> str:
    close = difflib.get_close_matches(path, list(config.items), n=3, cutoff=0.7)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _presets(config: Config, values: dict[str, Any], name: str | None, inputs: Mapping[str, Any],
             problems: list[Problem]) -> tuple[str | None, dict[str, Any]]:
    """Apply the preset; (its name, path -> the preset's value for each aligned role entry)."""
    presets = config.presets
    chosen = name if name not in (None, "") else inputs.get(f"{CLUSTER}.resource_group")
    if not presets:
        if name not in (None, ""):
            problems.append(Problem(RESOURCE_GROUP, "this package has no cluster.resource_group presets"))
        return None, {}
    if chosen in (None, ""):
        chosen = values.get(f"{CLUSTER}.resource_group")
    if not isinstance(chosen, str) or chosen not in presets:
        problems.append(Problem(RESOURCE_GROUP if name not in (None, "") else f"{CLUSTER}.resource_group",
                                f"must be one of the presets {', '.join(presets)}"))
        return None, {}
    index = presets.index(chosen)
    values[f"{CLUSTER}.resource_group"] = chosen
    fixed = {}
    for item in config.items.values():
        if item.resource_group is not None and item.path != f"{CLUSTER}.resource_group":
            values[item.path] = fixed[item.path] = item.resource_group[index]
    return chosen, fixed


def resolve_values(config: Config, inputs: Mapping[str, Any] | None = None, *, resource_group: str | None = None,
                   zone: str | None = None, replace_policy: Mapping[str, Any] | None = None,
                   previous: Mapping[str, Any] | None = None, creating: bool = True,
                   where: str = INPUTS, missing_required: Severity = ERROR) -> Values:
    """Layer and check the values (see the module doc). `previous` is what is deployed (an update:
    `creating` False); `where` names the inputs in problems (``Inputs``, ``--set``).
    `missing_required` is how a required entry with no default and no value counts: an error for a
    deployment, a warning for an author checking the package alone (mongodb's user and passwd)."""
    inputs = dict(inputs or {})
    problems: list[Problem] = []
    values: dict[str, Any] = {path: item.default for path, item in config.items.items()}
    preset, fixed = _presets(config, values, resource_group, inputs, problems)
    rules = zone_rules(replace_policy or {}, zone)
    given_empty: set[str] = set()
    for key, raw in inputs.items():
        item = config.items.get(key)
        if item is None:
            rule = (f"is a role; set its entries ({key}.<key>)" if key in config.roles
                    else f"is a section; set its entries by dotted path ({key}.<key>)" if key in config.sections
                    else f"no such item in config.json{_suggest(key, config)}")
            problems.append(Problem(_named(where, key), rule))
            continue
        if key == f"{CLUSTER}.resource_group" and preset is not None:
            continue
        try:
            value = convert(item.type, raw, item.separator) if raw is not None else None
        except ValueError as exc:
            problems.append(Problem(_named(where, key), f"{exc} (type {item.type})"))
            continue
        if creating and not item.changeable_when_create and not same_value(value, item.default):
            problems.append(Problem(key, "is fixed at deploy (changeable_when_create: false): it keeps its default"))
            continue
        if key in fixed and not config.items[f"{CLUSTER}.resource_group"].customizable \
                and not same_value(value, fixed[key]):
            problems.append(Problem(key, f"must be {scalar_text(fixed[key])} under preset {preset}: the presets are "
                                         "not customizable (customizable: false)"))
            continue
        if value == "":
            given_empty.add(key)
        values[key] = value
    for path, item in config.items.items():
        field_rules = rules.get(item.key) if item.section == CLUSTER else None
        if field_rules:
            values[path] = _replace(values[path], field_rules)
    hidden = frozenset(path for path, item in config.items.items()
                       if item.dependencies and not _dependency_holds(item, values))
    for path, item in config.items.items():
        if path in hidden:
            continue
        at_deploy = item.section != SERVICE_PARAMS
        if not at_deploy and path not in inputs:
            continue
        if values[path] is None and item.required and at_deploy:
            problems.append(Problem(path, f"{REQUIRED_RULE} ({_named(where, path)})", missing_required))
            continue
        field_rules = (rules.get(item.key) or {}) if item.section == CLUSTER else {}
        for rule in check_item(item, values[path], field_rules, given_empty=path in given_empty,
                               enforce_required=at_deploy, check_range=False):
            problems.append(Problem(path, rule))
        if item.section == CLUSTER and item.role is not None and values[path] is not None \
                and declared_by_package(item, values[path], field_rules):
            problems += [Problem(path, f"{rule}; the package offers it, kept", WARNING)
                         for rule in _role_value_rules(item.key, values[path])]
        outside = outside_range(item, values[path], field_rules) if type_matches(item.type, values[path]) else None
        if outside:  # an author's default outside its own range: Harbor deploys so, the platform accepts it
            authors = path not in inputs and path not in fixed
            problems.append(Problem(path, f"{outside} (the package's default is not in its range)" if authors
                                    else outside, WARNING if authors else ERROR))
        if previous is not None and not item.changeable and path in previous \
                and not same_value(values[path], previous[path]):
            problems.append(Problem(path, "cannot change after creation (changeable: false)"))
    return Values(values=values, preset=preset, zone=zone, hidden=hidden, problems=tuple(problems))


def service_params_for(config: Config, role: str | None, params: Mapping[str, Any] | None,
                       where: str = "Params") -> tuple[dict[str, Any], list[Problem]]:
    """The ``service_params`` values a custom service (or backup/restore) gets when invoked: the
    defaults of the role's entries, the common ones and the groups' (arrays named after no role),
    overlaid by `params` (keyed by the entry key, ``node.ip``, or its whole path), all checked, ``required`` included. Returns
    (path -> value, problems)."""
    items = {path: item for path, item in config.items.items()
             if item.section == SERVICE_PARAMS and (item.role in (None, role) or config.in_group(item))}
    by_key = {item.key: path for path, item in items.items() if item.role == role}
    by_key.update({item.key: path for path, item in items.items() if item.role is None and item.key not in by_key})
    by_key.update({item.key: path for path, item in items.items() if config.in_group(item) and item.key not in by_key})
    values = {path: item.default for path, item in items.items()}
    problems: list[Problem] = []
    given_empty: set[str] = set()
    for key, raw in (params or {}).items():
        path = key if key in items else by_key.get(key)
        if path is None:
            problems.append(Problem(_named(where, key), "no such service parameter for this role"))
            continue
        try:
            values[path] = convert(items[path].type, raw, items[path].separator) if raw is not None else None
        except ValueError as exc:
            problems.append(Problem(_named(where, key), f"{exc} (type {items[path].type})"))
            continue
        if values[path] == "":
            given_empty.add(path)
    for path, item in items.items():
        if item.dependencies and not _dependency_holds(item, values):
            continue
        problems += [Problem(path, rule) for rule in check_item(item, values[path], {}, given_empty=path in given_empty)]
    return values, problems
