"""The local Function Compute endpoint's view of FC 2.0 signatures: `crhelper.cloud.signing.fc`
does the verifying; this adapter keeps the endpoint's names and turns a rejection into FcApiError."""
from __future__ import annotations

from typing import Mapping
from urllib.parse import quote

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing import fc as fc_signing
from crhelper.cloud.signing.core import SignatureRejected, WireRequest
from crhelper.cloud.signing.fc import MAX_CLOCK_SKEW_SECONDS, compute_signature, string_to_sign
from crhelper.local.fc_protocol import FcApiError

__all__ = ["MAX_CLOCK_SKEW_SECONDS", "AccessKey", "compute_signature", "string_to_sign", "verify_request"]

#: A credential the endpoint accepts; a non-empty `security_token` marks an STS credential.
AccessKey = Credentials


def verify_request(method: str, path: str, headers: Mapping[str, str],
                   keys: Mapping[str, AccessKey], now: float,
                   max_skew: float = MAX_CLOCK_SKEW_SECONDS) -> AccessKey:
    """Return the AccessKey that signed the request, or raise FcApiError with FC's code.

    `path` is the unescaped path (what fc2 signs); `headers` have lower-cased names."""
    # Escaped again (`?` and `%` included), so the verifier reads back exactly this path.
    request = WireRequest.of(method, quote(path, safe="/"), headers)
    try:
        access_key_id = fc_signing.verify(request, keys, now=now, max_skew=max_skew)
    except SignatureRejected as exc:
        raise FcApiError(exc.status, exc.code, exc.message) from None
    return keys[access_key_id]

