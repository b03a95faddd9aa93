"""Build the boto3 S3 client for a store URL (OSS speaks the S3 protocol).

Real OSS needs: signature v4 (``signature=s3v4``, the default), virtual-hosted addressing
(``addressing=virtual``, the default; OSS rejects path-style requests), the S3-compatible endpoint
``https://s3.oss-<region>.aliyuncs.com`` (``-internal`` inside the region), and no default request
checksums or ``aws-chunked`` uploads (newer botocore adds them; OSS does not accept them), so
checksums are sent only when an operation requires them. With ``dialect=oss`` every PutObject
also carries ``x-oss-forbid-overwrite: true``, OSS's own create-only switch.

Credentials: ALIBABA_CLOUD_ACCESS_KEY_ID / ALIBABA_CLOUD_ACCESS_KEY_SECRET /
ALIBABA_CLOUD_SECURITY_TOKEN (what Function Compute injects) first, otherwise boto3's usual chain.
boto3 is imported here, lazily, so importing the store package stays cheap on cold start.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Mapping

from ..cloud.credentials import REGION_ENV, Credentials
from .url import S3Settings

FORBID_OVERWRITE_HEADER = "x-oss-forbid-overwrite"
CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 30

_session_lock = threading.Lock()
_session: Any = None


def _forbid_overwrite(request: Any, **_: Any) -> None:
    """botocore `before-sign` hook: added before signing so SigV4 covers the header."""
    request.headers[FORBID_OVERWRITE_HEADER] = "true"


def boto3_credentials(credentials: Credentials | None) -> dict[str, str]:
    """Alibaba Cloud credentials as boto3 keyword arguments; empty means boto3's default chain."""
    if credentials is None:
        return {}
    kwargs = {"aws_access_key_id": credentials.access_key_id, "aws_secret_access_key": credentials.access_key_secret}
    if credentials.security_token:
        kwargs["aws_session_token"] = credentials.security_token
    return kwargs


def credentials_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment's Alibaba Cloud credentials as boto3 keyword arguments."""
    return boto3_credentials(Credentials.from_env(env))


def resolve_region(settings: S3Settings, env: Mapping[str, str]) -> str | None:
    """URL first, then the Alibaba/FC region variables, else boto3 decides."""
    return settings.region or env.get(REGION_ENV) or env.get("FC_REGION") or None


def resolve_endpoint(settings: S3Settings, region: str | None) -> str | None:
    """Explicit endpoint, else OSS's S3-compatible public endpoint for the region."""
    if settings.endpoint:
        return settings.endpoint
    if settings.dialect == "oss" and region:
        return f"https://s3.oss-{region}.aliyuncs.com"
    return None


def make_client(settings: S3Settings, env: Mapping[str, str] | None = None) -> Any:
    """A configured boto3 S3 client; with dialect=oss the forbid-overwrite hook is registered."""
    import boto3
    from botocore.config import Config

    env = os.environ if env is None else env
    region = resolve_region(settings, env)
    config = Config(
        signature_version=settings.signature,
        s3={"addressing_style": settings.addressing},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
        retries={"mode": "standard", "max_attempts": 4},
    )
    global _session
    with _session_lock:  # boto3 sessions are not thread-safe; one per process loads models once
        if _session is None:
            _session = boto3.session.Session()
        client = _session.client(
            "s3",
            endpoint_url=resolve_endpoint(settings, region),
            region_name=region,
            config=config,
            **credentials_from_env(env),
        )
    if settings.dialect == "oss":
        client.meta.events.register("before-sign.s3.PutObject", _forbid_overwrite)
    return client


def client_for_url(url: str, setting: str, env: Mapping[str, str] | None = None) -> tuple[Any, S3Settings]:
    """A provider's own OSS/S3 store named by `url` in its setting `setting` (parameters as in
    CRHELPER_STORE): (the boto3 client, the parsed settings). ValueError names `setting` and the
    rule, never the query (it may carry a key)."""
    from .url import StoreConfigError, parse_store_url

    try:
        settings = parse_store_url(url)
    except StoreConfigError as exc:
        raise ValueError(str(exc).replace("CRHELPER_STORE", setting, 1)) from None
    if not isinstance(settings, S3Settings):
        raise ValueError(f"{setting}: not an s3:// URL")
    return make_client(settings, os.environ if env is None else env), settings
