"""Resolving each resource's `HttpConfig` for `web:` delivery (the engine's Deliverer carries no slot for it).

HttpConfig is a ROS-side setting, not part of the request, so the deliverer gets it from here:
evaluated once per operation from the template and parameter values. It may use parameters and
pseudo parameters (typically `SignKey: {Ref: NoEchoKey}`), not other resources' attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .document import parse_document
from .errors import ResolutionError
from .plan import StackIdentity, build_plan
from .template import load_template

#: Stands in for the stack id, which the engine assigns only when the operation starts.
LOCAL_STACK_ID = "local-stack-id"


def _no_resources(_: str) -> None:
    return None


def resolve_http_configs(
    template_text: str, parameters: Mapping[str, Any], *, stack_name: str, region: str, account_id: str
) -> dict[str, dict[str, Any]]:
    """LogicalResourceId -> evaluated HttpConfig map, for active resources that set one."""
    document = parse_document(template_text)
    resources = document.get("Resources") if isinstance(document, dict) else None
    raw = {
        str(name): entry["Properties"]["HttpConfig"]
        for name, entry in (resources or {}).items()
        if isinstance(entry, dict) and isinstance(entry.get("Properties"), dict) and "HttpConfig" in entry["Properties"]
    }
    if not raw:
        return {}
    plan = build_plan(load_template(template_text), parameters, StackIdentity(stack_name, LOCAL_STACK_ID, region, account_id))
    configs: dict[str, dict[str, Any]] = {}
    for name, expression in raw.items():
        if name not in plan.resources:
            continue
        path = f"Resources.{name}.Properties.HttpConfig"
        value = plan.evaluate(expression, path, _no_resources)
        if not isinstance(value, dict):
            raise ResolutionError(path, "must be a map with ContentType, Headers and/or SignKey; locally it may use only parameters")
        configs[name] = value
    return configs
