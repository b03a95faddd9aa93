"""Typed ResourceProperties: validation through the handler's annotation, pydantic imported only if used."""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import re
import types
import typing
from typing import Any, Callable

from .config import ReadOnly
from .errors import PropertiesError

_RAW_TYPES = (dict, collections.abc.Mapping, collections.abc.MutableMapping, typing.Any, inspect.Parameter.empty)


class HandlerShape(ReadOnly):
    """How to call a handler: the properties type and how many positional arguments it takes."""

    __slots__ = ("model", "arity")
    model: Any  # None means: pass the raw dict
    arity: int

    def __init__(self, model: Any, arity: int) -> None:
        self._init(model=model, arity=arity)


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


def _pydantic_problems(exc: Any, field_prefix: str) -> list[tuple[str, str]]:
    """(field, rule) for every error of a pydantic ValidationError, without the input."""
    problems = []
    for error in exc.errors(include_input=False, include_url=False):
        location = ".".join(str(item) for item in error.get("loc", ()))
        problems.append((f"{field_prefix}.{location}" if location else field_prefix, str(error.get("msg", "invalid"))))
    return problems


def _properties_error(field_prefix: str, problems: list[tuple[str, str]]) -> PropertiesError:
    reason = "; ".join(f"{name}: {rule}" for name, rule in problems)
    return PropertiesError(f"invalid {field_prefix}: {reason}", tuple(dict.fromkeys(name for name, _ in problems)))


def is_msgspec_struct(model: Any) -> bool:
    """msgspec Structs validate in microseconds and import in ~25 ms, a fifth of pydantic's cold start."""
    return isinstance(model, type) and hasattr(model, "__struct_fields__") and type(model).__module__.startswith("msgspec")


_MISSING_FIELD = r"^Object missing required field `(?P<name>[^`]+)`(?: - at `(?P<path>[^`]+)`)?$"
_AT_PATH = r"^(?P<message>.*?) - at `(?P<path>[^`]+)`$"
#: msgspec quotes the offending value in these; our errors never echo input.
_ECHOED_VALUE = r"^(Invalid enum value) .*$"


def _msgspec_problem(message: str, field_prefix: str) -> tuple[str, str]:
    """`Expected `int`, got `str` - at `$.Times`` -> (`ResourceProperties.Times`, `Expected `int`, got `str``).

    The patterns are compiled (and cached by `re`) on the first invalid request, not at import."""
    missing = re.match(_MISSING_FIELD, message)
    if missing:
        path = (missing.group("path") or "$")[1:]
        return f"{field_prefix}{path}.{missing.group('name')}", "required field is missing"
    located = re.match(_AT_PATH, message)
    text, path = (located.group("message"), located.group("path")[1:]) if located else (message, "")
    return f"{field_prefix}{path}", re.sub(_ECHOED_VALUE, r"\1", text)


def _msgspec_error(message: str, field_prefix: str) -> str:
    """`Expected `int`, got `str` - at `$.Times`` -> `ResourceProperties.Times: Expected `int`, got `str``."""
    name, rule = _msgspec_problem(message, field_prefix)
    return f"{name}: {rule}"


def _validate_msgspec(model: Any, raw: dict[str, Any], field_prefix: str) -> Any:
    import msgspec

    try:
        return msgspec.convert(raw, model, strict=False)
    except msgspec.ValidationError as exc:
        raise _properties_error(field_prefix, [_msgspec_problem(str(exc), field_prefix)]) from None


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
        raise _properties_error(field_prefix, _pydantic_problems(exc, field_prefix)) from None


@functools.lru_cache(maxsize=256)
def _adapter(model: Any) -> Any:
    """Building a TypeAdapter is costly; one per annotation type."""
    from pydantic import TypeAdapter

    return TypeAdapter(model)


class Checked(ReadOnly):
    """Properties validated leniently: the value for the handler and, when it failed the model, why."""

    __slots__ = ("value", "problem")
    value: Any
    problem: PropertiesError | None

    def __init__(self, value: Any, problem: PropertiesError | None = None) -> None:
        self._init(value=value, problem=problem)


