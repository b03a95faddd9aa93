"""The SDK clients a deploy talks through, and FC's refusals turned into what to do next.

Credentials come the way the Alibaba SDKs and the `aliyun` CLI find them: a named profile
(`--profile`), else the ALIBABA_CLOUD_* environment, else the config file's current profile.
`endpoint` (host:port) points both SDKs at a local Function Compute over plain HTTP.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from ..cloud.credentials import REGION_ENV, Credentials, ProfileError, load_profile, missing_hint
from . import DeployError

ACCOUNT_ENV = "ALIBABA_CLOUD_ACCOUNT_ID"


@dataclass(frozen=True)
class Target:
    """Where to deploy and as whom."""

    credentials: Credentials
    region: str
    account_id: str | None
    endpoint: str | None  # host:port of a local FC (plain HTTP); None: Alibaba Cloud's


def resolve_target(*, profile: str | None, region: str | None, account_id: str | None, endpoint: str | None,
                   env: Mapping[str, str] | None = None, config_file: str | None = None) -> Target:
    """The credentials, region and account a deploy uses; DeployError naming what is missing."""
    env = os.environ if env is None else env
    try:
        found = load_profile(profile, config_file, env) if profile else None
        credentials = found.credentials if found else Credentials.from_env(env)
        if credentials is None:
            found = load_profile(None, config_file, env)
            credentials = found.credentials if found else None
    except ProfileError as exc:
        raise DeployError(exc.problem, exc.next_step) from None
    if credentials is None:
        raise DeployError("no Alibaba Cloud credentials found",
                          f"{missing_hint()}, or run `aliyun configure` (~/.aliyun/config.json) and give --profile")
    region = region or env.get(REGION_ENV) or (found.region if found else "")
    if not region:
        raise DeployError("no region given", f"give --region (e.g. cn-hangzhou), set {REGION_ENV}, "
                                             "or set region_id in the aliyun profile")
    if endpoint is not None and (":" not in endpoint or "/" in endpoint):
        raise DeployError(f"--endpoint {endpoint!r} is not host:port", "give it as 127.0.0.1:PORT")
    return Target(credentials, region, account_id or env.get(ACCOUNT_ENV) or None, endpoint)


def _cloud_host(target: Target) -> str:
    if target.account_id is None:
        raise DeployError("the account ID is needed for Function Compute's endpoint",
                          f"give --account-id (the console's account ID) or set {ACCOUNT_ENV}")
    return f"{target.account_id}.{target.region}.fc.aliyuncs.com"


def fc3_client(target: Target) -> Any:
    """An `alibabacloud_fc20230330` client for the target."""
    from alibabacloud_fc20230330.client import Client
    from alibabacloud_tea_openapi.models import Config

    creds = target.credentials
    config = Config(access_key_id=creds.access_key_id, access_key_secret=creds.access_key_secret,
                    security_token=creds.security_token or None, region_id=target.region,
                    endpoint=target.endpoint or _cloud_host(target),
                    protocol="http" if target.endpoint else "https", read_timeout=60_000, connect_timeout=10_000)
    return Client(config)


def fc2_client(target: Target) -> Any:
    """An `fc2.Client` for the target."""
    import fc2

    creds = target.credentials
    endpoint = f"http://{target.endpoint}" if target.endpoint else f"https://{_cloud_host(target)}"
    return fc2.Client(endpoint=endpoint, accessKeyID=creds.access_key_id, accessKeySecret=creds.access_key_secret,
                      securityToken=creds.security_token or "", Timeout=60)


_CREDENTIAL_CODES = ("InvalidAccessKeyId", "SignatureNotMatch", "SignatureDoesNotMatch", "InvalidSecurityToken",
                     "SecurityTokenExpired", "InvalidAccessKeyId.NotFound")


def explain(code: str, status: int | None, message: str, doing: str, region: str) -> DeployError:
    """FC's refusal of `doing` as a DeployError that says what to do next."""
    said = f"{doing}: FC answered {status or '?'} {code or 'error'}: {message}".rstrip(": ")
    if code in _CREDENTIAL_CODES or (status == 401):
        return DeployError(said, "check the access key (environment or profile): it is unknown, mistyped or expired")
    if status == 403:
        return DeployError(said, "the key is valid but not allowed: grant its RAM user AliyunFCFullAccess "
                                 "(or fc:* on these functions), or check the region and account ID "
                                 f"(region {region})")
    if status == 404:
        return DeployError(said, f"check --region ({region}) and --account-id: the endpoint may be another account's")
    return DeployError(said, "fix what FC names above, then deploy again")


def unreachable(endpoint: str, exc: BaseException, region: str) -> DeployError:
    return DeployError(f"cannot reach Function Compute at {endpoint}: {exc.__class__.__name__}",
                       f"check --region ({region}), --account-id, --endpoint and the network")
