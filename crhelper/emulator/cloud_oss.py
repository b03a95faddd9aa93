"""ALIYUN::OSS::Bucket: properties, checks and attributes (pure; deploy.md §1.7)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .cloud_schema import BOOLEAN, MAP, CloudType, Prop


def _bucket_attributes(region: str, account: str, physical_id: str, props: Mapping[str, Any]) -> dict[str, Any]:
    return {"Name": physical_id, "Arn": f"acs:oss:*:{account}:{physical_id}",
            "DomainName": f"{physical_id}.oss-{region}.aliyuncs.com",
            "InternalDomainName": f"{physical_id}.oss-{region}-internal.aliyuncs.com"}


def _bucket_extra(props: Mapping[str, Any], path: str) -> list[str]:
    errors = []
    sse = props.get("ServerSideEncryptionConfiguration")
    if isinstance(sse, dict) and sse.get("SSEAlgorithm") not in ("KMS", "AES256", "SM4"):
        errors.append(f"{path}.ServerSideEncryptionConfiguration.SSEAlgorithm: required, one of KMS, AES256, SM4")
    versioning = props.get("VersioningConfiguration")
    if isinstance(versioning, dict) and versioning.get("Status") not in ("Enabled", "Suspended"):
        errors.append(f"{path}.VersioningConfiguration.Status: must be Enabled or Suspended")
    lifecycle = props.get("LifecycleConfiguration")
    rules = lifecycle.get("Rule") if isinstance(lifecycle, dict) else None
    for index, rule in enumerate(rules if isinstance(rules, list) else []):
        if not isinstance(rule, dict) or "Prefix" not in rule:
            errors.append(f"{path}.LifecycleConfiguration.Rule[{index}].Prefix: required")
    return errors


OSS_BUCKET = CloudType(
    "ALIYUN::OSS::Bucket",
    {"BucketName": Prop(required=True, editable=False, low=3, high=63, pattern=r"[a-z0-9][a-z0-9-]*[a-z0-9]",
                        rule="must use only lowercase letters, digits and '-', starting and ending with a letter or digit"),
     "AccessControl": Prop(choices=("private", "public-read", "public-read-write"), default="private"),
     "DeletionForce": Prop(BOOLEAN, default=False), "VersioningConfiguration": Prop(MAP),
     "ServerSideEncryptionConfiguration": Prop(MAP), "LifecycleConfiguration": Prop(MAP),
     "StorageClass": Prop(choices=("Standard", "IA", "Archive", "ColdArchive"), editable=False),
     "RedundancyType": Prop(choices=("LRS", "ZRS"), editable=False), "BlockPublicAccess": Prop(BOOLEAN),
     "Policy": Prop(MAP), "Tags": Prop(MAP), "CORSConfiguration": Prop(MAP), "LoggingConfiguration": Prop(MAP),
     "RefererConfiguration": Prop(MAP), "WebsiteConfiguration": Prop(MAP), "EnableOssHdfsService": Prop(BOOLEAN)},
    ("Name", "Arn", "DomainName", "InternalDomainName"),
    extra=_bucket_extra, physical_id=lambda p: str(p["BucketName"]), attributes=_bucket_attributes,
)
TYPES = (OSS_BUCKET,)
