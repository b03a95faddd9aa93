"""The deploy form, ``config.json`` (spec §2): sections, role arrays and typed items.

`parse_config` checks every entry against the attribute table of §2.2 and the eleven types of
§2.4 and reports all problems at once, each naming the item's path (``env.etcd_node.quotabytes``)
and the rule. Unknown attributes are kept in `Item.extra` (real packages use ``multiline``,
``tag``...). Items are flattened to ``section[.role].key`` -- the path a template tag uses, looked
up whole since keys may hold dots and hyphens -- and two entries with one path are refused.

Where real packages go beyond the spec and the platform evidently accepts it, the package is read
with a warning: an ``env``/``service_params`` array named after no role is a group every role
shares (``env.global.<key>``), ``required: "true"`` reads as ``"yes"``. Patterns are JavaScript
RegExps (`js_pattern`); a construct only Python's ``re`` reads is refused, naming it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .package import ByDigest
from .problems import InvalidPackage, Problem, WARNING

FILE = "config.json"

INTEGER, NUMBER, BOOLEAN, STRING = "integer", "number", "boolean", "string"
ARRAY, SERVICE, LOADBALANCER, PASSWORD = "array", "service", "loadbalancer", "password"
ACCESSKEY, VXNET, EIP = "accesskey", "vxnet", "eip"
TYPES = (INTEGER, NUMBER, BOOLEAN, STRING, ARRAY, SERVICE, LOADBALANCER, PASSWORD, ACCESSKEY, VXNET, EIP)
#: Types whose value is text (a pattern applies to them).
TEXT_TYPES = frozenset({STRING, PASSWORD, ACCESSKEY, VXNET, EIP, SERVICE})
#: Types that keep a secret: their values never appear in a message.
SECRET_TYPES = frozenset({PASSWORD, ACCESSKEY})
#: Where a type may be used (§2.4); absent means anywhere.
TYPE_SECTIONS = {PASSWORD: ("env", "service_params"), ACCESSKEY: ("env",), VXNET: ("env",), EIP: ("env",)}

CLUSTER, ENV, SERVICE_PARAMS = "cluster", "env", "service_params"
RESERVED_KEYS = ("name", "description", "vxnet")
#: Role entries that may carry a `resource_group` list aligned with the presets (§2.2).
PRESET_FIELDS = ("cpu", "memory", "count", "instance_class", "volume_size", "volume_class", "replica")
OPERATORS = ("in", "nin")
OPERATIONS = ("add", "modify", "delete")

#: The true/false attributes of an entry (besides multichoice and expanded) and their defaults.
_FLAGS = {"changeable": True, "changeable_when_create": True, "customizable": True, "system": False}
_RARE = frozenset({"separator", "step", "auto_scale_step", "associate_mode", "port", "limits", "allowed_operations",
                   "resource_group", "expanded", "pattern", "dependencies", *_FLAGS})
_KNOWN = frozenset({
    "key", "label", "description", "type", "default", "required", "range", "multichoice", "separator",
    "min", "max", "step", "auto_scale_step", "pattern", "changeable", "changeable_when_create",
    "customizable", "system", "expanded", "dependencies", "associate_mode", "limits",
    "allowed_operations", "port", "resource_group", "properties",
})


@dataclass(frozen=True)
class Dependency:
    """Show (and check) the item only when the sibling `refkey` has a value in (`in`) or not in
    (`nin`) `values`."""

    refkey: str
    values: tuple[Any, ...]
    operator: str = "in"


@dataclass(slots=True)
class Item:
    """One form entry that holds a value (arrays are `Role`s or sections, not items). Read-only by
    convention: not frozen, since a frozen dataclass of 30 fields costs 4x to build (redis has 84)."""

    path: str
    key: str
    section: str
    role: str | None
    type: str
    label: str = ""
    description: str = ""
    has_default: bool = False
    default: Any = None
    required: bool = False
    range: tuple[Any, ...] | None = None
    multichoice: bool = False
    separator: str = ","
    min: float | None = None
    max: float | None = None
    step: float | None = None
    auto_scale_step: float | None = None
    #: Compiled by `js_pattern` (JavaScript semantics); `pattern_source` is what the package wrote.
    pattern: re.Pattern[str] | None = None
    pattern_source: str = ""
    changeable: bool = True
    changeable_when_create: bool = True
    customizable: bool = True
    system: bool = False
    expanded: bool | None = None
    dependencies: tuple[Dependency, ...] = ()
    associate_mode: int = 0
    limits: Mapping[str, tuple[str, ...]] | None = None
    allowed_operations: tuple[str, ...] | None = None
    port: tuple[int, ...] | None = None
    resource_group: tuple[Any, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def secret(self) -> bool:
        return self.type in SECRET_TYPES

    @property
    def parent(self) -> str:
        """The path of the array holding the item (``env.etcd_node``); dependencies are siblings."""
        return f"{self.section}.{self.role}" if self.role else self.section


@dataclass(frozen=True)
class Role:
    """A role array of a section (``cluster.etcd_node``), or a group: an ``env`` or
    ``service_params`` array named after no cluster role (OpenSearch's ``env.global``, EHPC's
    ``service_params.controller_sp``), whose entries every role shares."""

    path: str
    key: str
    section: str
    label: str = ""
    description: str = ""
    group: bool = False


@dataclass(frozen=True)
class Config:
    """The whole form: items by path (form order kept), role arrays, sections in file order."""

    items: Mapping[str, Item]
    roles: Mapping[str, Role]
    sections: tuple[str, ...]
    problems: tuple[Problem, ...] = ()

    @property
    def cluster_roles(self) -> tuple[str, ...]:
        """The node roles: the arrays of the ``cluster`` section, in form order."""
        return tuple(role.key for role in self.roles.values() if role.section == CLUSTER)

    @property
    def presets(self) -> tuple[str, ...]:
        """The `resource_group` preset names (``cluster.resource_group``'s range), or ()."""
        item = self.items.get(f"{CLUSTER}.resource_group")
        return tuple(str(value) for value in item.range) if item is not None and item.range else ()

    def in_group(self, item: Item) -> bool:
        """Whether the item sits in a group (an array named after no cluster role), not a role."""
        holder = self.roles.get(item.parent) if item.role is not None else None
        return holder is not None and holder.group

    def siblings(self, item: Item) -> dict[str, Item]:
        return {other.key: other for other in self.items.values() if other.parent == item.parent}


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def type_matches(kind: str, value: Any) -> bool:
    """Whether a (converted) value has the item type's JSON shape."""
    if kind == INTEGER:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUMBER:
        return is_number(value)
    if kind == BOOLEAN:
        return isinstance(value, bool)
    if kind == LOADBALANCER:
        return isinstance(value, list)
    return isinstance(value, str)


def convert(kind: str, value: Any, separator: str = ",") -> Any:
    """A value as ROS or ``--set`` passes it (often a string) -> the item type's value.

    Raises ValueError with the rule (never the value: it may be a secret)."""
    if kind == INTEGER:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            return int(value)
        raise ValueError("must be an integer")
    if kind == NUMBER:
        if is_number(value):
            return value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                raise ValueError("must be a number") from None
            if math.isfinite(number):
                return int(number) if re.fullmatch(r"\s*[+-]?\d+\s*", value) else number
        raise ValueError("must be a number")
    if kind == BOOLEAN:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ValueError("must be true or false")
    if kind == LOADBALANCER:
        if isinstance(value, list):
            return value
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    parsed = json.loads(text)
                except ValueError:
                    raise ValueError("must be a list (a JSON array of load balancer ids)") from None
                if isinstance(parsed, list):
                    return parsed
            return [part for part in re.split(r"[\s,]+", text) if part]
        raise ValueError("must be a list of load balancer ids")
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if is_number(value):
        return str(value)
    if isinstance(value, list) and all(isinstance(part, (str, int)) and not isinstance(part, bool) for part in value):
        return separator.join(str(part) for part in value)
    raise ValueError("must be a string")


class _Entry:
    """Reads one raw entry's attributes, recording a problem for each broken rule."""

    def __init__(self, raw: Mapping[str, Any], path: str, problems: list[Problem]) -> None:
        self.raw, self.path, self.problems = raw, path, problems

    def fail(self, rule: str) -> None:
        self.problems.append(Problem(f"{FILE} {self.path}", rule))

    def boolean(self, name: str, default: bool) -> bool:
        if name not in self.raw:
            return default
        value = self.raw[name]
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        self.fail(f"{name} must be true or false")
        return default

    def number(self, name: str, positive: bool = False) -> float | None:
        value = self.raw.get(name)
        if value is None:
            return None
        if not is_number(value):
            self.fail(f"{name} must be a number")
            return None
        if positive and value <= 0:
            self.fail(f"{name} must be greater than 0")
            return None
        return value

    def text(self, name: str) -> str:
        value = self.raw.get(name, "")
        if isinstance(value, str):
            return value
        self.fail(f"{name} must be a string")
        return ""


def _required(entry: _Entry) -> bool:
    value = entry.raw.get("required", "no")
    if value in ("yes", "no"):
        return bool(value == "yes")
    if isinstance(value, bool):  # tolerated: the spec writes strings, some packages write booleans
        return value
    if isinstance(value, str) and value in ("true", "false"):  # OpenSearch writes "true"
        entry.problems.append(Problem(f"{FILE} {entry.path}", f'required should be "yes" or "no", not "{value}"; '
                                      f'read as "{"yes" if value == "true" else "no"}"', WARNING))
        return value == "true"
    entry.fail('required must be "yes" or "no"')
    return False


def _dependencies(entry: _Entry) -> tuple[Dependency, ...]:
    raw = entry.raw.get("dependencies")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        entry.fail("dependencies must be a list of {refkey, values, operator}")
        return ()
    found = []
    for index, dep in enumerate(raw):
        if not isinstance(dep, dict) or not isinstance(dep.get("refkey"), str) or not isinstance(dep.get("values"), list):
            entry.fail(f"dependencies[{index}] must be an object with refkey (a string) and values (a list)")
            continue
        operator = dep.get("operator", "in")
        if operator not in OPERATORS:
            entry.fail(f"dependencies[{index}].operator must be one of {', '.join(OPERATORS)}")
            continue
        found.append(Dependency(dep["refkey"], tuple(dep["values"]), operator))
    return tuple(found)


#: JavaScript's ``\s`` (Unicode white space and line terminators) and what ``.`` excludes.
_JS_SPACE = "\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_JS_OUTSIDE_CLASS = {"$": "\\Z", ".": "[^\\n\\r\\u2028\\u2029]", "\\s": f"[{_JS_SPACE}]", "\\S": f"[^{_JS_SPACE}]"}
#: Constructs Python's `re` reads but a JavaScript RegExp does not (or reads differently).
_PYTHON_ONLY = {"(?P": "(?P...) groups", "(?#": "(?#...) comments", "(?(": "conditional groups",
                "(?>": "atomic groups", "\\A": "\\A", "\\Z": "\\Z"}
_INLINE_FLAGS = re.compile(r"\(\?[aiLmsux-]+[:)]")


def js_pattern(source: str) -> re.Pattern[str]:
    """A JavaScript RegExp (no flags), as the AppCenter console tests values with, compiled to a
    Python pattern that `search`es alike: ``$`` only at the very end (not before a final newline),
    ``\\d``/``\\w``/``\\b`` ASCII, ``\\s`` and ``.`` as JavaScript defines them (``\\S`` in a class
    stays ASCII), ``(?<name>`` groups and ``\\k<name>``.
    Raises ValueError naming a construct only Python reads, or the compile error."""
    out: list[str] = []
    index, in_class = 0, False
    while index < len(source):
        char = source[index]
        pair = source[index:index + 2]
        three = source[index:index + 3]
        if not in_class and (three in _PYTHON_ONLY or pair in _PYTHON_ONLY):
            raise ValueError(f"{_PYTHON_ONLY.get(three) or _PYTHON_ONLY[pair]} (at offset {index}): Python syntax, "
                             "not JavaScript")
        if not in_class and _INLINE_FLAGS.match(source, index):
            raise ValueError(f"inline flags (at offset {index}): Python syntax, not JavaScript")
        if char == "\\":
            named = re.match(r"\\k<(\w+)>", source[index:]) if not in_class else None
            if named:  # a named back reference
                out.append(f"(?P={named.group(1)})")
                index += named.end()
                continue
            out.append((_JS_SPACE if pair == "\\s" else pair) if in_class else _JS_OUTSIDE_CLASS.get(pair, pair))
            index += 2
            continue
        if in_class:
            in_class = char != "]" or out[-1] in ("[", "[^")
            out.append(char)
        elif char == "[":
            in_class = True
            out.append("[^" if source.startswith("[^", index) else "[")
            index += 2 if out[-1] == "[^" else 1
            continue
        elif source.startswith("(?<", index) and source[index + 3:index + 4] not in ("=", "!"):
            out.append("(?P<")
            index += 3
            continue
        else:
            out.append(_JS_OUTSIDE_CLASS.get(char, char))
        index += 1
    try:
        return re.compile("".join(out), re.ASCII)
    except re.error as exc:
        raise ValueError(exc.msg) from None  # its position counts in the translation, not the source


def _pattern(entry: _Entry) -> re.Pattern[str] | None:
    raw = entry.raw.get("pattern")
    if raw is None:
        return None
    if not isinstance(raw, str):
        entry.fail("pattern must be a string (a regular expression)")
        return None
    try:
        return js_pattern(raw)
    except ValueError as exc:
        entry.fail(f"pattern is not a valid regular expression (a JavaScript RegExp): {exc}")
        return None


def _ports(entry: _Entry) -> tuple[int, ...] | None:
    raw = entry.raw.get("port")
    if raw is None:
        return None
    listed = raw if isinstance(raw, list) else [raw]
    if not listed or not all(isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536 for port in listed):
        entry.fail("port must be a port number (1-65535) or a list of them")
        return None
    return tuple(listed)


def _limits(entry: _Entry) -> Mapping[str, tuple[str, ...]] | None:
    raw = entry.raw.get("limits")
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in raw.values()):
        entry.fail('limits must be {"<app_id>": ["<app_version>", ...]}')
        return None
    return {str(app): tuple(versions) for app, versions in raw.items()}


