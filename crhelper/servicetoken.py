"""Parse and format ROS ``ServiceToken`` values (spec §3.2).

The token decides how a request reaches a provider, so routing code (the stack
emulator, the CLI) needs a typed value instead of string prefixes. Pure: no I/O,
stdlib only, safe on a cold-start path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union
from urllib.parse import urlsplit

__all__ = [
    "FcFunctionToken",
    "MnsQueueToken",
    "MnsTopicToken",
    "WebToken",
    "ServiceToken",
    "ServiceTokenError",
    "parse_service_token",
    "format_service_token",
    "VALID_FORMS",
]

MAX_TOKEN_LENGTH = 512

VALID_FORMS = (
    "acs:fc:<region_id>:<account_id>:services/<service_name>/functions/<function_name> (FC 2.0)",
    "acs:fc:<region_id>:<account_id>:functions/<function_name> (FC 3.0)",
    "acs:mns:<region_id>:<account_id>:queues/<queue_name> (or :/queues/<queue_name>)",
    "acs:mns:<region_id>:<account_id>:topics/<topic_name> (or :/topics/<topic_name>)",
    "web:<http(s) url>, web[sync]:<url>, web[idempotent]:<url>, web[sync,idempotent]:<url>",
)

_REGION = re.compile(r"^[a-z]{2,}(-[a-z0-9]+)+$")
_ACCOUNT = re.compile(r"^[0-9]{1,32}$")
# FC service/function names: letter or underscore first, then letters, digits, '_' or '-'.
_FC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,127}$")
# MNS queue/topic names: letter first, then letters, digits or '-' (MNS InvalidQueueName rule).
_MNS_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,255}$")
_WEB_OPTIONS = ("sync", "idempotent")


class ServiceTokenError(ValueError):
    """A ServiceToken that matches none of the documented forms."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        forms = "\n  ".join(VALID_FORMS)
        super().__init__(f"invalid ServiceToken: {problem}. Valid forms:\n  {forms}")


@dataclass(frozen=True)
class FcFunctionToken:
    """A Function Compute function; ``service`` is None for FC 3.0."""

    region: str
    account_id: str
    function: str
    service: str | None = None

    @property
    def fc_version(self) -> int:
        return 2 if self.service is not None else 3

    def format(self) -> str:
        path = f"functions/{self.function}"
        if self.service is not None:
            path = f"services/{self.service}/{path}"
        return f"acs:fc:{self.region}:{self.account_id}:{path}"


@dataclass(frozen=True)
class MnsQueueToken:
    """An MNS (SMQ) queue that a worker long-polls."""

    region: str
    account_id: str
    queue: str

    def format(self) -> str:
        return f"acs:mns:{self.region}:{self.account_id}:queues/{self.queue}"


@dataclass(frozen=True)
class MnsTopicToken:
    """An MNS (SMQ) topic whose subscribers receive the request."""

    region: str
    account_id: str
    topic: str

    def format(self) -> str:
        return f"acs:mns:{self.region}:{self.account_id}:topics/{self.topic}"


@dataclass(frozen=True)
class WebToken:
    """An HTTP(S) endpoint; ``sync`` makes the reply the result, ``idempotent`` lets ROS retry Create."""

    url: str
    sync: bool = False
    idempotent: bool = False

    def format(self) -> str:
        options = [name for name, on in (("sync", self.sync), ("idempotent", self.idempotent)) if on]
        prefix = f"web[{','.join(options)}]" if options else "web"
        return f"{prefix}:{self.url}"


ServiceToken = Union[FcFunctionToken, MnsQueueToken, MnsTopicToken, WebToken]


def format_service_token(token: ServiceToken) -> str:
    """The canonical string for a parsed token (MNS paths without the leading slash)."""
    return token.format()


def parse_service_token(token: str) -> ServiceToken:
    """Parse ``token`` into a typed value, or raise ServiceTokenError naming the rule broken."""
    if not isinstance(token, str):
        raise ServiceTokenError(f"expected a string, got {type(token).__name__}")
    if not token or token != token.strip():
        raise ServiceTokenError("the token is empty or has leading/trailing whitespace")
    if len(token) > MAX_TOKEN_LENGTH:
        raise ServiceTokenError(f"the token is {len(token)} characters long; ROS allows at most {MAX_TOKEN_LENGTH}")
    if token.startswith("acs:"):
        return _parse_acs(token)
    if token.startswith("web:") or token.startswith("web["):
        return _parse_web(token)
    raise ServiceTokenError("the token must start with 'acs:fc:', 'acs:mns:', 'web:' or 'web[<options>]:'")


