"""The local Function Compute endpoint's view of signatures: `crhelper.cloud.signing.fc` (FC 2.0)
and `crhelper.cloud.signing.acs3` (FC 3.0) do the verifying; this adapter keeps the endpoint's
names and turns a rejection into FcApiError."""
from __future__ import annotations

from typing import Mapping
from urllib.parse import quote, unquote

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing import acs3
from crhelper.cloud.signing import fc as fc_signing
from crhelper.cloud.signing.core import SignatureRejected, WireRequest
from crhelper.cloud.signing.fc import MAX_CLOCK_SKEW_SECONDS, compute_signature, string_to_sign
from crhelper.cloud.signing.replay import ReplayCache
from crhelper.local.fc_protocol import FcApiError

__all__ = ["MAX_CLOCK_SKEW_SECONDS", "AccessKey", "compute_signature", "string_to_sign", "verify_request",
           "verify_signed_request"]

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



def verify_signed_request(method: str, raw_target: str, headers: Mapping[str, str], body: bytes,
                          keys: Mapping[str, AccessKey], now: float, nonces: ReplayCache | None,
                          max_skew: float = MAX_CLOCK_SKEW_SECONDS, *, acs3_default: bool) -> AccessKey:
    """The key that signed a request to either API version: ACS3-HMAC-SHA256 as
    `alibabacloud-fc20230330` signs it (its nonce refused when seen before), or FC's own scheme
    (`fc2`, and tools that send it to the 2023-03-30 paths too); the Authorization header says
    which, else `acs3_default` (FC 3.0's paths) decides whose rules reject it. `raw_target` is the
    path and query as received (still percent-encoded)."""
    authorization = (headers.get("authorization") or "").lstrip()
    scheme_acs3 = authorization.startswith(acs3.ALGORITHM) or (acs3_default and not authorization.startswith("FC "))
    if not scheme_acs3:
        return verify_request(method, unquote(raw_target.partition("?")[0]), headers, keys, now, max_skew)
    request = WireRequest.of(method, raw_target, headers, body)
    try:
        access_key_id = acs3.verify(request, keys, now=now, nonces=nonces, max_skew=max_skew)
    except SignatureRejected as exc:
        raise FcApiError(exc.status, exc.code, exc.message) from None
    return keys[access_key_id]
