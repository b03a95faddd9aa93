"""Hides NoEcho parameter values wherever the emulator shows state (describe, events, outputs)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "******"


def secret_values(parameters: Mapping[str, Any], no_echo: Iterable[str]) -> list[str]:
    """Text forms of every NoEcho value, longest first so overlapping secrets mask fully."""
    secrets: set[str] = set()
    for name in no_echo:
        value = parameters.get(name)
        for leaf in _leaves(value):
            if leaf:
                secrets.add(leaf)
        if isinstance(value, (dict, list)):
            secrets.add(json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True))
            secrets.add(json.dumps(value, ensure_ascii=False))
    return sorted(secrets, key=len, reverse=True)


def _leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        if value and all(isinstance(i, str) for i in value):
            return [",".join(value), *value]
        return [leaf for item in value for leaf in _leaves(item)]
    if value is None:
        return []
    if isinstance(value, bool):
        return ["true" if value else "false"]
    return [str(value)]


def mask(value: Any, secrets: list[str]) -> Any:
    """A copy of `value` with every occurrence of a secret replaced by the mask."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {key: mask(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [mask(item, secrets) for item in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) in secrets:
        return MASK
    return value


def masked_parameters(parameters: Mapping[str, Any], no_echo: Iterable[str]) -> dict[str, Any]:
    """Parameter values for display: NoEcho ones replaced by the mask entirely."""
    hidden = set(no_echo)
    return {name: (MASK if name in hidden else value) for name, value in parameters.items()}
