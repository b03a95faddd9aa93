"""Template text that would exhaust whoever walks it is refused where every path reads templates
(`crhelper stack`, the ROS API, the console): crhelper/emulator/document.py."""

from __future__ import annotations

import time

import pytest

from crhelper.emulator.document import MAX_FLOW_DEPTH, MAX_TEMPLATE_VALUES, expanded_values, parse_document
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


def test_deep_flow_nesting_is_refused_before_the_yaml_scanner_reads_ahead_over_it() -> None:
    """PyYAML's scanner is quadratic in unclosed `[` (100,000 took 1.4-5.5 s of CPU before failing)."""
    started = time.process_time()
    with pytest.raises(TemplateValidationError) as refused:
        load_template("Resources: " + "[" * 100_000)
    assert time.process_time() - started < 0.5
    assert f"nested too deeply to be read (more than {MAX_FLOW_DEPTH} levels" in str(refused.value)
    nested = parse_document("A: " + "[" * 200 + "]" * 200)["A"]  # deep, but as deep as PyYAML reads
    for _ in range(199):
        (nested,) = nested
    assert nested == []
    assert parse_document('A: "[[[ quoted ]]]"\nB: [1, {c: [2]}]') == {"A": "[[[ quoted ]]]", "B": [1, {"c": [2]}]}
