"""Turns a template plus parameter values into a deployable plan, or every error found (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..constants import MAX_ROS_TIMEOUT
from ..logs import redact_url
from ..servicetoken import VALID_FORMS, ServiceTokenError, parse_service_token
from .cloud_registry import cloud_token, cloud_type
from .cloud_schema import CloudType, value_errors
from .errors import ResolutionError, TemplateValidationError
from .graph import DependencyGraph
from .intrinsics import NO_VALUE, UNKNOWN, Evaluator, references
from .masking import mask, secret_values
from .parameters import resolve_parameters
from .resolver import ConditionTable, ResourceLookup, StackResolver, pseudo_parameters
from .template import OutputSpec, ResourceSpec, Template

DEFAULT_TIMEOUT = 60.0
MIN_TIMEOUT = 1.0
MAX_TIMEOUT = MAX_ROS_TIMEOUT
#: `web[sync]` tokens ignore Timeout; ROS waits for the HTTP reply for a fixed 10 s (spec §3.4).
SYNC_WEB_TIMEOUT = 10.0
MAX_SERVICE_TOKEN_CHARS = 512


@dataclass(frozen=True)
class StackIdentity:
    name: str
    stack_id: str
    region: str
    account_id: str


@dataclass(frozen=True)
class Plan:
    """What an operation deploys: values, conditions, active resources and their order."""

    template: Template
    identity: StackIdentity
    values: dict[str, Any]
    conditions: dict[str, bool]
    resources: dict[str, ResourceSpec]
    outputs: dict[str, OutputSpec]
    graph: DependencyGraph

    @property
    def no_echo(self) -> list[str]:
        return [name for name, spec in self.template.parameters.items() if spec.no_echo]

    def parameter_values(self) -> dict[str, Any]:
        return {name: self.values[name] for name in self.template.parameters}

    @cached_property
    def _active(self) -> dict[str, bool]:
        """Which template resources this plan creates: built once, not per evaluation (O(n²) on big stacks)."""
        return {name: name in self.resources for name in self.template.resources}

    def resolver(self, lookup: ResourceLookup, dry_run: bool = False) -> StackResolver:
        return StackResolver(self.values, self.conditions, self._active, lookup, dry_run=dry_run)

    def evaluate(self, expr: Any, path: str, lookup: ResourceLookup, dry_run: bool = False) -> Any:
        return Evaluator(self.resolver(lookup, dry_run), self.template.mappings).evaluate(expr, path)


def build_plan(template: Template, given: Mapping[str, Any], identity: StackIdentity) -> Plan:
    """Check parameter values, conditions, references and order; raise with all problems."""
    parameter_values, errors = resolve_parameters(template.parameters, given)
    values = {
        **pseudo_parameters(identity.name, identity.stack_id, identity.region, identity.account_id),
        **parameter_values,
    }
    if errors:
        raise TemplateValidationError(errors)
    conditions, condition_errors = ConditionTable(template.conditions, values, template.mappings).evaluate_all()
    # Evaluation errors may quote a value (a bad Timeout, a map key) that came from a NoEcho parameter.
    secrets = secret_values(parameter_values, [n for n, p in template.parameters.items() if p.no_echo])
    if condition_errors:
        raise TemplateValidationError([mask(error, secrets) for error in condition_errors])

    active = {n: r for n, r in template.resources.items() if r.condition is None or conditions[r.condition]}
    outputs = {n: o for n, o in template.outputs.items() if o.condition is None or conditions[o.condition]}
    dependencies: dict[str, set[str]] = {}
    for name, spec in active.items():
        path = f"Resources.{name}"
        refs = references([spec.service_token, spec.timeout, spec.parameters], conditions)
        used = {r for r in refs if r in template.resources}
        for target in sorted((used | set(spec.depends_on)) - set(active)):
            condition = template.resources[target].condition
            errors.append(f"{path}: depends on resource '{target}', which is not created because Condition '{condition}' is false")
        dependencies[name] = (used | set(spec.depends_on)) & set(active)
    graph = DependencyGraph(dependencies)
    cycle = graph.find_cycle()
    if cycle:
        errors.append("cycle: " + " -> ".join(cycle))

    plan = Plan(template, identity, values, conditions, active, outputs, graph)
    if not errors:
        errors.extend(_dry_run_errors(plan))
    if errors:
        raise TemplateValidationError([mask(error, secrets) for error in errors])
    return plan


def _no_resources(_: str) -> None:
    return None


def _dry_run_errors(plan: Plan) -> list[str]:
    """Evaluate everything with resource values UNKNOWN: catches bad maps, indexes, timeouts."""
    errors: list[str] = []
    for name, spec in plan.resources.items():
        try:
            resource_settings(plan, spec, _no_resources, dry_run=True)
        except ResolutionError as exc:
            errors.append(str(exc))
    for name, output in plan.outputs.items():
        try:
            plan.evaluate(output.value, f"Outputs.{name}.Value", _no_resources, dry_run=True)
        except ResolutionError as exc:
            errors.append(str(exc))
    return errors


def resource_settings(plan: Plan, spec: ResourceSpec, lookup: ResourceLookup, dry_run: bool = False) -> tuple[Any, Any, Any]:
    """(ServiceToken, Timeout seconds, Parameters) for one resource, checked against ROS rules.

    For a local ALIYUN:: resource: (its `local-cloud:` token, DEFAULT_TIMEOUT, its Properties with
    ROS's defaults filled in), every value checked against its type's declaration."""
    path = f"Resources.{spec.logical_id}.Properties"
    local_type = cloud_type(spec.type)
    if local_type is not None:
        return cloud_token(spec.type), DEFAULT_TIMEOUT, _cloud_properties(plan, spec, local_type, lookup, dry_run)
    token = plan.evaluate(spec.service_token, f"{path}.ServiceToken", lookup, dry_run)
    if token is not UNKNOWN and (not isinstance(token, str) or not token or len(token) > MAX_SERVICE_TOKEN_CHARS):
        raise ResolutionError(f"{path}.ServiceToken", f"must be a non-empty string of at most {MAX_SERVICE_TOKEN_CHARS} characters")
    if token is not UNKNOWN:
        _check_token_form(token, f"{path}.ServiceToken")
    timeout: Any = DEFAULT_TIMEOUT
    if spec.timeout is not None:
        timeout = plan.evaluate(spec.timeout, f"{path}.Timeout", lookup, dry_run)
        if timeout is NO_VALUE:  # `Fn::If [c, {Ref: ALIYUN::NoValue}, ...]` removes the property
            timeout = DEFAULT_TIMEOUT
        elif timeout is not UNKNOWN:
            timeout = _check_timeout(timeout, f"{path}.Timeout")
    if isinstance(token, str) and _is_sync_web(token):
        timeout = SYNC_WEB_TIMEOUT
    parameters = plan.evaluate(spec.parameters, f"{path}.Parameters", lookup, dry_run)
    if parameters is None or parameters is NO_VALUE:
        parameters = {}
    if parameters is not UNKNOWN and not isinstance(parameters, dict):
        raise ResolutionError(f"{path}.Parameters", f"must be a map, got {type(parameters).__name__}")
    return token, timeout, parameters


def _cloud_properties(plan: Plan, spec: ResourceSpec, local_type: CloudType, lookup: ResourceLookup, dry_run: bool) -> Any:
    path = f"Resources.{spec.logical_id}.Properties"
    properties = plan.evaluate(spec.parameters, path, lookup, dry_run)
    if properties is UNKNOWN:
        return properties
    properties = {k: v for k, v in (properties or {}).items() if v is not NO_VALUE}
    errors = value_errors(local_type, properties, path)
    if errors:
        where, _, message = errors[0].partition(": ")
        raise ResolutionError(where, "; ".join([message, *errors[1:]]))
    return local_type.with_defaults(properties)


def http_configs(plan: Plan) -> dict[str, dict[str, Any]]:
    """LogicalResourceId -> evaluated HttpConfig, for active resources that set one.

    HttpConfig is a ROS-side setting, not part of the request, so the deliverer gets it from here.
    It may use parameters and pseudo parameters (typically `SignKey: {Ref: NoEchoKey}`), not other
    resources' attributes."""
    configs: dict[str, dict[str, Any]] = {}
    for name, spec in plan.resources.items():
        if spec.http_config is None:
            continue
        path = f"Resources.{name}.Properties.HttpConfig"
        value = plan.evaluate(spec.http_config, path, _no_resources)
        if not isinstance(value, dict):
            raise ResolutionError(path, "must be a map with ContentType, Headers and/or SignKey; locally it may use only parameters")
        configs[name] = value
    return configs


def service_tokens(plan: Plan) -> dict[str, tuple[str, ...]]:
    """ServiceToken -> logical ids, for the tokens known before anything runs (not those that
    come from another resource's attributes)."""
    tokens: dict[str, list[str]] = {}
    for name, spec in plan.resources.items():
        token = plan.evaluate(spec.service_token, f"Resources.{name}.Properties.ServiceToken", _no_resources, dry_run=True)
        if isinstance(token, str):
            tokens.setdefault(token, []).append(name)
    return {token: tuple(names) for token, names in tokens.items()}


def shown_token(token: str) -> str:
    """A ServiceToken for messages: a `web:` URL's query string may hold a credential."""
    head, sep, url = token.partition(":")
    return f"{head}{sep}{redact_url(url)}" if head.startswith("web") and sep else token


def _check_token_form(token: str, path: str) -> None:
    """A token no route can reach fails before anything is sent (a provider never hears of it),
    naming the rule it breaks and every form that works."""
    try:
        parse_service_token(token)
    except ServiceTokenError as exc:
        raise ResolutionError(
            path, f"'{shown_token(token)}' is not a valid ServiceToken: {exc.problem}; valid forms: " + "; ".join(VALID_FORMS)
        ) from None


def _check_timeout(value: Any, path: str) -> float:
    try:
        seconds = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        seconds = None
    if seconds is None or not MIN_TIMEOUT <= seconds <= MAX_TIMEOUT:
        raise ResolutionError(path, f"must be a number of seconds from {MIN_TIMEOUT:g} to {MAX_TIMEOUT:g}, got {value!r}")
    return seconds


def _is_sync_web(token: str) -> bool:
    head = token.split(":", 1)[0]
    if not head.startswith("web[") or not head.endswith("]"):
        return False
    return "sync" in (option.strip() for option in head[4:-1].split(","))
