"""What every verifier shares: the request as it arrived, the one error type, parameter parsing.

Verifiers never trust a parsed-and-rebuilt request: they read the request target and the body
exactly as received, so an endpoint can hand them what its HTTP server saw.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Iterable, Mapping, Protocol, Union
from urllib.parse import parse_qsl

#: More parameters than any API call sends; a request with more is refused before any work on it.
MAX_PARAMETERS = 1000
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"


class _HeaderItems(Protocol):
    """Anything with `items()`: a dict, or the `email.message.Message` of `http.server`."""

    def items(self) -> Iterable[tuple[str, str]]: ...


Headers = Union[Mapping[str, str], _HeaderItems]


class SignatureRejected(Exception):
    """The request is not provably signed by a known key.

    `status`, `code` and `message` are what the endpoint answers, in the provider's own vocabulary
    (`SignatureDoesNotMatch`, CloudStack's 401 text...). `reason` names the field and the rule that
    failed, for logs and tests, where the provider's message is deliberately vague (CloudStack).
    Neither ever holds a secret or a security token."""

    def __init__(self, status: int, code: str, message: str, reason: str = "") -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.reason = reason or message


@dataclass(frozen=True)
class WireRequest:
    """One HTTP request as received: method, request target (path and query, still
    percent-encoded), headers with lower-cased names, raw body. Build it with `of`."""

    method: str
    target: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    @classmethod
    def of(cls, method: str, target: str, headers: Headers, body: bytes = b"") -> "WireRequest":
        """Lower-case the header names; a header sent twice keeps both values, joined by a comma."""
        lower: dict[str, str] = {}
        for name, value in headers.items():
            key, text = str(name).lower(), str(value)
            lower[key] = f"{lower[key]},{text}" if key in lower else text
        return cls(method.upper(), target, lower, body)

    @property
    def path(self) -> str:
        """The path as sent (percent-encoded), without the query."""
        return self.target.partition("?")[0] or "/"

    @property
    def query(self) -> str:
        """The raw query string as sent, without the `?`."""
        return self.target.partition("?")[2]

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def is_form(self) -> bool:
        """True when the body is form-encoded parameters (RPC POST, CloudStack POST)."""
        content_type = (self.header("content-type") or "").split(";")[0].strip().lower()
        return content_type == FORM_CONTENT_TYPE


class MalformedParameters(ValueError):
    """A query string or form body that cannot be read as UTF-8 `name=value` pairs; says which and why."""


def parse_pairs(text: str, where: str) -> list[tuple[str, str]]:
    """Decode a query string or form body (`+` is a space) into its pairs, in order; blank values kept.

    Raises MalformedParameters for invalid UTF-8 or more than MAX_PARAMETERS pairs."""
    try:
        return parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="strict",
                         max_num_fields=MAX_PARAMETERS)
    except UnicodeDecodeError:
        raise MalformedParameters(f"{where} is not valid UTF-8 after percent-decoding") from None
    except ValueError:
        raise MalformedParameters(f"{where} has more than {MAX_PARAMETERS} parameters") from None


def form_text(request: WireRequest) -> str:
    """The body of a form-encoded request as text ("" for any other body)."""
    if not request.is_form or not request.body:
        return ""
    try:
        return request.body.decode("ascii")
    except UnicodeDecodeError:
        raise MalformedParameters("the form body holds bytes that are not percent-encoded") from None


def same(presented: str, expected: str) -> bool:
    """Constant-time equality of two texts (a signature, a token), whatever characters they hold."""
    return hmac.compare_digest(presented.encode("utf-8", "replace"), expected.encode("utf-8", "replace"))


#: (status, code, message) of one rejection, in the provider's vocabulary.
Rejection = tuple[int, str, str]


def http_date_seconds(value: str) -> float | None:
    """Epoch seconds of an RFC 1123 `Date` header; None when it is not one."""
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def check_http_date(value: str | None, now: float, max_skew: float, *, missing: Rejection,
                    malformed: Rejection, skewed: Rejection) -> None:
    """The `Date` header rule of FC 2.0 and MNS: present, RFC 1123, within `max_skew` of `now`;
    each failure raises the rejection the provider gives for it."""
    if not value:
        raise SignatureRejected(*missing)
    sent = http_date_seconds(value)
    if sent is None:
        raise SignatureRejected(*malformed)
    if abs(now - sent) > max_skew:
        raise SignatureRejected(*skewed)