def _operations(entry: _Entry) -> tuple[str, ...] | None:
    raw = entry.raw.get("allowed_operations")
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(op in OPERATIONS for op in raw):
        entry.fail(f"allowed_operations must be a list of {', '.join(OPERATIONS)}")
        return None
    return tuple(raw)


def _item(raw: Mapping[str, Any], path: str, key: str, section: str, role: str | None, kind: str,
          problems: list[Problem]) -> Item:
    entry = _Entry(raw, path, problems)
    allowed = TYPE_SECTIONS.get(kind)
    if allowed and section not in allowed:
        entry.fail(f"type {kind} is allowed only in {' and '.join(allowed)}")
    required = _required(entry) if "required" in raw else False
    fields: dict[str, Any] = {"required": required}
    has_default = "default" in raw
    if not has_default and not required:
        entry.fail('default is required when required is "no"')
    default = raw.get("default")
    if has_default and default is not None and not type_matches(kind, default):
        try:  # tolerated as ROS would pass it ("3" for an integer), with a warning
            default = convert(kind, default, raw.get("separator", ","))
            problems.append(Problem(f"{FILE} {path}", f"default should be {shape_of(kind)}, not a string", WARNING))
        except ValueError:
            entry.fail(f"default must be {shape_of(kind)}")
    multichoice = entry.boolean("multichoice", False)
    value_range = raw.get("range")
    if value_range is not None:
        if not isinstance(value_range, list):
            entry.fail("range must be a list of the allowed values")
        else:
            if not all(type_matches(kind, v) or (multichoice and isinstance(v, str)) for v in value_range):
                entry.fail(f"range values must be {shape_of(kind)}")
            fields["range"] = tuple(value_range)
    if multichoice:
        fields["multichoice"] = True
        if "range" not in fields:
            entry.fail("multichoice needs a range to choose from")
    if "min" in raw or "max" in raw:
        low, high = entry.number("min"), entry.number("max")
        if kind not in (INTEGER, NUMBER):
            entry.fail(f"min and max apply to integer and number items, not {kind}")
        if low is not None and high is not None and low > high:
            entry.fail("min must not be greater than max")
        fields.update(min=low, max=high)
    if kind == LOADBALANCER and "port" not in raw:
        entry.fail("a loadbalancer item needs port (the backend port, or a list of them)")
    if "\x2a\x2a\x2a" in key:
        entry.fail("*** is a placeholder of the spec's examples, not a key")
    present = _RARE.intersection(raw)
    if present:
        _rare_attributes(entry, kind, present, fields)
    unknown = raw.keys() - _KNOWN
    if unknown:
        fields["extra"] = {name: raw[name] for name in unknown}
    return Item(path=path, key=key, section=section, role=role, type=kind, label=entry.text("label"),
                description=entry.text("description"), has_default=has_default, default=default, **fields)


