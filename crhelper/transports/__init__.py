"""Ways a ROS request reaches a provider besides a plain function invocation.

`crhelper.transports.http` is the `web:` endpoint (WSGI), `crhelper.transports.signature` the
HttpConfig.SignKey algorithm. Names are imported on first use so that importing one transport on a
Function Compute cold start does not load the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "wsgi_app": "http",
    "HttpApp": "http",
    "EndpointConfig": "http_config",
    "EndpointConfigError": "http_config",
    "sign": "signature",
    "signed_body": "signature",
    "verify": "signature",
    "SignatureError": "signature",
    "SignatureVariant": "signature",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'crhelper.transports' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
