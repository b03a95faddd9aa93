"""Typed operation state to JSON and back: a dataclass (the default), a pydantic model or a
msgspec Struct. The libraries do the work, imported only when a state is first written or read:
pydantic (a core dependency) for dataclasses and models, msgspec for Structs."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from typing import Any

from ..errors import PropertiesError
from ..properties import is_msgspec_struct, validate


class StateError(ValueError):
    """A state that cannot be written as JSON or read back into its type; the message names the field."""


def check_state_type(model: object) -> None:
    """Refuse, at decoration time, a state type the codec cannot round-trip."""
    if not isinstance(model, type):
        raise TypeError(f"state must be a class (a dataclass, a pydantic model or a msgspec Struct), got {model!r}")
    if not (dataclasses.is_dataclass(model) or hasattr(model, "model_validate") or is_msgspec_struct(model)):
        raise TypeError(f"state {model.__name__} must be a dataclass, a pydantic model or a msgspec Struct")


def required_fields(model: type) -> list[str]:
    """Fields without a default: a state needing them cannot be built with `model()`."""
    if dataclasses.is_dataclass(model):
        return [f.name for f in dataclasses.fields(model)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    fields = getattr(model, "model_fields", None)
    if isinstance(fields, dict):
        return [name for name, info in fields.items() if info.is_required()]
    defaults = len(getattr(model, "__struct_defaults__", ()))
    names = list(getattr(model, "__struct_fields__", ()))
    return names[: len(names) - defaults]


@functools.lru_cache(maxsize=128)
def _adapter(model: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(model)


class _NotPlain(Exception):
    """A value `_plain_json` leaves to pydantic."""


_JSON_SCALARS = (str, int, bool, type(None))


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind in _JSON_SCALARS:  # exact types: an Enum or other subclass is pydantic's to convert
        return value
    if kind is float:
        if not math.isfinite(value):
            raise _NotPlain
        return value
    if kind is list or kind is tuple:
        return [_plain(item) for item in value]
    if kind is dict:
        if not all(type(key) is str for key in value):
            raise _NotPlain
        return {key: _plain(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    raise _NotPlain


def _plain_json(value: Any) -> Any:
    """A dataclass made only of JSON values (the usual state), without pydantic: building its
    serialiser costs ~40 ms in a fresh Function Compute worker. One walk building fresh dicts and
    lists, with no `asdict` deep copy and no JSON round trip (a 50 KB state: 4 ms, was 24 ms). None
    when anything needs pydantic's conversions (datetimes, enums, bytes, nested models, NaN)."""
    try:
        return _plain(value)
    except (_NotPlain, RecursionError):
        return None


def dump(value: Any) -> Any:
    """The JSON value of a state (plain dicts, lists, strings, numbers)."""
    model: Any = type(value)
    try:
        if is_msgspec_struct(model):
            import msgspec

            raw = msgspec.to_builtins(value)
        elif hasattr(value, "model_dump"):
            raw = value.model_dump(mode="json")
        else:
            raw = _plain_json(value)
            if raw is not None:
                return raw  # JSON values only, by construction
            raw = _adapter(model).dump_python(value, mode="json")
        json.dumps(raw, allow_nan=False)
    except Exception as exc:  # pydantic's, msgspec's and json's errors all say which value
        raise StateError(f"{model.__name__} cannot be stored as JSON: {exc}") from None
    return raw


def load(model: type, raw: Any) -> Any:
    """Rebuild a state of `model` from its JSON value; StateError names the field and the rule."""
    if not isinstance(raw, dict):
        raise StateError(f"state: expected a JSON object for {model.__name__}, got {type(raw).__name__}")
    try:
        return validate(model, raw, "state")
    except PropertiesError as exc:
        raise StateError(exc.reason.removeprefix("invalid state: ")) from None