def _rare_attributes(entry: _Entry, kind: str, present: frozenset[str], fields: dict[str, Any]) -> None:
    """The attributes most entries leave out, read only when an entry has one of them."""
    raw = entry.raw
    if "separator" in present:
        separator = raw["separator"]
        if not isinstance(separator, str) or not separator:
            entry.fail("separator must be a non-empty string")
        else:
            fields["separator"] = separator
    if "step" in present or "auto_scale_step" in present:
        fields.update(step=entry.number("step", positive=True), auto_scale_step=entry.number("auto_scale_step", positive=True))
        if fields["step"] is not None and kind not in (INTEGER, NUMBER):
            entry.fail(f"step applies to integer and number items, not {kind}")
    if "associate_mode" in present:
        mode = raw["associate_mode"]
        if mode not in (0, 1) or isinstance(mode, bool):
            entry.fail("associate_mode must be 0 (external bind) or 1 (internal bind)")
        elif kind != EIP:
            entry.fail("associate_mode applies to eip items only")
        else:
            fields["associate_mode"] = int(mode)
    if "port" in present:
        fields["port"] = _ports(entry)
    if "limits" in present or "allowed_operations" in present:
        fields.update(limits=_limits(entry), allowed_operations=_operations(entry))
        if kind != SERVICE:
            entry.fail("limits and allowed_operations apply to service items only")
    if "resource_group" in present:
        preset = raw["resource_group"]
        if not isinstance(preset, list):
            entry.fail("resource_group must be a list of values, one per preset")
        else:
            fields["resource_group"] = tuple(preset)
    if "expanded" in present:
        fields["expanded"] = entry.boolean("expanded", False)
    if "pattern" in present:
        fields["pattern"] = _pattern(entry)
        if fields["pattern"] is not None:
            fields["pattern_source"] = raw["pattern"]
    if "dependencies" in present:
        fields["dependencies"] = _dependencies(entry)
    for name in present.intersection(_FLAGS):
        fields[name] = entry.boolean(name, _FLAGS[name])