def validate_leniently(model: Any, raw: dict[str, Any], field_prefix: str) -> Checked:
    """Like validate(), for properties that were deployed before (Delete's, Update's old ones): a value
    today's model refuses must not block a delete or a rollback, so it comes back unvalidated, with the
    error a strict validation would have raised."""
    try:
        return Checked(validate(model, raw, field_prefix))
    except PropertiesError as problem:
        return Checked(unvalidated(model, raw), problem)


def unvalidated(model: Any, raw: dict[str, Any]) -> Any:
    """A best-effort `model` instance built from `raw` without running the model's validation.

    Each field is checked on its own: a value its type accepts is converted (`"2"` -> 2, a nested model
    built, a secret wrapped), any other is kept as sent; a nested model whose value fails is built the
    same way. Absent fields take their default; absent required ones stay unset (pydantic models and
    dataclasses: no attribute; msgspec Structs: `msgspec.UNSET`). Keys are read under their alias or
    rename. A model nothing can be built for (a post-init hook that refuses, an unknown kind of type)
    gives the raw mapping."""
    try:
        return _build(model, raw, 0)
    except Exception:  # the model's own construction hooks refused: hand over what was sent
        return dict(raw)


_MAX_MODEL_DEPTH = 8


class _FieldSpec(ReadOnly):
    """What building one field needs: where its value is, how to check it alone, what to do otherwise."""

    __slots__ = ("name", "keys", "annotation", "default")
    name: str
    keys: tuple[str, ...]  # where the value may be in the raw mapping, in order
    annotation: Any  # checked with pydantic (or msgspec for Structs), Annotated constraints included
    default: Callable[[], Any] | None  # None: required

    def __init__(self, name: str, keys: tuple[str, ...], annotation: Any, default: Callable[[], Any] | None) -> None:
        self._init(name=name, keys=keys, annotation=annotation, default=default)


def _build(model: Any, raw: Any, depth: int) -> Any:
    if not isinstance(raw, collections.abc.Mapping) or depth > _MAX_MODEL_DEPTH:
        return raw
    specs = _field_specs(model)
    if specs is None:
        return dict(raw)
    values: dict[str, Any] = {}
    used: set[str] = set()
    for spec in specs:
        key = next((key for key in spec.keys if key in raw), None)
        if key is not None:
            used.add(key)
            values[spec.name] = _field_value(model, spec, raw[key], depth)
    extra = {key: value for key, value in raw.items() if key not in used}
    return _construct(model, specs, values, extra, raw)


def _field_value(model: Any, spec: _FieldSpec, value: Any, depth: int) -> Any:
    """The value as its field's type makes it, with the field's rules or else without them (`"99"` -> 99
    for an `int <= 10`, a short password still a SecretStr); a model built leniently; or as sent."""
    kind = _plain_type(spec.annotation)
    for annotation in dict.fromkeys((spec.annotation, _unannotated(spec.annotation))):
        try:
            if is_msgspec_struct(model):
                import msgspec

                return msgspec.convert(value, annotation, strict=False)
            return _adapter(annotation).validate_python(value)
        except Exception:  # refused (or not checkable alone): try the next, then keep it unvalidated
            continue
    if kind is not None and _field_specs(kind) is not None:
        return _build(kind, value, depth + 1)
    return value


