"""Scalars as text, one rule for every place that compares or shows a value as a string
(standard library only, cheap to import).

ROS parameters and AppCenter forms both compare values by their text: a template's
AllowedValues against a given value, a ``replace_policy`` ``src`` against a chosen one. JSON and
YAML give booleans and whole floats their own spelling, so ``True`` reads ``true`` and ``2.0``
reads ``2`` (the text a user wrote), whatever parsed it.
"""

from __future__ import annotations

from typing import Any


def scalar_text(value: Any) -> str:
    """`value` as the text a template author wrote: ``true``/``false``, ``2`` for ``2.0``, else ``str()``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
