"""Verify FC 2.0 request signatures exactly as `fc2/auth.py` computes them.

String to sign: METHOD, content-md5, content-type, date, then the sorted lower-cased `x-fc-*`
headers as `key:value` lines followed by the unescaped path; HMAC-SHA256 with the secret, base64,
sent as `Authorization: FC <AccessKeyID>:<signature>`. An STS key must come with its token in
`x-fc-security-token`; a permanent key with none. Errors use FC's codes and statuses.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Mapping
from urllib.parse import unquote

from ..credentials import Credentials
from .core import SignatureRejected, WireRequest, check_http_date, same

MAX_CLOCK_SKEW_SECONDS = 15 * 60
HEADER_SECURITY_TOKEN = "x-fc-security-token"


def canonical_headers(headers: Mapping[str, str]) -> str:
    pairs = sorted((key.lower(), value) for key, value in headers.items()
                   if key.lower().startswith("x-fc-"))
    return "".join(f"{key}:{value}\n" for key, value in pairs)


def string_to_sign(method: str, path: str, headers: Mapping[str, str]) -> str:
    """`headers` must have lower-cased keys, like the dict the SDK signs; `path` is unescaped."""
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
        raise SignatureRejected(400, "InvalidArgument",
                                "header Authorization must have the form 'FC <AccessKeyID>:<Signature>'")
    return access_key_id, signature


def verify(request: WireRequest, keys: Mapping[str, Credentials], *, now: float,
           max_skew: float = MAX_CLOCK_SKEW_SECONDS) -> str:
    """The AccessKey id that signed `request`, or SignatureRejected with FC's code."""
    headers = request.headers
    authorization = headers.get("authorization")
    if not authorization:
        raise SignatureRejected(400, "MissingRequiredHeader",
                                "required HTTP header Authorization was not specified")
    access_key_id, signature = _parse_authorization(authorization)
    check_http_date(
        headers.get("date"), now, max_skew,
        missing=(400, "MissingRequiredHeader", "required HTTP header Date was not specified"),
        malformed=(400, "InvalidArgument", "header Date must be an RFC 1123 GMT date"),
        skewed=(403, "RequestTimeTooSkewed", f"header Date differs from the server time by more than {int(max_skew)} s"))
    key = keys.get(access_key_id)
    if key is None:
        raise SignatureRejected(403, "InvalidAccessKeyID", f"invalid access key ID '{access_key_id}'")
    text = string_to_sign(request.method, unquote(request.path), headers)
    if not same(signature, compute_signature(key.access_key_secret, text)):
        raise SignatureRejected(403, "SignatureNotMatch",
                                "The request signature we calculated does not match the signature you "
                                "provided. Check your access key and signing method")
    if not same(headers.get(HEADER_SECURITY_TOKEN, ""), key.security_token):
        raise SignatureRejected(403, "InvalidSecurityToken",
                                f"header {HEADER_SECURITY_TOKEN} does not match the STS credential "
                                f"'{access_key_id}'")
    return access_key_id
