"""The local MNS endpoint's view of `Authorization: MNS` signatures: `crhelper.cloud.signing.mns`
does the verifying; this adapter keeps the endpoint's names and turns a rejection into MnsError."""

from __future__ import annotations

from typing import Mapping

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing import mns as mns_signing
from crhelper.cloud.signing.core import SignatureRejected, WireRequest
from crhelper.cloud.signing.mns import MAX_CLOCK_SKEW_SECONDS, request_signature
from crhelper.local.mns_state import MnsError

__all__ = ["MAX_CLOCK_SKEW_SECONDS", "check_request", "request_signature"]


def check_request(
    method: str,
    uri: str,
    headers: Mapping[str, str],
    body: bytes,
    credentials: Mapping[str, str],
    now: float,
) -> str:
    """Return the caller's access key id, or raise the MnsError MNS would answer with.

    `uri` is the request target as received (path and query); `credentials` maps ids to secrets."""
    keys = {key_id: Credentials(key_id, secret) for key_id, secret in credentials.items()}
    try:
        return mns_signing.verify(WireRequest.of(method, uri, headers, body), keys, now=now)
    except SignatureRejected as exc:
        raise MnsError(exc.status, exc.code, exc.message) from None
