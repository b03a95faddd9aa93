"""Typed ResourceProperties: validation through the handler's annotation, pydantic imported only if used."""

from __future__ import annotations

import collections.abc
import functools
import inspect
import re
import typing
from dataclasses import dataclass
from typing import Any, Callable

from .errors import PropertiesError

_RAW_TYPES = (dict, collections.abc.Mapping, collections.abc.MutableMapping, typing.Any, inspect.Parameter.empty)


@dataclass(frozen=True)
class HandlerShape:
    """How to call a handler: the properties type and how many positional arguments it takes."""

    model: Any  # None means: pass the raw dict
    arity: int


def handler_shape(func: Callable[..., Any]) -> HandlerShape:
    """Read the first parameter's annotation (forward references resolved against the handler's module)."""
    params = [
        p for p in inspect.signature(func).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    has_var = any(p.kind is p.VAR_POSITIONAL for p in inspect.signature(func).parameters.values())
    if not params:
        return HandlerShape(None, 99 if has_var else 0)
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # unresolvable annotations: fall back to raw properties rather than failing every request
        hints = {}
    annotation = hints.get(params[0].name, params[0].annotation)
    origin = typing.get_origin(annotation) or annotation
    model = None if origin in _RAW_TYPES or annotation is None else annotation
    return HandlerShape(model, 99 if has_var else len(params))


def _format_errors(exc: Any, field_prefix: str) -> str:
    parts = []
    for error in exc.errors(include_input=False, include_url=False):
        location = ".".join(str(item) for item in error.get("loc", ()))
        name = f"{field_prefix}.{location}" if location else field_prefix
        parts.append(f"{name}: {error.get('msg', 'invalid')}")
    return "; ".join(parts)


def is_msgspec_struct(model: Any) -> bool:
    """msgspec Structs validate in microseconds and import in ~25 ms, a fifth of pydantic's cold start."""
    return isinstance(model, type) and hasattr(model, "__struct_fields__") and type(model).__module__.startswith("msgspec")


_MISSING_FIELD = re.compile(r"^Object missing required field `(?P<name>[^`]+)`(?: - at `(?P<path>[^`]+)`)?$")
_AT_PATH = re.compile(r"^(?P<message>.*?) - at `(?P<path>[^`]+)`$")
#: msgspec quotes the offending value in these; our errors never echo input.
_ECHOED_VALUE = re.compile(r"^(Invalid enum value) .*$")


def _msgspec_error(message: str, field_prefix: str) -> str:
    """`Expected `int`, got `str` - at `$.Times`` -> `ResourceProperties.Times: Expected `int`, got `str``."""
    missing = _MISSING_FIELD.match(message)
    if missing:
        path = (missing.group("path") or "$")[1:]
        return f"{field_prefix}{path}.{missing.group('name')}: required field is missing"
    located = _AT_PATH.match(message)
    text, path = (located.group("message"), located.group("path")[1:]) if located else (message, "")
    text = _ECHOED_VALUE.sub(r"\1", text)
    return f"{field_prefix}{path}: {text}"


def _validate_msgspec(model: Any, raw: dict[str, Any], field_prefix: str) -> Any:
    import msgspec

    try:
        return msgspec.convert(raw, model, strict=False)
    except msgspec.ValidationError as exc:
        raise PropertiesError(f"invalid {field_prefix}: {_msgspec_error(str(exc), field_prefix)}") from None


def validate(model: Any, raw: dict[str, Any], field_prefix: str) -> Any:
    """Turn raw properties into the handler's type; errors name fields and rules, never values."""
    if model is None:
        return raw
    if is_msgspec_struct(model):
        return _validate_msgspec(model, raw, field_prefix)
    from pydantic import ValidationError  # lazy: only providers that use models pay for it

    try:
        if hasattr(model, "model_validate"):
            return model.model_validate(raw)
        return _adapter(model).validate_python(raw)
    except ValidationError as exc:
        raise PropertiesError(f"invalid {field_prefix}: {_format_errors(exc, field_prefix)}") from None


@functools.lru_cache(maxsize=256)
def _adapter(model: Any) -> Any:
    """Building a TypeAdapter is costly; one per annotation type."""
    from pydantic import TypeAdapter

    return TypeAdapter(model)


def secret_values(value: Any) -> list[str]:
    """Plain texts of every secret inside validated properties, to mask them in Reasons and logs:
    pydantic SecretStr/SecretBytes, and msgspec fields marked `Meta(extra={"secret": True})`."""
    found: list[str] = []
    _collect(value, found, depth=0)
    return found


def _collect(value: Any, found: list[str], depth: int) -> None:
    if depth > 8 or value is None or isinstance(value, (str, int, float, bool)):
        return
    secret = getattr(value, "get_secret_value", None)
    if callable(secret) and type(value).__name__ in ("SecretStr", "SecretBytes"):
        plain = secret()
        found.append(plain.decode("utf-8", "replace") if isinstance(plain, bytes) else str(plain))
        return
    if isinstance(value, dict):
        for item in value.values():
            _collect(item, found, depth + 1)
    elif isinstance(value, (list, tuple, set)):
        for item in value:
            _collect(item, found, depth + 1)
    elif hasattr(value, "__pydantic_fields__"):
        for name in value.__pydantic_fields__:
            _collect(getattr(value, name, None), found, depth + 1)
    elif is_msgspec_struct(type(value)):
        model: type = type(value)
        secret_fields = _msgspec_secret_fields(model)
        for name in value.__struct_fields__:
            item = getattr(value, name, None)
            if name in secret_fields and isinstance(item, (str, bytes)):
                found.append(item.decode("utf-8", "replace") if isinstance(item, bytes) else item)
            else:
                _collect(item, found, depth + 1)


@functools.lru_cache(maxsize=256)
def _msgspec_secret_fields(model: type) -> frozenset[str]:
    """Fields annotated `Annotated[str, msgspec.Meta(extra={"secret": True})]`."""
    hints = typing.get_type_hints(model, include_extras=True)
    secret = set()
    for name, hint in hints.items():
        for meta in getattr(hint, "__metadata__", ()):
            if (getattr(meta, "extra", None) or {}).get("secret"):
                secret.add(name)
    return frozenset(secret)
