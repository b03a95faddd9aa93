"""Which functions and topics the stacks of one emulator home hold: what lets a stack use a
deployment template's outputs (another stack's function ARN or MNS topic) with no binding.

Pure lookups over `ResourceRecord`s (and one reading helper over a `StackStore`); `CloudSession`
learns what they find and runs it, while the stack that made it keeps owning it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..servicetoken import FcFunctionToken, MnsTopicToken, ServiceTokenError, parse_service_token
from .cloud_registry import is_cloud_token

if TYPE_CHECKING:
    from .model import ResourceRecord, StackRecord
    from .state import StackStore

FC2_FUNCTION, FC3_FUNCTION = "ALIYUN::FC::Function", "ALIYUN::FC3::Function"
FC2_SERVICE, FC2_TRIGGER, FC3_TRIGGER = "ALIYUN::FC::Service", "ALIYUN::FC::Trigger", "ALIYUN::FC3::Trigger"
FC3_ASYNC = "ALIYUN::FC3::AsyncInvokeConfig"
FunctionKey = tuple[str, str]  # (service or "", function)
#: The resource types `function_with_settings`, `topic_trigger` and `live_tokens` read: a lookup over
#: the stacks of a home loads only these (a stack of 200 custom resources then costs one row's read).
FUNCTION_TYPES = (FC2_FUNCTION, FC3_FUNCTION, FC2_SERVICE, FC3_ASYNC)
TRIGGER_TYPES = (FC2_TRIGGER, FC3_TRIGGER)
TOKEN_TYPES = (FC2_FUNCTION, FC3_FUNCTION, FC2_TRIGGER, FC3_TRIGGER)


def function_key(type_name: str, properties: Mapping[str, Any]) -> FunctionKey:
    service = str(properties["ServiceName"]) if type_name == FC2_FUNCTION else ""
    return service, str(properties["FunctionName"])


def trigger_function(properties: Mapping[str, Any]) -> FunctionKey:
    """The function a trigger belongs to (FC 2.0 triggers name their service)."""
    return str(properties.get("ServiceName") or ""), str(properties["FunctionName"])


def trigger_topic(type_name: str, properties: Mapping[str, Any]) -> str | None:
    """The MNS topic of an mns_topic trigger (from its SourceArn), else None."""
    if type_name not in (FC2_TRIGGER, FC3_TRIGGER) or properties.get("TriggerType") != "mns_topic":
        return None
    found = re.fullmatch(r"acs:mns:[^:]*:[^:]*:/?topics/([^/]+)", str(properties.get("SourceArn") or ""))
    return found.group(1) if found else None


def live_resources(record: "StackRecord") -> list["ResourceRecord"]:
    """The stack's local ALIYUN:: resources that exist (created and not deleted)."""
    return [r for r in record.resources.values() if r.physical_id is not None and is_cloud_token(r.service_token)
            and r.status != "DELETE_COMPLETE"]


def function_with_settings(live: Iterable["ResourceRecord"], key: FunctionKey) -> list["ResourceRecord"]:
    """The function `key` among `live` with what it needs to run (its FC 2.0 service, its FC 3.0
    async configuration), the function last; empty when it is not there."""
    resources = list(live)
    function = [r for r in resources if r.resource_type in (FC2_FUNCTION, FC3_FUNCTION)
                and function_key(r.resource_type, r.properties) == key]
    if not function:
        return []
    settings = [r for r in resources
                if (r.resource_type == FC2_SERVICE and key[0] and r.properties.get("ServiceName") == key[0])
                or (r.resource_type == FC3_ASYNC and not key[0] and r.properties.get("FunctionName") == key[1])]
    return settings + function[:1]


def topic_trigger(live: Iterable["ResourceRecord"], topic: str) -> "ResourceRecord | None":
    return next((r for r in live if trigger_topic(r.resource_type, r.properties) == topic), None)


def live_tokens(records: Iterable["StackRecord"]) -> set[str]:
    """The ServiceTokens (canonical form) of the live functions of `records`, and of the MNS topics
    their live mns_topic triggers listen to: tokens `CloudSession` can serve with no binding."""
    found = set()
    for record in records:
        for resource in live_resources(record):
            if resource.resource_type in (FC2_FUNCTION, FC3_FUNCTION):
                service, function = function_key(resource.resource_type, resource.properties)
                found.add(FcFunctionToken(record.region, record.account_id, function, service or None).format())
            topic = trigger_topic(resource.resource_type, resource.properties)
            if topic is not None:
                found.add(MnsTopicToken(record.region, record.account_id, topic).format())
    return found


def canonical_token(token: str) -> str | None:
    """`token` in the form `live_tokens` gives, or None when it names no FC function or MNS topic."""
    try:
        parsed = parse_service_token(token)
    except ServiceTokenError:
        return None
    return parsed.format() if isinstance(parsed, (FcFunctionToken, MnsTopicToken)) else None


def stack_records(store: "StackStore", region: str | None = None, account_id: str | None = None,
                  resource_types: Collection[str] | None = None) -> list["StackRecord"]:
    """Every stack of `store` (of one region and account when given), with only the resources of
    `resource_types` when given."""
    found = []
    for name in store.names():
        record = store.load(name, resource_types=resource_types)
        if record is not None and (region is None or (record.region, record.account_id) == (region, account_id)):
            found.append(record)
    return found


def home_records(region: str, account_id: str, resource_types: Collection[str] | None = None) -> list["StackRecord"]:
    """The stacks of this machine's emulator home ($CRHELPER_HOME), of one region and account (with
    only the resources of `resource_types` when given)."""
    from .. import paths
    from .state import StackStore

    store = StackStore(paths.home())
    try:
        return stack_records(store, region, account_id, resource_types)
    finally:
        store.close()
