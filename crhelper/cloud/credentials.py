"""Alibaba Cloud credentials, read once the same way everywhere and never shown.

Function Compute hands a function its role's STS credentials in `context.credentials` and in the
`ALIBABA_CLOUD_*` environment variables; locally the same variables name an access key. The
context wins (it is refreshed per invocation), then the environment.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..errors import ExplainedError

KEY_ID_ENV = "ALIBABA_CLOUD_ACCESS_KEY_ID"
KEY_SECRET_ENV = "ALIBABA_CLOUD_ACCESS_KEY_SECRET"
TOKEN_ENV = "ALIBABA_CLOUD_SECURITY_TOKEN"
REGION_ENV = "ALIBABA_CLOUD_REGION_ID"


@dataclass(frozen=True)
class Credentials:
    """An access key (with an STS token when temporary). The repr shows the key id only."""

    access_key_id: str
    access_key_secret: str = field(repr=False)
    security_token: str = field(default="", repr=False)

    @property
    def temporary(self) -> bool:
        return bool(self.security_token)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Credentials | None":
        """From `ALIBABA_CLOUD_ACCESS_KEY_ID` / `_SECRET` / `ALIBABA_CLOUD_SECURITY_TOKEN`; None when unset."""
        env = os.environ if env is None else env
        key_id, secret = env.get(KEY_ID_ENV, ""), env.get(KEY_SECRET_ENV, "")
        if not key_id or not secret:
            return None
        return cls(key_id, secret, env.get(TOKEN_ENV, ""))

    @classmethod
    def from_context(cls, context: object | None) -> "Credentials | None":
        """From an FC context's `credentials` (FC 2.0 and 3.0 runtimes name the fields alike)."""
        given = getattr(context, "credentials", None) if context is not None else None
        key_id = getattr(given, "access_key_id", None) or getattr(given, "accessKeyId", None)
        secret = getattr(given, "access_key_secret", None) or getattr(given, "accessKeySecret", None)
        if not key_id or not secret:
            return None
        token = getattr(given, "security_token", None) or getattr(given, "securityToken", None) or ""
        return cls(str(key_id), str(secret), str(token))


class AcceptedKeys:
    """Mixin of the local cloud endpoints (ROS, ECS, Function Compute): the access keys a caller may
    sign with, and the first of them, which the endpoint's own clients and tests use.

    `access_keys` maps AccessKey IDs to secrets, `credentials` adds whole keys (an STS one with its
    token); with neither, one pair is generated, as a fresh endpoint needs no configuration."""

    _keys: dict[str, Credentials]
    _primary: Credentials

    def _accept_keys(self, access_keys: Mapping[str, str] | None, credentials: Sequence[Credentials] = ()) -> None:
        if access_keys is None and not credentials:
            access_keys = {"LTAI" + secrets.token_hex(8): secrets.token_urlsafe(24)}
        self._keys = {ak: Credentials(ak, secret) for ak, secret in (access_keys or {}).items()}
        self._keys.update({c.access_key_id: c for c in credentials})
        if not self._keys:
            raise ValueError("access_keys must hold at least one AccessKey ID -> secret pair")
        self._primary = next(iter(self._keys.values()))

    @property
    def access_key_id(self) -> str:
        return self._primary.access_key_id

    @property
    def access_key_secret(self) -> str:
        return self._primary.access_key_secret


def resolve(context: object | None = None, env: Mapping[str, str] | None = None) -> Credentials | None:
    """The FC context's credentials, else the environment's; None when neither has any."""
    return Credentials.from_context(context) or Credentials.from_env(env)


def missing_hint() -> str:
    """What to tell a user who has no credentials configured."""
    return f"set {KEY_ID_ENV} and {KEY_SECRET_ENV} (and {TOKEN_ENV} for STS credentials)"


PROFILE_ENV = "ALIBABA_CLOUD_PROFILE"
#: Profile modes that hold a key (the `aliyun` CLI also knows RamRoleArn, EcsRamRole, ... which need a call to STS).
PROFILE_MODES = ("AK", "StsToken")


class ProfileError(ExplainedError, ValueError):
    """A profile that cannot be used: `problem` says why, `next_step` what to do."""


@dataclass(frozen=True)
class Profile:
    """One profile of the `aliyun` CLI's `~/.aliyun/config.json`: its key and default region."""

    name: str
    credentials: Credentials
    region: str = ""


def default_config_file() -> str:
    return os.path.join(os.path.expanduser("~"), ".aliyun", "config.json")


def load_profile(name: str | None = None, path: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None) -> Profile | None:
    """The profile `name` (else $ALIBABA_CLOUD_PROFILE, else the file's `current`) of the `aliyun` CLI's
    config file; None when no file exists and no name was asked for. ProfileError names what is wrong."""
    import json

    env = os.environ if env is None else env
    file = os.fspath(path) if path is not None else default_config_file()
    wanted = name or env.get(PROFILE_ENV) or None
    try:
        with open(file, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        if wanted is None:
            return None
        raise ProfileError(f"profile {wanted!r} asked for, but {file} does not exist",
                           "run `aliyun configure --profile NAME`, or set "
                           f"{KEY_ID_ENV} and {KEY_SECRET_ENV}") from None
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{file} is not readable JSON ({exc.__class__.__name__})",
                           "fix or re-create it with `aliyun configure`") from None
    profiles = document.get("profiles") if isinstance(document, dict) else None
    if not isinstance(profiles, list):
        raise ProfileError(f"{file} has no `profiles` list", "re-create it with `aliyun configure`")
    wanted = wanted or str(document.get("current") or "default")
    found = next((p for p in profiles if isinstance(p, dict) and p.get("name") == wanted), None)
    if found is None:
        names = ", ".join(str(p.get("name")) for p in profiles if isinstance(p, dict)) or "none"
        raise ProfileError(f"no profile {wanted!r} in {file} (profiles: {names})",
                           "give --profile one of those, or run `aliyun configure --profile NAME`")
    mode = str(found.get("mode") or "AK")
    if mode not in PROFILE_MODES:
        raise ProfileError(f"profile {wanted!r} has mode {mode}, which needs a call to STS",
                           f"use a profile of mode {' or '.join(PROFILE_MODES)}, or set {KEY_ID_ENV} and "
                           f"{KEY_SECRET_ENV} (and {TOKEN_ENV}) from `aliyun sts AssumeRole`")
    key_id, secret = str(found.get("access_key_id") or ""), str(found.get("access_key_secret") or "")
    token = str(found.get("sts_token") or "") if mode == "StsToken" else ""
    if not key_id or not secret or (mode == "StsToken" and not token):
        raise ProfileError(f"profile {wanted!r} in {file} lacks access_key_id, access_key_secret"
                           + (" or sts_token" if mode == "StsToken" else ""),
                           f"run `aliyun configure --profile {wanted}`")
    return Profile(wanted, Credentials(key_id, secret, token), str(found.get("region_id") or ""))
