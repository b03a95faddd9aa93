"""Check the ``Authorization: MNS <id>:<signature>`` header the way MNS does.

The algorithm is the one ``aliyun-mns-sdk`` uses (``MNSClient.get_signature``):
base64(HMAC-SHA1(secret, METHOD \\n Content-MD5 \\n Content-Type \\n Date \\n
sorted x-mns-* headers + request URI including its query string)). The local
endpoint enforces it so a client with the wrong key fails as it would in the cloud.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from email.utils import parsedate_to_datetime
from typing import Mapping

from crhelper.local.mns_state import MnsError
from crhelper.mns_push import build_string_to_sign

MAX_CLOCK_SKEW_SECONDS = 900.0


def request_signature(secret: str, method: str, uri: str, headers: Mapping[str, str]) -> str:
    """The base64 HMAC-SHA1 an SDK client puts after ``MNS <access key id>:``."""
    text = build_string_to_sign(method, uri, headers)
    digest = hmac.new(secret.encode("utf-8"), text.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def check_request(
    method: str,
    uri: str,
    headers: Mapping[str, str],
    body: bytes,
    credentials: Mapping[str, str],
    now: float,
) -> str:
    """Return the caller's access key id, or raise the MnsError MNS would answer with."""
    lower = {k.lower(): v for k, v in headers.items()}
    raw_date = lower.get("date")
    if not raw_date:
        raise MnsError(400, "MissingDateHeader", "Date header is required.")
    try:
        sent = parsedate_to_datetime(raw_date).timestamp()
    except (TypeError, ValueError):
        raise MnsError(400, "InvalidDateHeader", "The Date header format is invalid.") from None
    if abs(now - sent) > MAX_CLOCK_SKEW_SECONDS:
        raise MnsError(408, "TimeExpired", "The http request you sent is expired.")
    auth = lower.get("authorization")
    if not auth:
        raise MnsError(400, "MissingAuthorizationHeader", "Authorization header is required.")
    scheme, _, rest = auth.partition(" ")
    key_id, sep, signature = rest.partition(":")
    if scheme != "MNS" or not sep or not key_id or not signature:
        raise MnsError(400, "InvalidAuthorizationHeader", "The Authorization header format is invalid.")
    secret = credentials.get(key_id)
    if secret is None:
        raise MnsError(403, "InvalidAccessKeyId", "The AccessKey Id you provided is not exist.")
    expected = request_signature(secret, method, uri, lower)
    if not hmac.compare_digest(expected.encode("ascii"), signature.strip().encode("ascii", "replace")):
        raise MnsError(
            403, "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your key and signing method.",
        )
    _check_content_md5(lower.get("content-md5"), body)
    return key_id


def _check_content_md5(declared: str | None, body: bytes) -> None:
    if not declared:
        return
    hex_digest = hashlib.md5(body).hexdigest()  # noqa: S324 - protocol field
    if declared != base64.b64encode(hex_digest.encode("ascii")).decode("ascii") and declared.lower() != hex_digest:
        raise MnsError(400, "InvalidDegist", "The Content-MD5 you specified is invalid.")
