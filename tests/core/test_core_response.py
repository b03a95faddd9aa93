import json

from crhelper.constants import CREATE_FAILED_MARKER, MAX_RESPONSE_BYTES
from crhelper.request import parse_request
from crhelper.response import (
    clean_reason,
    data_problem,
    default_physical_id,
    encode,
    failed_body_from_raw,
    fit_to_limit,
    physical_id_problem,
    success_body,
)
from crhelper.testing import make_event


def _request(**kw):
    return parse_request(make_event("Create", "Custom::X", **kw))


def test_default_physical_id_is_deterministic_unique_and_bounded():
    a = _request(stack_id="s-1", request_id="r-1", logical_resource_id="A")
    assert default_physical_id(a) == default_physical_id(_request(stack_id="s-1", request_id="r-1", logical_resource_id="A"))
    assert default_physical_id(a) != default_physical_id(_request(stack_id="s-1", request_id="r-1", logical_resource_id="B"))
    assert default_physical_id(a) != default_physical_id(_request(stack_id="s-1", request_id="r-2", logical_resource_id="A"))
    long = _request(stack_name="ü" * 300, logical_resource_id="L" * 200)
    assert len(default_physical_id(long).encode()) <= 255
    assert physical_id_problem(default_physical_id(long)) is None


def test_physical_id_rules_measure_utf8_bytes():
    assert physical_id_problem("é" * 127) is None  # 254 bytes
    assert "256 bytes" in physical_id_problem("é" * 128)
    assert physical_id_problem("") == "PhysicalResourceId must not be empty"
    assert "must be a string" in physical_id_problem(12)


def test_oversize_data_becomes_failed_naming_the_largest_keys():
    request = _request()
    body = success_body(request, "id-1", {"small": "x", "big": "y" * 3000, "bigger": "z" * 3500})
    fitted = fit_to_limit(body)
    assert fitted["Status"] == "FAILED"
    assert "Data" not in fitted
    assert fitted["Reason"].index("bigger") < fitted["Reason"].index("big (")
    assert len(encode(fitted)) <= MAX_RESPONSE_BYTES


def test_size_is_measured_in_utf8_bytes_not_characters():
    request = _request()
    # 1,400 three-byte characters: 4,200 bytes but only 1,400 characters
    body = success_body(request, "id-1", {"text": "汉" * 1400})
    assert len(json.dumps(body, ensure_ascii=False)) < MAX_RESPONSE_BYTES
    assert fit_to_limit(body)["Status"] == "FAILED"
    small = success_body(request, "id-1", {"text": "汉" * 1000})
    assert fit_to_limit(small) == small


def test_long_reason_keeps_its_head_and_fits():
    raw = make_event("Create", "Custom::X", stack_id="S" * 1500, request_id="R" * 1500)
    body = failed_body_from_raw(raw, "HEAD " + "x" * 5000)
    assert body["Reason"].startswith("HEAD ")
    assert body["Reason"].endswith("[truncated]")
    assert len(encode(body)) <= MAX_RESPONSE_BYTES
    assert body["PhysicalResourceId"] == CREATE_FAILED_MARKER


def test_reason_folds_control_characters_and_masks_secrets():
    assert clean_reason("bad\n\tthing\x1b[31m with hunter2", ["hunter2"]) == "bad thing [31m with ***"
    assert clean_reason("   ") == "unknown error"


def test_data_must_be_a_json_object_and_names_the_bad_key():
    assert data_problem([1]) == "Data must be a JSON object (a mapping), got list"
    assert "Data['when']" in data_problem({"ok": 1, "when": object()})
    assert "Data key 3" in data_problem({3: "x"})
    assert data_problem({"nested": {"a": [1, 2.5, None, True]}}) is None


def test_the_4096_byte_boundary_with_multibyte_data():
    request = _request()
    base = success_body(request, "id-1", {"t": ""})
    room = MAX_RESPONSE_BYTES - len(encode(base))
    exact = success_body(request, "id-1", {"t": "汉" * (room // 3) + "é" * ((room % 3) // 2) + "a" * ((room % 3) % 2)})
    assert len(encode(exact)) == MAX_RESPONSE_BYTES
    assert fit_to_limit(exact) == exact
    over = success_body(request, "id-1", {"t": exact["Data"]["t"] + "a"})
    assert len(encode(over)) == MAX_RESPONSE_BYTES + 1
    assert fit_to_limit(over)["Status"] == "FAILED"


def test_physical_id_boundary_is_255_utf8_bytes():
    assert physical_id_problem("é" * 127 + "a") is None
    assert physical_id_problem("汉" * 85) is None
    assert physical_id_problem("汉" * 85 + "a") == "PhysicalResourceId is 256 bytes; ROS allows at most 255"


def test_encode_escapes_only_lone_surrogates():
    assert encode({"a": "汉\udc80"}) == '{"a":"汉\\udc80"}'.encode()
    assert json.loads(encode({"a": "汉\udc80"})) == {"a": "汉\udc80"}
