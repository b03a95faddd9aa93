"""ALIYUN::RAM::Role / ManagedPolicy / AttachPolicyToRole: properties, policy checks, attributes
(pure; deploy.md §1.8). RAM is recorded, not enforced: what is checked is what RAM would refuse
(a trust policy without a principal, a statement without Effect/Action)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .cloud_fc import stable_id
from .cloud_schema import BOOLEAN, INTEGER, LIST, MAP, CloudType, Prop
from .intrinsics import UNKNOWN

PRINCIPAL_KINDS = ("Service", "RAM", "Federated")


def policy_errors(document: Any, path: str, *, trust: bool) -> list[str]:
    """What RAM refuses in a policy document; a trust policy's statements also need a Principal."""
    if document is UNKNOWN:
        return []
    if not isinstance(document, dict):
        return [f"{path}: must be a map with Version and Statement"]
    errors = []
    if "Version" in document and str(document["Version"]) != "1":
        errors.append(f"{path}.Version: must be '1', got {document['Version']!r}")
    statements = document.get("Statement")
    if not isinstance(statements, list) or not statements:
        return errors + [f"{path}.Statement: required, a non-empty list of statements"]
    for index, statement in enumerate(statements):
        where = f"{path}.Statement[{index}]"
        if statement is UNKNOWN:
            continue
        if not isinstance(statement, dict):
            errors.append(f"{where}: must be a map")
            continue
        if statement.get("Effect") not in ("Allow", "Deny", UNKNOWN):
            errors.append(f"{where}.Effect: must be Allow or Deny, got {statement.get('Effect')!r}")
        if not statement.get("Action"):
            errors.append(f"{where}.Action: required")
        if trust:
            principal = statement.get("Principal")
            if principal is UNKNOWN:
                continue
            if not isinstance(principal, dict) or not any(principal.get(k) for k in PRINCIPAL_KINDS):
                errors.append(f"{where}.Principal: required, a map with Service, RAM or Federated (e.g. "
                              "Service: [fc.aliyuncs.com])")
            elif unknown := [k for k in principal if k not in PRINCIPAL_KINDS]:
                errors.append(f"{where}.Principal.{unknown[0]}: unknown principal kind (allowed: {', '.join(PRINCIPAL_KINDS)})")
        elif not statement.get("Resource"):
            errors.append(f"{where}.Resource: required")
    return errors


def _role_extra(props: Mapping[str, Any], path: str) -> list[str]:
    errors = policy_errors(props.get("AssumeRolePolicyDocument", UNKNOWN), f"{path}.AssumeRolePolicyDocument", trust=True)
    policies = props.get("Policies")
    for index, policy in enumerate(policies if isinstance(policies, list) else []):
        where = f"{path}.Policies[{index}]"
        if not isinstance(policy, dict):
            errors.append(f"{where}: must be a map with PolicyName and PolicyDocument")
            continue
        name = policy.get("PolicyName")
        if name is None or (isinstance(name, str) and not 1 <= len(name) <= 128):
            errors.append(f"{where}.PolicyName: required, 1 to 128 characters")
        errors.extend(policy_errors(policy.get("PolicyDocument"), f"{where}.PolicyDocument", trust=False))
    attachments = props.get("PolicyAttachments")
    if isinstance(attachments, dict):
        for kind, limit in (("System", 20), ("Custom", 5)):
            names = attachments.get(kind, [])
            if isinstance(names, list) and len(names) > limit:
                errors.append(f"{path}.PolicyAttachments.{kind}: at most {limit} policies, got {len(names)}")
    return errors


def _managed_policy_extra(props: Mapping[str, Any], path: str) -> list[str]:
    if "PolicyDocumentUnchecked" in props:
        return []
    if "PolicyDocument" not in props:
        return [f"{path}.PolicyDocument: required (or PolicyDocumentUnchecked)"]
    return policy_errors(props["PolicyDocument"], f"{path}.PolicyDocument", trust=False)


def _role_attributes(region: str, account: str, physical_id: str, props: Mapping[str, Any]) -> dict[str, Any]:
    return {"Arn": f"acs:ram::{account}:role/{physical_id.lower()}", "RoleId": stable_id(account, "role", physical_id)[:19],
            "RoleName": physical_id}


RAM_ROLE = CloudType(
    "ALIYUN::RAM::Role",
    {"RoleName": Prop(required=True, editable=False, low=1, high=64), "AssumeRolePolicyDocument": Prop(MAP, required=True),
     "Policies": Prop(LIST), "PolicyAttachments": Prop(MAP), "MaxSessionDuration": Prop(INTEGER, low=3600, high=43200, default=3600),
     "DeletionForce": Prop(BOOLEAN, default=False), "IgnoreExisting": Prop(BOOLEAN, editable=False),
     "Description": Prop(high=1024, editable=False), "Tags": Prop(LIST, high=20)},
    ("Arn", "RoleId", "RoleName"),
    extra=_role_extra, physical_id=lambda p: str(p["RoleName"]), attributes=_role_attributes,
)
RAM_MANAGED_POLICY = CloudType(
    "ALIYUN::RAM::ManagedPolicy",
    {"PolicyName": Prop(required=True, editable=False, low=1, high=128), "PolicyDocument": Prop(MAP),
     "PolicyDocumentUnchecked": Prop(MAP), "Roles": Prop(LIST), "Users": Prop(LIST), "Groups": Prop(LIST),
     "Description": Prop(editable=False), "IgnoreExisting": Prop(BOOLEAN, editable=False)},
    ("PolicyName",),
    extra=_managed_policy_extra, physical_id=lambda p: str(p["PolicyName"]),
    attributes=lambda region, account, physical_id, props: {"PolicyName": physical_id},
)
RAM_ATTACH_POLICY_TO_ROLE = CloudType(
    "ALIYUN::RAM::AttachPolicyToRole",
    {"PolicyName": Prop(required=True, editable=False), "PolicyType": Prop(required=True, editable=False, choices=("System", "Custom")),
     "RoleName": Prop(required=True, editable=False)},
    (),
    physical_id=lambda p: f"{p['RoleName']}|{p['PolicyType']}|{p['PolicyName']}",
    attributes=lambda region, account, physical_id, props: {},
)
TYPES = (RAM_ROLE, RAM_MANAGED_POLICY, RAM_ATTACH_POLICY_TO_ROLE)
