"""Template text that would exhaust whoever walks it is refused where every path reads templates
(`crhelper stack`, the ROS API, the console): crhelper/emulator/document.py."""

from __future__ import annotations

import time

import pytest

from crhelper.emulator.document import MAX_TEMPLATE_VALUES, expanded_values, parse_document
from crhelper.emulator.template import TemplateValidationError, load_template


def laughs(levels: int) -> str:
    lines = ['ROSTemplateFormatVersion: "2015-09-01"', "Metadata:", '  a: &a ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"  {chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(levels)]
    return "\n".join([*lines, "Resources: {}"]) + "\n"


def test_an_alias_bomb_is_refused_at_once_naming_the_count_and_the_limit() -> None:
    started = time.monotonic()
    with pytest.raises(TemplateValidationError) as refused:
        load_template(laughs(7))  # 9**8 values from about 600 bytes
    assert time.monotonic() - started < 2
    assert f"more than the {MAX_TEMPLATE_VALUES}" in str(refused.value) and "aliases expand to" in str(refused.value)


def test_ordinary_anchors_still_load_and_are_counted_once_per_node() -> None:
    text = laughs(2)  # 9**3 values: well under the limit
    assert 9 ** 3 < expanded_values(text) < MAX_TEMPLATE_VALUES
    assert parse_document(text)["Metadata"]["c"][0][0] == ["x"] * 9
