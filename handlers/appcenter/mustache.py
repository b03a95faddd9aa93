"""The "improved mustache" of ``cluster.json.mustache`` (spec §4; why no library fits:
cloud-apis.md §5): plain ``{{path}}`` tags only, each path looked up whole (keys hold dots and
hyphens: ``env.web.console.enabled``), each value substituted as a JSON literal.

Strings are quoted and escaped, numbers bare (big integers stay integers), booleans bare, lists
as lists, no value as ``null``. A tag that sits inside a JSON string (the packages never do it,
another author might) gets the value's text, escaped for that string. Unknown paths are reported
all at once; sections, inverted sections, partials, comments, delimiter changes, unescaped and
triple tags are refused naming the file, the line and the tag. The result must parse as JSON.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from .problems import InvalidPackage, Problem

TEMPLATE = "cluster.json.mustache"

#: A triple tag ``{{{...}}}``, else a tag: ``{{`` then anything up to the first ``}}`` (a ``}``
#: after it closes the enclosing object: ``"links": {"db": {{cluster.db}}}``).
_TAG = re.compile(r"\{\{(\{)(.*?)\}\}\}|\{\{()(.*?)\}\}", re.S)
#: A double quote that is not escaped (preceded by an even number of backslashes).
_QUOTE = re.compile(r'(?<!\\)(?:\\\\)*"')
_UNSUPPORTED = {"#": "a section", "^": "an inverted section", "/": "a section end", ">": "a partial",
                "!": "a comment", "=": "a delimiter change", "&": "an unescaped tag"}


_ENCODE = json.JSONEncoder(ensure_ascii=False).encode


def literal(value: Any) -> str:
    """The JSON literal a value becomes."""
    return _ENCODE(value)


def _in_string_text(value: Any) -> str:
    text = value if isinstance(value, str) else "" if value is None else literal(value)
    return _ENCODE(text)[1:-1]


def tags_of(template: str) -> list[str]:
    """The plain tag paths of a template, in order (repeats kept)."""
    return [match.group(4).strip() for match in _TAG.finditer(template) if match.group(1) is None]


@dataclass(frozen=True)
class _Part:
    """The text before one tag, then the tag: its path, whether it sits inside a JSON string, its
    line, and why it is refused (None for a plain tag)."""

    before: str
    body: str
    in_string: bool
    line: int
    refusal: str | None


@dataclass(frozen=True)
class _Compiled:
    parts: tuple[_Part, ...]
    rest: str
    stray: Problem | None


@functools.lru_cache(maxsize=32)
def _compiled(template: str, file: str) -> _Compiled:
    """Where the template's tags are and which are refused, kept for the templates scanned lately."""
    parts: list[_Part] = []
    position, line, in_string = 0, 1, False
    for match in _TAG.finditer(template):
        before = template[position: match.start()]
        line += before.count("\n")
        quotes = before.count('"') if "\\" not in before else len(_QUOTE.findall(before))
        in_string ^= quotes % 2 == 1
        position = match.end()
        tag = match.group(0)
        triple = match.group(1) is not None
        body = (match.group(2) if triple else match.group(4)).strip()
        refusal = None
        if triple or body.startswith("{"):
            refusal = f"{tag}: triple mustache tags are not supported; write {{{{path}}}}"
        elif body[:1] in _UNSUPPORTED:
            refusal = (f"{tag}: {_UNSUPPORTED[body[0]]} is not supported; "
                       "AppCenter templates use plain {{path}} tags only")
        elif not body:
            refusal = f"{tag}: an empty tag"
        parts.append(_Part(before, body, in_string, line, refusal))
        line += tag.count("\n")
    rest = template[position:]
    stray = rest.find("{{")
    problem = None
    if stray >= 0:
        problem = Problem(f"{file} line {line + rest[:stray].count(chr(10))}", "{{ without a closing }}")
    return _Compiled(tuple(parts), rest, problem)


def render_text(template: str, values: Mapping[str, Any], file: str = TEMPLATE) -> str:
    """Substitute every tag; raises `InvalidPackage` listing every unknown path and unsupported tag.
    The template's scan (where the tags are, which are refused) is kept for the next render."""
    compiled = _compiled(template, file)
    problems: list[Problem] = []
    out: list[str] = []
    for part in compiled.parts:
        out.append(part.before)
        if part.refusal is not None:
            problems.append(Problem(f"{file} line {part.line}", part.refusal))
        elif part.body not in values:
            problems.append(Problem(f"{file} line {part.line}", f"{{{{{part.body}}}}}: unknown path; config.json has "
                                                                "no such entry (paths are section[.role].key)"))
        else:
            value = values[part.body]
            out.append(_in_string_text(value) if part.in_string else literal(value))
    if compiled.stray is not None:
        problems.append(compiled.stray)
    if problems:
        raise InvalidPackage(problems)
    out.append(compiled.rest)
    return "".join(out)


def render(template: str, values: Mapping[str, Any], file: str = TEMPLATE) -> Any:
    """Render and parse: the cluster definition as JSON data (`InvalidPackage` on any problem).

    Substituted literals hold no raw newline, so a parse error's line is the template's line."""
    return parse_rendered(render_text(template, values, file), file)


def parse_rendered(text: str, file: str = TEMPLATE) -> Any:
    """A rendered template's text as JSON data (`InvalidPackage` naming the line and column)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidPackage([Problem(f"{file} line {exc.lineno} column {exc.colno}",
                                      f"not JSON once rendered: {exc.msg}")]) from None
