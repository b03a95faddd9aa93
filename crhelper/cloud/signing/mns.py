"""Check the `Authorization: MNS <id>:<signature>` header the way MNS does.

The algorithm is the one `aliyun-mns-sdk` uses (`MNSClient.get_signature`): base64(HMAC-SHA1(secret,
METHOD \\n Content-MD5 \\n Content-Type \\n Date \\n sorted x-mns-* headers + request URI including
its query string)). The same string to sign, under RSA-SHA1, authenticates MNS's HTTP pushes
(`crhelper.mns_push`). Errors use MNS's codes and statuses.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Mapping

from ..credentials import Credentials
from .core import SignatureRejected, WireRequest, check_http_date, same

MAX_CLOCK_SKEW_SECONDS = 900.0


def string_to_sign(method: str, resource: str, headers: Mapping[str, str], content_type: str | None = None) -> str:
    """METHOD, Content-MD5, Content-Type, Date, sorted x-mns-* headers, then the resource.

    Header values are used exactly as received; Content-MD5 is never recomputed here."""
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    ctype = lower.get("content-type", "") if content_type is None else content_type
    mns = "".join(f"{name}:{lower[name].strip()}\n" for name in sorted(lower) if name.startswith("x-mns-"))
    return f"{method.upper()}\n{lower.get('content-md5', '')}\n{ctype}\n{lower.get('date', '')}\n{mns}{resource}"


def request_signature(secret: str, method: str, uri: str, headers: Mapping[str, str]) -> str:
    """The base64 HMAC-SHA1 an SDK client puts after `MNS <access key id>:`."""
    text = string_to_sign(method, uri, headers)
    digest = hmac.new(secret.encode("utf-8"), text.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def verify(request: WireRequest, keys: Mapping[str, Credentials], *, now: float,
           max_skew: float = MAX_CLOCK_SKEW_SECONDS) -> str:
    """The access key id that signed `request`, or SignatureRejected with MNS's code."""
    headers = request.headers
    check_http_date(headers.get("date"), now, max_skew,
                    missing=(400, "MissingDateHeader", "Date header is required."),
                    malformed=(400, "InvalidDateHeader", "The Date header format is invalid."),
                    skewed=(408, "TimeExpired", "The http request you sent is expired."))
    auth = headers.get("authorization")
    if not auth:
        raise SignatureRejected(400, "MissingAuthorizationHeader", "Authorization header is required.")
    scheme, _, rest = auth.partition(" ")
    key_id, sep, signature = rest.partition(":")
    if scheme != "MNS" or not sep or not key_id or not signature:
        raise SignatureRejected(400, "InvalidAuthorizationHeader", "The Authorization header format is invalid.")
    key = keys.get(key_id)
    if key is None:
        raise SignatureRejected(403, "InvalidAccessKeyId", "The AccessKey Id you provided is not exist.")
    if not same(signature.strip(), request_signature(key.access_key_secret, request.method, request.target, headers)):
        raise SignatureRejected(
            403, "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your key and signing method.",
        )
    _check_content_md5(headers.get("content-md5"), request.body)
    return key_id


def _check_content_md5(declared: str | None, body: bytes) -> None:
    if not declared:
        return
    hex_digest = hashlib.md5(body).hexdigest()  # noqa: S324 - protocol field
    if declared != base64.b64encode(hex_digest.encode("ascii")).decode("ascii") and declared.lower() != hex_digest:
        raise SignatureRejected(400, "InvalidDegist", "The Content-MD5 you specified is invalid.")
