"""Resolvers for intrinsic functions: conditions, and a stack's parameters plus resource state."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .errors import ResolutionError
from .intrinsics import NO_VALUE, NO_VALUE_NAME, UNKNOWN, Evaluator

#: Looks up a deployed resource: (physical id, Data), or None when it is not deployed yet.
ResourceLookup = Callable[[str], "tuple[str | None, dict[str, Any]] | None"]


def pseudo_parameters(stack_name: str, stack_id: str, region: str, account_id: str) -> dict[str, Any]:
    """The ALIYUN:: pseudo parameters a stack exposes."""
    return {
        "ALIYUN::StackName": stack_name,
        "ALIYUN::StackId": stack_id,
        "ALIYUN::Region": region,
        "ALIYUN::AccountId": account_id,
        "ALIYUN::TenantId": account_id,
        NO_VALUE_NAME: NO_VALUE,
    }


class ConditionTable:
    """Evaluates the Conditions section lazily, so conditions may refer to each other."""

    def __init__(self, expressions: Mapping[str, Any], values: Mapping[str, Any], mappings: Mapping[str, Any]) -> None:
        self._expressions = expressions
        self._values = values
        self._cache: dict[str, bool] = {}
        self._active: list[str] = []
        self._evaluator = Evaluator(self, mappings)

    def ref(self, name: str, path: str) -> Any:
        if name not in self._values:
            raise ResolutionError(path, f"Ref to unknown name '{name}'")
        return self._values[name]

    def get_att(self, resource: str, attribute: str, path: str) -> Any:
        raise ResolutionError(path, "Fn::GetAtt is not allowed in Conditions")

    def condition(self, name: str, path: str) -> bool:
        if name in self._cache:
            return self._cache[name]
        if name not in self._expressions:
            raise ResolutionError(path, f"unknown condition '{name}'")
        if name in self._active:
            cycle = self._active[self._active.index(name):] + [name]
            raise ResolutionError(f"Conditions.{name}", "circular condition: " + " -> ".join(cycle))
        self._active.append(name)
        try:
            value = self._evaluator.condition_value(self._expressions[name], f"Conditions.{name}")
        finally:
            self._active.pop()
        self._cache[name] = bool(value)
        return self._cache[name]

    def evaluate_all(self) -> tuple[dict[str, bool], list[str]]:
        errors: list[str] = []
        for name in self._expressions:
            try:
                self.condition(name, f"Conditions.{name}")
            except ResolutionError as exc:
                errors.append(str(exc))
        return dict(self._cache), errors


class StackResolver:
    """Ref / Fn::GetAtt / Fn::If for a stack; resources are read through `lookup`.

    `resources` maps every template resource to whether its Condition holds.

    With `dry_run`, references to resources that are not deployed yet evaluate to UNKNOWN,
    which lets the planner check everything that does not depend on providers up front.
    """

    def __init__(
        self,
        values: Mapping[str, Any],
        conditions: Mapping[str, bool],
        resources: Mapping[str, bool],
        lookup: ResourceLookup,
        dry_run: bool = False,
    ) -> None:
        self._values = values
        self._conditions = conditions
        self._resources = resources
        self._lookup = lookup
        self._dry_run = dry_run

    def ref(self, name: str, path: str) -> Any:
        if name in self._values:
            return self._values[name]
        if name in self._resources:
            return self._deployed(name, path)[0]
        raise ResolutionError(path, f"Ref to unknown name '{name}'")

    def get_att(self, resource: str, attribute: str, path: str) -> Any:
        if resource not in self._resources:
            raise ResolutionError(path, f"Fn::GetAtt of unknown resource '{resource}'")
        physical_id, data = self._deployed(resource, path)
        if physical_id is UNKNOWN:
            return UNKNOWN
        if attribute == "Outputs":
            return dict(data)
        if attribute not in data:
            keys = ", ".join(sorted(data)) or "none"
            raise ResolutionError(path, f"Fn::GetAtt: resource '{resource}' has no attribute '{attribute}' (Data keys: {keys})")
        return data[attribute]

    def condition(self, name: str, path: str) -> bool:
        if name not in self._conditions:
            raise ResolutionError(path, f"unknown condition '{name}'")
        return self._conditions[name]

    def _deployed(self, name: str, path: str) -> tuple[Any, dict[str, Any]]:
        if not self._resources[name]:
            raise ResolutionError(path, f"resource '{name}' is not part of the stack because its Condition is false")
        found = self._lookup(name)
        if found is None or found[0] is None:
            if self._dry_run:
                return UNKNOWN, {}
            raise ResolutionError(path, f"resource '{name}' has not been created")
        return found[0], found[1]
