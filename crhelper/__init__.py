"""crhelper for ROS: write Alibaba Cloud ROS custom-resource providers as small typed functions.

Imports nothing at all until a name is used (`crhelper.Provider` loads the request path), so the
CLI's `--help` and other light entries stay fast; pydantic and cloud SDKs load only when needed.
Long operations and ordered tiers: `crhelper.operations`, `crhelper.tiers`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import Failure, PropertiesError, RequestError
    from .logs import get_logger
    from .provider import Provider
    from .request import Request
    from .response import InProgress, Result

#: Public name -> the submodule that defines it.
_EXPORTS = {
    "Failure": "errors",
    "PropertiesError": "errors",
    "RequestError": "errors",
    "get_logger": "logs",
    "Provider": "provider",
    "Request": "request",
    "InProgress": "response",
    "Result": "response",
}

__all__ = ["Failure", "InProgress", "PropertiesError", "Provider", "Request", "RequestError", "Result", "get_logger"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'crhelper' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