def _parse_acs(token: str) -> ServiceToken:
    parts = token.split(":", 4)
    if len(parts) != 5:
        raise ServiceTokenError(
            "an 'acs:' token needs five ':'-separated parts: acs:<product>:<region>:<account>:<path>"
        )
    _, product, region, account, path = parts
    if product not in ("fc", "mns"):
        raise ServiceTokenError(f"product {product!r} is not supported; use 'fc' or 'mns'")
    if not _REGION.match(region):
        raise ServiceTokenError(f"region {region!r} is not a region id like 'cn-hangzhou'")
    if not _ACCOUNT.match(account):
        raise ServiceTokenError(f"account id {account!r} must be digits only")
    if path.startswith("/"):
        if product == "fc":
            raise ServiceTokenError("a leading '/' in the resource path is only documented for MNS tokens")
        path = path[1:]
    segments = path.split("/")
    if product == "fc":
        return _parse_fc_path(region, account, segments)
    return _parse_mns_path(region, account, segments)


def _parse_fc_path(region: str, account: str, segments: list[str]) -> FcFunctionToken:
    if len(segments) == 4 and segments[0] == "services" and segments[2] == "functions":
        service, function = segments[1], segments[3]
        if "." in service:
            raise ServiceTokenError(
                f"service {service!r} carries a qualifier; qualifiers are not part of the documented ServiceToken forms"
            )
        _check_fc_name("service name", service)
        _check_fc_name("function name", function)
        return FcFunctionToken(region, account, function, service)
    if len(segments) == 2 and segments[0] == "functions":
        _check_fc_name("function name", segments[1])
        return FcFunctionToken(region, account, segments[1])
    raise ServiceTokenError(
        "an FC path must be 'services/<service>/functions/<function>' (FC 2.0) or 'functions/<function>' (FC 3.0)"
    )


def _parse_mns_path(region: str, account: str, segments: list[str]) -> MnsQueueToken | MnsTopicToken:
    if len(segments) != 2 or segments[0] not in ("queues", "topics"):
        raise ServiceTokenError("an MNS path must be 'queues/<queue_name>' or 'topics/<topic_name>'")
    kind, name = segments
    if not _MNS_NAME.match(name):
        raise ServiceTokenError(
            f"{kind[:-1]} name {name!r} must start with a letter and hold 1-256 letters, digits or '-'"
        )
    if kind == "queues":
        return MnsQueueToken(region, account, name)
    return MnsTopicToken(region, account, name)


def _check_fc_name(what: str, value: str) -> None:
    if not _FC_NAME.match(value):
        raise ServiceTokenError(
            f"{what} {value!r} must start with a letter or '_' and hold 1-128 letters, digits, '_' or '-'"
        )


def _parse_web(token: str) -> WebToken:
    # The URL contains colons, so split only at the first one after the options.
    head, sep, url = token.partition(":")
    if head.startswith("web[") and not head.endswith("]"):
        raise ServiceTokenError("web options must be closed with ']' before the ':', e.g. 'web[sync]:https://...'")
    if not sep:
        raise ServiceTokenError("a web token needs ':' between 'web' and the URL")
    sync = idempotent = False
    if head != "web":
        inner = head[4:-1]
        names = [item.strip() for item in inner.split(",")]
        if not inner or any(not name for name in names):
            raise ServiceTokenError("web options are empty; use 'web:<url>' or name options from sync, idempotent")
        for name in names:
            if name not in _WEB_OPTIONS:
                raise ServiceTokenError(f"web option {name!r} is unknown; allowed: sync, idempotent")
        if len(set(names)) != len(names):
            raise ServiceTokenError("a web option is repeated")
        sync, idempotent = "sync" in names, "idempotent" in names
    _check_url(url)
    return WebToken(url, sync, idempotent)


def _check_url(url: str) -> None:
    if not url:
        raise ServiceTokenError("the web token has no URL after ':'")
    if any(ch.isspace() for ch in url):
        raise ServiceTokenError("the web URL contains whitespace")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ServiceTokenError(f"the web URL cannot be parsed ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ServiceTokenError("the web URL scheme must be 'http' or 'https'")
    if not parts.hostname:
        raise ServiceTokenError("the web URL has no host")
    if port == 0:
        raise ServiceTokenError("the web URL port must be 1-65535")
