"""Settings of the HTTP endpoint (`wsgi_app`, `crhelper serve`): modes, limits, auth and signatures.

Secrets (SignKey, bearer token, basic credentials) come from the environment, never from the
command line where `ps` would show them: CRHELPER_HTTP_SIGN_KEY, CRHELPER_HTTP_BEARER_TOKEN and
CRHELPER_HTTP_BASIC_AUTH (``user:password``). They stay out of `repr()`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Literal, Mapping

from .signature import DEFAULT_MAX_SKEW, DEFAULT_VARIANT, SignatureVariant

ENV_SIGN_KEY = "CRHELPER_HTTP_SIGN_KEY"
ENV_BEARER_TOKEN = "CRHELPER_HTTP_BEARER_TOKEN"
ENV_BASIC_AUTH = "CRHELPER_HTTP_BASIC_AUTH"

#: ROS waits at most 10 s for a `web[sync]` reply; we answer FAILED this long after receiving.
DEFAULT_SYNC_WITHIN = 8.5
ROS_SYNC_LIMIT = 10.0
DEFAULT_MAX_BODY = 64 * 1024


class EndpointConfigError(ValueError):
    """A setting of the HTTP endpoint is unusable; the message names the setting and the rule."""


@dataclass(frozen=True)
class EndpointConfig:
    """How one HTTP endpoint accepts ROS requests. Every field has a safe default."""

    #: Mode for paths not ending in `sync_suffix`: "async" for `web:` tokens, "sync" for `web[sync]:`.
    mode: Literal["async", "sync"] = "async"
    #: Requests to a path ending with this are answered in-band (sync mode) whatever `mode` says.
    sync_suffix: str = "/sync"
    #: Seconds after which a still-running sync handler is answered FAILED (ROS allows 10 s in all).
    sync_within: float = DEFAULT_SYNC_WITHIN
    #: Background handler threads (async mode) and how many accepted requests may wait for one: a memory
    #: bound (with `queue_bytes`), beyond which requests get `overload_status` without an answer. A plain
    #: `web:` Create is never retried by ROS, so this stays large: time, not room, is what refuses.
    workers: int = 8
    backlog: int = 10_000
    queue_bytes: int = 64 * 1024 * 1024
    #: Seconds an accepted async request may wait for a worker. One that waited longer is answered FAILED
    #: at its ResponseURL (once) instead of run after ROS stopped waiting (Timeout, 60 s by default).
    #: None: no limit.
    start_within: float | None = 30.0
    #: Async mode: run the handler before acknowledging (hosts that freeze after the reply, e.g. FC).
    inline: bool = False
    #: Status of the async acknowledgement; ROS documents only "2xx".
    ack_status: int = 200
    #: Status when the worker pool is full: 500, the status after which ROS documents a retry (idempotent
    #: Creates; Updates and Deletes may be repeated anyway). 503 is allowed for proxies that expect it.
    overload_status: int = 500
    max_body: int = DEFAULT_MAX_BODY
    #: The ServiceToken URL prefix this server is reached as (scheme://host[:port][/prefix]); the
    #: request path is appended. Required with a SignKey: signatures cover this URL, and the Host header
    #: cannot stand in for it (a client could name another endpoint sharing the key).
    public_url: str | None = None
    sign_key: str | None = field(default=None, repr=False)
    #: Names of HttpConfig.Headers that ROS signs, spelled as in the template.
    signed_headers: tuple[str, ...] = ()
    max_skew: float = DEFAULT_MAX_SKEW
    signature_variant: SignatureVariant = DEFAULT_VARIANT
    reject_replays: bool = True
    replay_cache_size: int = 10_000
    #: Requests to a path ending with this are MNS topic pushes (HTTP subscriptions): their RSA-SHA1
    #: signature is verified, they are acknowledged at once, and each message is handled in the pool.
    mns_suffix: str = "/mns"
    #: Hosts allowed to serve the MNS signing certificate (x-mns-signing-cert-url).
    mns_cert_hosts: tuple[str, ...] = ("mnstest.oss-cn-hangzhou.aliyuncs.com",)
    #: Whether the certificate URL must be https (off only for a local MNS endpoint).
    mns_require_https: bool = True
    bearer_token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        problems = []
        if self.mode not in ("async", "sync"):
            problems.append(f"mode: must be async or sync, got {self.mode!r}")
        if not 0 < self.sync_within < ROS_SYNC_LIMIT:
            problems.append(f"sync_within: must be above 0 and below ROS's {ROS_SYNC_LIMIT:g} s limit")
        if self.workers < 1:
            problems.append("workers: must be at least 1")
        if self.backlog < 0:
            problems.append("backlog: must not be negative")
        if self.queue_bytes < 0:
            problems.append("queue_bytes: must not be negative")
        if self.start_within is not None and self.start_within <= 0:
            problems.append("start_within: must be positive (or None for no limit)")
        if not 200 <= self.ack_status < 300:
            problems.append("ack_status: must be a 2xx status")
        if not 500 <= self.overload_status < 600:
            problems.append("overload_status: must be a 5xx status, so ROS may retry")
        if self.max_body < 1024:
            problems.append("max_body: must be at least 1024 bytes")
        if self.max_skew <= 0:
            problems.append("max_skew: must be positive")
        if self.public_url is not None and not self.public_url.startswith(("http://", "https://")):
            problems.append("public_url: must start with http:// or https://")
        if self.sign_key is not None and not 1 <= len(self.sign_key) <= 128:
            problems.append("sign_key: must be 1 to 128 characters (HttpConfig.SignKey rule)")
        if self.bearer_token is not None and not self.bearer_token:
            problems.append("bearer_token: must not be empty")
        if problems:
            raise EndpointConfigError("; ".join(problems))

    def with_secrets_from_env(self, env: Mapping[str, str] | None = None) -> "EndpointConfig":
        """A copy with SignKey and auth credentials read from the environment where they are set."""
        env = os.environ if env is None else env
        sign_key = env.get(ENV_SIGN_KEY) or self.sign_key
        bearer_token = env.get(ENV_BEARER_TOKEN) or self.bearer_token
        basic_auth = self.basic_auth
        basic = env.get(ENV_BASIC_AUTH)
        if basic:
            user, sep, password = basic.partition(":")
            if not sep or not user:
                raise EndpointConfigError(f"{ENV_BASIC_AUTH}: must be user:password")
            basic_auth = (user, password)
        if not (env.get(ENV_SIGN_KEY) or env.get(ENV_BEARER_TOKEN) or basic):
            return self
        return replace(self, sign_key=sign_key, bearer_token=bearer_token, basic_auth=basic_auth)
