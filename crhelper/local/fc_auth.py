"""Verify FC 2.0 request signatures exactly as `fc2/auth.py` computes them.

String to sign: METHOD, content-md5, content-type, date, then the sorted lower-cased
`x-fc-*` headers as `key:value` lines followed by the unescaped path; HMAC-SHA256 with the
secret, base64, sent as `Authorization: FC <AccessKeyID>:<signature>`.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Mapping

from crhelper.local.fc_protocol import HEADER_SECURITY_TOKEN, FcApiError

MAX_CLOCK_SKEW_SECONDS = 15 * 60


@dataclass(frozen=True)
class AccessKey:
    """A credential the server accepts; a non-empty `security_token` marks an STS credential."""

    access_key_id: str
    access_key_secret: str
    security_token: str = ""

    def __repr__(self) -> str:
        return f"AccessKey(access_key_id={self.access_key_id!r}, sts={bool(self.security_token)})"


def canonical_headers(headers: Mapping[str, str]) -> str:
    pairs = sorted((key.lower(), value) for key, value in headers.items()
                   if key.lower().startswith("x-fc-"))
    return "".join(f"{key}:{value}\n" for key, value in pairs)


def string_to_sign(method: str, path: str, headers: Mapping[str, str]) -> str:
    """`headers` must have lower-cased keys, like the dict the SDK signs."""
    return "\n".join([
        method.upper(),
        headers.get("content-md5", ""),
        headers.get("content-type", ""),
        headers.get("date", ""),
        canonical_headers(headers) + path,
    ])


def compute_signature(secret: str, text: str) -> str:
    digest = hmac.new(secret.encode("utf-8"), text.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def _parse_authorization(value: str) -> tuple[str, str]:
    scheme, _, credential = value.strip().partition(" ")
    access_key_id, sep, signature = credential.strip().partition(":")
    if scheme != "FC" or not sep or not access_key_id or not signature:
        raise FcApiError(400, "InvalidArgument",
                         "header Authorization must have the form 'FC <AccessKeyID>:<Signature>'")
    return access_key_id, signature


def _check_date(value: str | None, now: float, max_skew: float) -> None:
    if not value:
        raise FcApiError(400, "MissingRequiredHeader", "required HTTP header Date was not specified")
    try:
        sent = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        raise FcApiError(400, "InvalidArgument", "header Date must be an RFC 1123 GMT date") from None
    if abs(now - sent) > max_skew:
        raise FcApiError(403, "RequestTimeTooSkewed",
                         f"header Date differs from the server time by more than {int(max_skew)} s")


def verify_request(method: str, path: str, headers: Mapping[str, str],
                   keys: Mapping[str, AccessKey], now: float,
                   max_skew: float = MAX_CLOCK_SKEW_SECONDS) -> AccessKey:
    """Return the AccessKey that signed the request, or raise FcApiError with FC's code."""
    authorization = headers.get("authorization")
    if not authorization:
        raise FcApiError(400, "MissingRequiredHeader",
                         "required HTTP header Authorization was not specified")
    access_key_id, signature = _parse_authorization(authorization)
    _check_date(headers.get("date"), now, max_skew)
    key = keys.get(access_key_id)
    if key is None:
        raise FcApiError(403, "InvalidAccessKeyID", f"invalid access key ID '{access_key_id}'")
    expected = compute_signature(key.access_key_secret, string_to_sign(method, path, headers))
    if not hmac.compare_digest(expected.encode("ascii"), signature.encode("utf-8", "replace")):
        raise FcApiError(403, "SignatureNotMatch",
                         "The request signature we calculated does not match the signature you "
                         "provided. Check your access key and signing method")
    token = headers.get(HEADER_SECURITY_TOKEN, "")
    if not hmac.compare_digest(token.encode("utf-8", "replace"), key.security_token.encode("utf-8")):
        raise FcApiError(403, "InvalidSecurityToken",
                         f"header {HEADER_SECURITY_TOKEN} does not match the STS credential "
                         f"'{access_key_id}'")
    return key
