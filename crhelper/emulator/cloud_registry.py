"""The ALIYUN:: resource types the stack emulator runs as local resources (deploy.md §1), by name.

The types are declared per service family (`cloud_fc`, `cloud_mns`, `cloud_oss`, `cloud_ram`, with
`cloud_schema`'s building blocks); every other ALIYUN:: type stays a validation error. A local
resource is recorded with a `local-cloud:<Type>` ServiceToken, which marks it as one the engine
applies itself rather than delivers.
"""

from __future__ import annotations

from typing import Any

from . import cloud_fc, cloud_mns, cloud_oss, cloud_ram
from .cloud_schema import CloudType

#: The ServiceToken the engine records for a local ALIYUN:: resource (it is never delivered).
CLOUD_TOKEN_PREFIX = "local-cloud:"

_TYPES: dict[str, CloudType] = {t.name: t for family in (cloud_fc, cloud_mns, cloud_oss, cloud_ram) for t in family.TYPES}


def cloud_type(name: str) -> CloudType | None:
    return _TYPES.get(name)


def supported_types() -> tuple[str, ...]:
    return tuple(sorted(_TYPES))


def cloud_token(type_name: str) -> str:
    return CLOUD_TOKEN_PREFIX + type_name


def is_cloud_token(token: Any) -> bool:
    return isinstance(token, str) and token.startswith(CLOUD_TOKEN_PREFIX)
