"""Alibaba Cloud credentials, read once the same way everywhere and never shown.

Function Compute hands a function its role's STS credentials in `context.credentials` and in the
`ALIBABA_CLOUD_*` environment variables; locally the same variables name an access key. The
context wins (it is refreshed per invocation), then the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

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


def resolve(context: object | None = None, env: Mapping[str, str] | None = None) -> Credentials | None:
    """The FC context's credentials, else the environment's; None when neither has any."""
    return Credentials.from_context(context) or Credentials.from_env(env)


def missing_hint() -> str:
    """What to tell a user who has no credentials configured."""
    return f"set {KEY_ID_ENV} and {KEY_SECRET_ENV} (and {TOKEN_ENV} for STS credentials)"