def _unannotated(annotation: Any) -> Any:
    """`X` from `Annotated[X, rules...]`."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _plain_type(annotation: Any) -> Any:
    """`X` from `X`, `Annotated[X, ...]`, `X | None`; None when that is not one class."""
    annotation = _unannotated(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        annotation = members[0] if len(members) == 1 else None
    return annotation if isinstance(annotation, type) else None


@functools.lru_cache(maxsize=256)
def _field_specs(model: Any) -> tuple[_FieldSpec, ...] | None:
    """The fields of a model kind built field by field, or None for any other type."""
    if not isinstance(model, type):
        return None
    if is_msgspec_struct(model):
        return _msgspec_specs(model)
    if hasattr(model, "__pydantic_fields__"):  # pydantic models and pydantic dataclasses
        return _pydantic_specs(model)
    if dataclasses.is_dataclass(model):
        return _dataclass_specs(model)
    if _is_typeddict(model):
        hints = typing.get_type_hints(model, include_extras=True)
        return tuple(_FieldSpec(name, (name,), _unrequired(hint), None) for name, hint in hints.items())
    return None


def _is_typeddict(model: Any) -> bool:
    """typing's or typing_extensions' TypedDict (typing.is_typeddict knows only its own)."""
    return isinstance(model, type) and issubclass(model, dict) and hasattr(model, "__required_keys__")


def _msgspec_specs(model: Any) -> tuple[_FieldSpec, ...]:
    import msgspec

    specs: list[_FieldSpec] = []
    for info in msgspec.structs.fields(model):
        default: Callable[[], Any] | None = None
        if info.default is not msgspec.NODEFAULT:
            default = _returning(info.default)
        elif info.default_factory is not msgspec.NODEFAULT:
            default = info.default_factory
        specs.append(_FieldSpec(info.name, (info.encode_name, info.name), info.type, default))
    return tuple(specs)


def _pydantic_specs(model: Any) -> tuple[_FieldSpec, ...]:
    specs: list[_FieldSpec] = []
    for name, info in model.__pydantic_fields__.items():
        keys = [*_alias_names(info.validation_alias), *_alias_names(info.alias), name]
        annotation = typing.Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        default = None if info.is_required() else functools.partial(info.get_default, call_default_factory=True)
        specs.append(_FieldSpec(name, tuple(dict.fromkeys(keys)), annotation, default))
    return tuple(specs)


def _alias_names(alias: Any) -> list[str]:
    """The plain keys of an alias: a string, or the strings of an AliasChoices (paths are skipped)."""
    if isinstance(alias, str):
        return [alias]
    return [choice for choice in getattr(alias, "choices", ()) if isinstance(choice, str)]


def _dataclass_specs(model: Any) -> tuple[_FieldSpec, ...]:
    hints = typing.get_type_hints(model, include_extras=True)
    specs: list[_FieldSpec] = []
    for item in dataclasses.fields(model):
        annotation, default = hints.get(item.name, Any), item.default
        info: Any = default if hasattr(default, "get_default") and hasattr(default, "metadata") else None
        make: Callable[[], Any] | None
        if info is not None:  # `x: int = pydantic.Field(ge=1)`: its rules and its default
            annotation = typing.Annotated[(annotation, *info.metadata)] if info.metadata else annotation
            make = None if info.is_required() else functools.partial(info.get_default, call_default_factory=True)
        elif item.default_factory is not dataclasses.MISSING:
            make = item.default_factory
        else:
            make = None if default is dataclasses.MISSING else _returning(default)
        specs.append(_FieldSpec(item.name, (item.name,), annotation, make))
    return tuple(specs)


def _returning(value: Any) -> Callable[[], Any]:
    return lambda: value


def _unrequired(hint: Any) -> Any:
    """`X` from a TypedDict's `Required[X]` / `NotRequired[X]` (Python 3.11+, or typing_extensions)."""
    origin = typing.get_origin(hint)
    if origin is not None and getattr(origin, "_name", None) in ("Required", "NotRequired"):
        return typing.get_args(hint)[0]
    return hint


def _construct(model: Any, specs: tuple[_FieldSpec, ...], values: dict[str, Any], extra: dict[str, Any], raw: Any) -> Any:
    """An instance of `model` holding `values`, made without running its validation."""
    if _is_typeddict(model):
        by_key = {spec.keys[0]: values[spec.name] for spec in specs if spec.name in values}
        return {**raw, **by_key}
    if hasattr(model, "model_construct"):  # pydantic: defaults filled, extras kept where the model allows them
        return model.model_construct(_fields_set=set(values), **{**extra, **values})
    if is_msgspec_struct(model):
        import msgspec

        missing = {spec.name: msgspec.UNSET for spec in specs if spec.name not in values and spec.default is None}
        return model(**values, **missing)  # a Struct's __init__ checks no types
    instance = object.__new__(model)  # dataclasses: no __init__, no __post_init__
    for spec in specs:
        if spec.name in values:
            object.__setattr__(instance, spec.name, values[spec.name])
        elif spec.default is not None:
            object.__setattr__(instance, spec.name, spec.default())
    return instance


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
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):  # stdlib dataclasses typed by pydantic
        for item in dataclasses.fields(value):
            _collect(getattr(value, item.name, None), found, depth + 1)
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
