"""Reading template text: JSON, or YAML with the ROS short-form tags (!Ref, !GetAtt, !Sub, ...)."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml


class _TemplateLoader(yaml.SafeLoader):
    """SafeLoader that keeps dates as text and turns `!Name` tags into function objects."""


def _keep_timestamp_text(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    return str(loader.construct_scalar(node))  # type: ignore[arg-type]


def _short_form(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    key = suffix if suffix in ("Ref", "Condition") else f"Fn::{suffix}"
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if suffix == "GetAtt" and isinstance(value, str) and "." in value:
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {key: value}


_TemplateLoader.add_constructor("tag:yaml.org,2002:timestamp", _keep_timestamp_text)
_TemplateLoader.add_multi_constructor("!", _short_form)


#: How many values a YAML template may stand for once its aliases are expanded.
MAX_TEMPLATE_VALUES = 200_000


def expanded_values(text: str) -> int:
    """How many values YAML `text` stands for with its aliases (`&a` ... `*a`) expanded, counted over
    the composed node graph (each node once, nothing expanded): a 300-byte "billion laughs" template
    is cheap to parse, but everything downstream that walks or copies it would expand it. 0 when the
    text is not YAML the loader can compose (the loader then says what is wrong)."""
    try:
        root = yaml.compose(text, Loader=_TemplateLoader)
    except (yaml.YAMLError, RecursionError):
        return 0
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = 1  # a recursive alias counts once
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(key) + size(value) for key, value in node.value)
        else:
            total = 1
        sizes[id(node)] = total
        return total

    try:
        return size(root) if root is not None else 0
    except RecursionError:
        return 0


#: How deep `[` and `{` may nest in a YAML template. PyYAML's composer gives up near 330 levels
#: anyway, but its scanner reads ahead over every unclosed flow collection, quadratically: 100,000
#: `[` took seconds of CPU before failing. Counted without regard to quoting, so the bound is loose.
MAX_FLOW_DEPTH = 1000


def flow_depth(text: str) -> int:
    """The deepest nesting of `[`/`{` in `text` (quotes not considered: an upper bound)."""
    depth = deepest = 0
    for char in re.sub(r"[^\[\]{}]+", "", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest


def parse_document(text: str) -> Any:
    """Parse template text; raises ValueError naming the line of a syntax error."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"template is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if flow_depth(text) > MAX_FLOW_DEPTH:
        raise ValueError(f"template is nested too deeply to be read (more than {MAX_FLOW_DEPTH} levels of [ and {{)")
    if "&" in text and "*" in text:
        count = expanded_values(text)
        if count > MAX_TEMPLATE_VALUES:
            raise ValueError(f"template's YAML aliases expand to {count} values, more than the "
                             f"{MAX_TEMPLATE_VALUES} a template may hold")
    try:
        return yaml.load(text, Loader=_TemplateLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ValueError(f"template is not valid YAML: {problem}{where}") from None