def shape_of(kind: str) -> str:
    """What a value of the type looks like, in messages ("an integer")."""
    return {INTEGER: "an integer", NUMBER: "a number", BOOLEAN: "true or false", LOADBALANCER: "a list"}.get(
        kind, "a string")


class _Builder:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.items: dict[str, Item] = {}
        self.roles: dict[str, Role] = {}
        self.sections: list[str] = []

    def fail(self, where: str, rule: str) -> None:
        self.problems.append(Problem(f"{FILE} {where}" if where else FILE, rule))

    def entries(self, raw: Any, where: str) -> list[tuple[str, str, Mapping[str, Any]]]:
        """(key, type, entry) of each well-formed entry of a properties list."""
        if not isinstance(raw, list):
            self.fail(where, "properties must be a list of entries")
            return []
        found: list[tuple[str, str, Mapping[str, Any]]] = []
        seen: set[str] = set()
        for index, entry in enumerate(raw):
            at = f"{where}[{index}]" if where else f"properties[{index}]"
            if not isinstance(entry, dict):
                self.fail(at, "an entry must be an object")
                continue
            key, kind = entry.get("key"), entry.get("type")
            if not isinstance(key, str) or not key:
                self.fail(at, "key is required (a non-empty string)")
                continue
            named = f"{where}.{key}" if where else key
            if key in seen:
                self.fail(named, "key appears twice in the same array")
                continue
            seen.add(key)
            if kind not in TYPES:
                self.fail(named, f"type is required, one of {', '.join(TYPES)}")
                continue
            found.append((key, kind, entry))
        return found

    def add(self, item: Item) -> None:
        if item.path in self.items or item.path in self.roles:
            self.fail(item.path, "two entries flatten to this path; a template tag could not tell them apart")
            return
        self.items[item.path] = item

    def section(self, key: str, entry: Mapping[str, Any]) -> None:
        self.sections.append(key)
        for child_key, kind, child in self.entries(entry.get("properties"), key):
            path = f"{key}.{child_key}"
            if kind == ARRAY:
                self.role(key, child_key, child)
                continue
            if key == ENV and " " in child_key:
                self.fail(path, "env keys must not contain spaces")
            if key == CLUSTER and child_key in RESERVED_KEYS and kind not in (STRING, VXNET):
                self.fail(path, f"cluster.{child_key} is reserved: a string")
            self.add(_item(child, path, child_key, key, None, kind, self.problems))

    def role(self, section: str, key: str, entry: Mapping[str, Any]) -> None:
        path = f"{section}.{key}"
        if section == CLUSTER and key in RESERVED_KEYS:
            self.fail(path, f"cluster.{key} is reserved and cannot be a role")
        if key.endswith("-replica"):
            self.fail(path, "the suffix -replica is reserved for replica roles")
        if path in self.items or path in self.roles:
            self.fail(path, "two entries flatten to this path")
            return
        self.roles[path] = Role(path, key, section, str(entry.get("label", "")), str(entry.get("description", "")))
        for child_key, kind, child in self.entries(entry.get("properties"), path):
            item_path = f"{path}.{child_key}"
            if kind == ARRAY:
                self.fail(item_path, "arrays nest at most two deep (section, then role)")
                continue
            if section == ENV and " " in child_key:
                self.fail(item_path, "env keys must not contain spaces")
            self.add(_item(child, item_path, child_key, section, key, kind, self.problems))

    def cross_checks(self) -> None:
        cluster_roles = [role.key for role in self.roles.values() if role.section == CLUSTER]
        for path, role in self.roles.items():
            if role.section != CLUSTER and role.key not in cluster_roles:  # sections come in any order
                self.roles[path] = dataclasses.replace(role, group=True)
                self.problems.append(Problem(f"{FILE} {path}", f"names no cluster role (roles: "
                                             f"{', '.join(cluster_roles) or 'none'}): read as a group of "
                                             "entries every role shares", WARNING))
        presets = self.items.get(f"{CLUSTER}.resource_group")
        if presets is not None and not presets.range:
            self.fail(presets.path, "cluster.resource_group needs a range of preset names")
        by_parent: dict[str, dict[str, Item]] = {}
        for item in self.items.values():
            by_parent.setdefault(item.parent, {})[item.key] = item
        for item in self.items.values():
            siblings = by_parent[item.parent]
            for dep in item.dependencies:
                ref = siblings.get(dep.refkey)
                if ref is None:
                    self.fail(item.path, f"dependencies: refkey {dep.refkey} is not a sibling entry")
                elif not ref.range:
                    self.fail(item.path, f"dependencies: refkey {dep.refkey} has no range")
            if item.resource_group is None:
                continue
            if item.path == f"{CLUSTER}.resource_group":
                continue
            if item.section != CLUSTER or item.role is None or item.key not in PRESET_FIELDS:
                self.fail(item.path, f"resource_group applies to the role entries {', '.join(PRESET_FIELDS)}")
            elif presets is None or not presets.range:
                self.fail(item.path, "resource_group values need cluster.resource_group presets")
            elif len(item.resource_group) != len(presets.range):
                self.fail(item.path, f"resource_group has {len(item.resource_group)} values for "
                                     f"{len(presets.range)} presets")
            elif not all(type_matches(item.type, value) for value in item.resource_group):
                self.fail(item.path, f"resource_group values must be {shape_of(item.type)}")


