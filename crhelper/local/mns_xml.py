"""MNS 2015-06-06 XML bodies: parse what the SDK sends, render what MNS answers.

Pure helpers, kept apart from the HTTP server so the wire format can be read in one
place. Element order and names follow the decoders in ``aliyun-mns-sdk``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from typing import Iterable, Sequence
from xml.sax.saxutils import escape

XMLNS = "http://mns.aliyuncs.com/doc/v1/"
_DECL = '<?xml version="1.0" encoding="UTF-8"?>\n'

Fields = Sequence[tuple[str, str]]


class MalformedXML(ValueError):
    """The request body is not the XML the operation expects."""


def parse_fields(body: bytes, root: str) -> dict[str, str]:
    """Flat child elements of ``<root>`` as a dict (empty body gives an empty dict)."""
    element = _root(body, root)
    return {} if element is None else {_local(child.tag): (child.text or "") for child in element}


def parse_list(body: bytes, root: str, item: str) -> list[dict[str, str]]:
    """``<root><item>...</item>...</root>`` as a list of flat dicts."""
    element = _root(body, root)
    if element is None:
        raise MalformedXML(f"the body must be a <{root}> document")
    out = []
    for child in element:
        if _local(child.tag) == item:
            out.append({_local(grand.tag): (grand.text or "") for grand in child})
    return out


def parse_text_list(body: bytes, root: str, item: str) -> list[str]:
    """``<root><item>text</item>...</root>`` as a list of strings."""
    element = _root(body, root)
    if element is None:
        raise MalformedXML(f"the body must be a <{root}> document")
    return [(child.text or "") for child in element if _local(child.tag) == item]


def root_name(body: bytes) -> str:
    """The local name of the document element ('' for an empty body)."""
    element = _root(body, None)
    return "" if element is None else _local(element.tag)


def render(root: str, fields: Fields) -> bytes:
    """``<root xmlns=...>`` with one child per (name, text) pair."""
    return (_DECL + f'<{root} xmlns="{XMLNS}">' + _children(fields) + f"</{root}>").encode("utf-8")


def render_list(root: str, item: str, rows: Iterable[Fields], extra: Fields = ()) -> bytes:
    """``<root><item>..</item>...</root>`` followed by ``extra`` children (e.g. NextMarker)."""
    inner = "".join(f"<{item}>{_children(row)}</{item}>" for row in rows)
    return (_DECL + f'<{root} xmlns="{XMLNS}">' + inner + _children(extra) + f"</{root}>").encode("utf-8")


def render_error(code: str, message: str, request_id: str, host_id: str) -> bytes:
    return render("Error", [("Code", code), ("Message", message), ("RequestId", request_id), ("HostId", host_id)])


def _children(fields: Fields) -> str:
    return "".join(f"<{name}>{escape(value)}</{name}>" for name, value in fields)


def _root(body: bytes, root: str | None) -> ElementTree.Element | None:
    if not body.strip():
        return None
    try:
        element = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        raise MalformedXML("The XML you provided was not well-formed.") from None
    if root is not None and _local(element.tag) != root:
        raise MalformedXML(
            f"The XML you provided did not validate against our published schema, cause by {_local(element.tag)}."
        )
    return element


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]
