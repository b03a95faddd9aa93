"""Pure rules: handler specs, routes, header parsing, registry validation."""
from __future__ import annotations

import base64

import pytest

from crhelper.local.fc_protocol import (
    FcApiError, InvocationTarget, log_tail_header, parse_async_delay, parse_invocation_path,
    timeout_error,
)
from crhelper.local.fc_registry import FunctionRegistry, FunctionSpec, split_handler
from crhelper.local.fc_worker import encode_result


@pytest.mark.parametrize("spec, expected", [
    ("index.handler", ("index", "handler")),
    ("pkg.mod:attr", ("pkg.mod", "attr")),
    ("pkg.sub.mod.handler", ("pkg.sub.mod", "handler")),
])
def test_split_handler(spec: str, expected: tuple[str, str]) -> None:
    assert split_handler(spec) == expected


@pytest.mark.parametrize("spec", ["handler", "mod:", ":attr", "a b.c", "mod:a.b", "1mod.h"])
def test_split_handler_rejects(spec: str) -> None:
    with pytest.raises(ValueError, match="handler"):
        split_handler(spec)


def test_parse_invocation_path() -> None:
    assert parse_invocation_path("/2016-08-15/services/s.prod/functions/f/invocations") == \
        InvocationTarget("s", "f", "prod")
    assert parse_invocation_path("/2016-08-15/services/s/functions/f/invocations") == \
        InvocationTarget("s", "f", None)
    assert parse_invocation_path("/2016-08-15/proxy/s/f/") is None
    assert parse_invocation_path("/2023-03-30/functions/f/invocations") is None


@pytest.mark.parametrize("value, expected", [(None, 0), ("", 0), ("0", 0), ("3600", 3600),
                                             (" 20 ", 20)])
def test_parse_async_delay(value: str | None, expected: int) -> None:
    assert parse_async_delay(value) == expected


def test_parse_async_delay_rejects_out_of_range() -> None:
    with pytest.raises(FcApiError) as excinfo:
        parse_async_delay("3601")
    assert excinfo.value.status == 400 and "between 0 and 3600" in excinfo.value.message


def test_log_tail_header_keeps_last_4096_bytes() -> None:
    log = bytes(range(256)) * 20
    assert base64.b64decode(log_tail_header(log)) == log[-4096:]


def test_timeout_error_message() -> None:
    assert timeout_error(3) == {"errorMessage": "Function timed out after 3 seconds"}
    assert timeout_error(0.5) == {"errorMessage": "Function timed out after 0.5 seconds"}


def test_encode_result() -> None:
    assert encode_result(b"\x00") == b"\x00"
    assert encode_result("é") == "é".encode()
    assert encode_result(None) == b""
    assert encode_result({"a": [1]}) == b'{"a": [1]}'


@pytest.mark.parametrize("kwargs, field", [
    ({"service": "bad name"}, "service"),
    ({"function": ""}, "function"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": 86401}, "timeout"),
    ({"memory": 0}, "memory"),
    ({"env": {"A": 1}}, "env"),
    ({"initializer": "nope"}, "handler"),
])
def test_function_spec_validation(kwargs: dict, field: str) -> None:
    base = {"service": "s", "function": "f", "handler": "index.handler"}
    with pytest.raises(ValueError, match=field):
        FunctionSpec(**{**base, **kwargs})


def test_registry_distinguishes_missing_service_and_function() -> None:
    registry = FunctionRegistry()
    registry.add(FunctionSpec("s", "f", "index.handler"))
    assert registry.lookup("s", "f").handler == "index.handler"
    with pytest.raises(FcApiError, match="FunctionNotFound"):
        registry.lookup("s", "g")
    with pytest.raises(FcApiError, match="ServiceNotFound"):
        registry.lookup("t", "f")