def parse_config(raw: Any, digest: str | None = None) -> Config:
    """config.json as parsed -> `Config`; raises `InvalidPackage` with every error found. With the
    file's `digest` (`Package.config_digest`), a form parsed lately is returned again (a Config is
    read-only)."""
    if digest:
        return _parsed(ByDigest(digest, raw))
    return _parse_config(raw)


@functools.lru_cache(maxsize=32)
def _parsed(raw: ByDigest[Any]) -> Config:
    return _parse_config(raw.value)


def _parse_config(raw: Any) -> Config:
    builder = _Builder()
    if not isinstance(raw, dict) or raw.get("type") != ARRAY:
        raise InvalidPackage([Problem(FILE, 'the root must be {"type": "array", "properties": [...]}')])
    for key, kind, entry in builder.entries(raw.get("properties"), ""):
        if kind != ARRAY:
            builder.fail(key, "a top-level entry must be a section (type array): cluster, env or service_params")
            continue
        if key not in (CLUSTER, ENV, SERVICE_PARAMS):
            builder.problems.append(Problem(f"{FILE} {key}", "not a section the spec knows (cluster, env, "
                                            "service_params); kept", WARNING))
        builder.section(key, entry)
    if CLUSTER not in builder.sections:
        builder.fail("", "the cluster section is required")
    builder.cross_checks()
    if any(problem.severity != WARNING for problem in builder.problems):
        raise InvalidPackage(builder.problems)
    return Config(items=builder.items, roles=builder.roles, sections=tuple(builder.sections),
                  problems=tuple(builder.problems))
