"""Re-entry on Function Compute 3.0: the same delayed async self-invocation as on FC 2.0, sent
through the 3.0 API (`alibabacloud-fc20230330`, `POST /2023-03-30/functions/{name}/invocations`)
with `x-fc-async-delay` in the common headers (the SDK has no typed field for it).

Whether the real FC 3.0 honours the delay is not documented; the continuation stores its
not-before time, so an early re-entry re-schedules itself (`crhelper.lifecycle`).

An FC 3.0 function has no service: its context carries none (or one without a name) and its
environment no FC_SERVICE_NAME; that is how `fc_reentry` tells the versions apart.
"""

from __future__ import annotations

import os
from typing import Any, Mapping
from urllib.parse import urlsplit

from .reentry import FunctionComputeReentry

#: Seconds the SDK waits to connect and to read (the async invoke only enqueues).
CONNECT_TIMEOUT_MS = 5_000
READ_TIMEOUT_MS = 10_000


def service_name_of(context: object, env: Mapping[str, str]) -> str:
    service = getattr(context, "service", None)
    return str(getattr(service, "name", None) or env.get("FC_SERVICE_NAME") or "")


def is_fc3(context: object, env: Mapping[str, str] | None = None) -> bool:
    """True when the invocation runs as an FC 3.0 function: no service name anywhere."""
    return not service_name_of(context, os.environ if env is None else env)


class FunctionCompute3Reentry(FunctionComputeReentry):
    """Re-invoke this FC 3.0 function asynchronously after a delay (see the module docstring)."""

    needs_service = False

    def __init__(self, context: object, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        super().__init__(context, env)
        self.service_name = None
        function = getattr(context, "function", None)
        # python3.12 puts the qualifier on context.function; FC 3.0 has no service to carry it.
        self.qualifier = getattr(function, "qualifier", None) or env.get("FC_QUALIFIER") or None

    def _client(self) -> Any:
        with self._lock:
            if self._fc_client is None:
                from alibabacloud_fc20230330.client import Client  # lazy: only long operations on FC pay
                from alibabacloud_tea_openapi.models import Config

                credentials = self._credentials
                assert credentials is not None  # checked at construction
                parts = urlsplit(self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}")
                self._fc_client = Client(Config(
                    access_key_id=credentials.access_key_id, access_key_secret=credentials.access_key_secret,
                    security_token=credentials.security_token or None, endpoint=parts.netloc,
                    protocol=parts.scheme or "https", connect_timeout=CONNECT_TIMEOUT_MS, read_timeout=READ_TIMEOUT_MS,
                ))
            return self._fc_client

    def _send(self, payload: bytes, seconds: int) -> None:
        """The one SDK call: an async invocation with `x-fc-async-delay`."""
        from alibabacloud_fc20230330 import models
        from alibabacloud_tea_util.models import RuntimeOptions

        self._client().invoke_function_with_options(
            self.function_name,
            models.InvokeFunctionRequest(body=payload, qualifier=self.qualifier),
            models.InvokeFunctionHeaders(x_fc_invocation_type="Async",
                                         common_headers={"x-fc-async-delay": str(seconds)}),
            RuntimeOptions(),
        )


def fc_reentry(context: object, env: Mapping[str, str] | None = None) -> FunctionComputeReentry:
    """The FC re-entry for this invocation's version: 3.0 when it has no service, else 2.0."""
    if is_fc3(context, env):
        return FunctionCompute3Reentry(context, env)
    return FunctionComputeReentry(context, env)
