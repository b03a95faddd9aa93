"""Alibaba ECS as every ECS backend reaches it (the boot-group and the AppCenter `ecs` backends):
where (region, endpoint, protocol), how long one action may retry, the official
`alibabacloud-ecs20140526` client built with explicit credentials, and SDK errors as one line.

Standard library only at import: the SDK (about a second to import) loads in `sdk_client`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from crhelper.cloud.credentials import REGION_ENV, Credentials
from crhelper.cloud.poll import PollSettings
from crhelper.config import env_float
from crhelper.errors import Failure

ENDPOINT_ENV = "CRHELPER_ECS_ENDPOINT"
ECS_REGION_ENV = "CRHELPER_ECS_REGION"
CALL_TIMEOUT_ENV = "CRHELPER_ECS_CALL_TIMEOUT"
_LOOPBACK = ("127.", "localhost", "[::1]", "::1")


@dataclasses.dataclass(frozen=True)
class EcsSettings:
    """Where and how this backend talks to ECS. `endpoint` is `host:port` without scheme (the SDK's
    `Config.endpoint`); `call_timeout` bounds the retries of one action; `poll` is the back-off of
    those retries and of the Cloud Assistant result polling."""

    region: str
    endpoint: str
    protocol: str = "https"
    call_timeout: float = 30.0
    poll: PollSettings = PollSettings()
    connect_timeout_ms: int = 5_000
    read_timeout_ms: int = 15_000
    #: DescribeInstances MaxResults when expanding a Tag group (ECS allows up to 100).
    page_size: int = 100

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, region: str | None = None,
                 on_fc: bool | None = None, endpoint: str | None = None) -> "EcsSettings":
        """Region: `region` (the resource's), else CRHELPER_ECS_REGION, ALIBABA_CLOUD_REGION_ID, FC_REGION.
        Endpoint: `endpoint` (the resource's), else CRHELPER_ECS_ENDPOINT (`host:port` or a URL; a bare
        loopback address means http), else `ecs-vpc.<region>.aliyuncs.com` on Function Compute,
        `ecs.<region>.aliyuncs.com` elsewhere."""
        env = os.environ if env is None else env
        region = region or env.get(ECS_REGION_ENV) or env.get(REGION_ENV) or env.get("FC_REGION") or ""
        if not region:
            raise Failure(f"the ecs backend needs a region: give the resource's region or set {ECS_REGION_ENV} "
                          f"(or {REGION_ENV})")
        if on_fc is None:
            on_fc = bool(env.get("FC_FUNCTION_NAME") or env.get("FC_FUNC_CODE_PATH"))
        given = (endpoint or env.get(ENDPOINT_ENV) or "").strip()
        if given:
            endpoint, protocol = _split_endpoint(given)
        else:
            endpoint, protocol = f"ecs{'-vpc' if on_fc else ''}.{region}.aliyuncs.com", "https"
        return cls(region=region, endpoint=endpoint, protocol=protocol,
                   call_timeout=env_float(env, CALL_TIMEOUT_ENV, 30.0, minimum=0.1), poll=PollSettings.from_env(env))


def _split_endpoint(given: str) -> tuple[str, str]:
    scheme, sep, rest = given.partition("://")
    if sep:
        if scheme not in ("http", "https"):
            raise Failure(f"{ENDPOINT_ENV} must be host:port or an http(s) URL, got scheme {scheme!r}")
        return rest.rstrip("/"), scheme
    return given.rstrip("/"), "http" if given.startswith(_LOOPBACK) else "https"


def sdk_client(settings: EcsSettings, credentials: Credentials) -> Any:
    """An `alibabacloud_ecs20140526` Client for `settings`, the credentials given explicitly (the
    SDK's default chain, whose last step asks the metadata service at 100.100.100.200, never runs)."""
    from alibabacloud_ecs20140526.client import Client
    from alibabacloud_tea_openapi.models import Config

    return Client(Config(access_key_id=credentials.access_key_id, access_key_secret=credentials.access_key_secret,
                         security_token=credentials.security_token or None, endpoint=settings.endpoint,
                         protocol=settings.protocol, region_id=settings.region,
                         connect_timeout=settings.connect_timeout_ms, read_timeout=settings.read_timeout_ms))


def sdk_error(exc: Exception, action: str, subject: str, endpoint: str) -> str:
    """An SDK exception as one line naming the action and the instance; never a traceback or a key."""
    kind = type(exc).__name__
    code = getattr(exc, "code", None)
    if kind == "UnretryableException" or (code is None and getattr(exc, "status_code", None) is None):
        inner = getattr(exc, "inner_exception", None) or exc
        text = str(inner).splitlines()[0][:300] if str(inner) else type(inner).__name__
        return f"ECS {action} of {subject}: could not reach the endpoint {endpoint} ({kind}: {text})"
    data = getattr(exc, "data", None)
    message = (data.get("Message") if isinstance(data, dict) else None) or getattr(exc, "message", "") or ""
    request_id = getattr(exc, "request_id", None) or (data.get("RequestId") if isinstance(data, dict) else None)
    parts = [f"ECS {action} of {subject} failed: {code} (HTTP {getattr(exc, 'status_code', '?')})"]
    if message:
        parts.append(f": {message}")
    retry_after = getattr(exc, "retry_after", None)
    if retry_after:
        parts.append(f"; retry after {retry_after} s")
    if request_id:
        parts.append(f" [request {request_id}]")
    return "".join(parts)
