"""What the two Alibaba OpenAPI schemes (ACS3-HMAC-SHA256 and RPC v1 HMAC-SHA1) share: the
gateway's error vocabulary, the timestamp window, the access key and STS token checks, and
nonce replay refusal.

The codes and messages are the gateway's common errors; each message ends with the precise rule
that failed (the field, the value when it is not a secret, the limit).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Mapping

from ..credentials import Credentials
from .core import SignatureRejected, same
from .replay import ReplayCache

#: x-acs-date / Timestamp must lie within 15 minutes of the server clock, either way.
MAX_CLOCK_SKEW_SECONDS = 900.0
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

MISSING_PARAMETER = "MissingParameter"
INCOMPLETE_SIGNATURE = "IncompleteSignature"
SIGNATURE_DOES_NOT_MATCH = "SignatureDoesNotMatch"
ACCESS_KEY_NOT_FOUND = "InvalidAccessKeyId.NotFound"
TIMESTAMP_FORMAT_ERROR = "InvalidTimeStamp.Format"
TIMESTAMP_EXPIRED = "InvalidTimeStamp.Expired"
NONCE_USED = "SignatureNonceUsed"
TOKEN_MISMATCH = "InvalidSecurityToken.MismatchWithAccessKey"

_ERRORS: dict[str, tuple[int, str]] = {
    INCOMPLETE_SIGNATURE: (400, "The request signature does not conform to Aliyun standards."),
    SIGNATURE_DOES_NOT_MATCH: (400, "Specified signature is not matched with our calculation."),
    ACCESS_KEY_NOT_FOUND: (404, "Specified access key is not found."),
    TIMESTAMP_FORMAT_ERROR: (400, "Specified time stamp or date value is not well formatted."),
    TIMESTAMP_EXPIRED: (400, "Specified time stamp or date value is expired."),
    NONCE_USED: (400, "Specified signature nonce was used already."),
    TOKEN_MISMATCH: (400, "Specified SecurityToken mismatch with the AccessKey."),
}


def rejected(code: str, rule: str, shown: str | None = None) -> SignatureRejected:
    """The gateway's error `code`: its standard message followed by `shown` (default: `rule`, the
    precise reason, which is also the error's `reason`). Neither may hold a secret."""
    status, text = _ERRORS[code]
    return SignatureRejected(status, code, f"{text} {rule if shown is None else shown}".rstrip(), rule)


def missing(name: str) -> SignatureRejected:
    message = f'The input parameter "{name}" that is mandatory for processing this request is not supplied.'
    return SignatureRejected(400, MISSING_PARAMETER, message, f"{name}: required")


def refuse_repeated(pairs: list[tuple[str, str]], what: str) -> None:
    """A name given twice is refused: the signer's dict cannot hold it, and an endpoint reading the
    other copy would act on what was not verified."""
    seen: set[str] = set()
    for name, _ in pairs:
        if name in seen:
            raise rejected(INCOMPLETE_SIGNATURE, f"{what} {name[:64]!r} appears more than once.")
        seen.add(name)


def check_timestamp(name: str, value: str | None, now: float, max_skew: float) -> None:
    """`value` is `yyyy-MM-ddTHH:mm:ssZ` (UTC) within `max_skew` seconds of `now`."""
    if not value:
        raise missing(name)
    try:
        sent = datetime.strptime(value, TIMESTAMP_FORMAT).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise rejected(TIMESTAMP_FORMAT_ERROR, f"{name} {value[:40]!r} must be UTC time as yyyy-MM-ddTHH:mm:ssZ.") from None
    if abs(now - sent) > max_skew:
        raise rejected(TIMESTAMP_EXPIRED, f"{name} {value!r} is {abs(now - sent):.0f} s from the server clock; "
                                          f"at most {max_skew:g} s either way.")


def signing_key(keys: Mapping[str, Credentials], access_key_id: str | None, name: str) -> Credentials:
    if not access_key_id:
        raise missing(name)
    key = keys.get(access_key_id)
    if key is None:
        raise rejected(ACCESS_KEY_NOT_FOUND, f"{name} {access_key_id[:64]!r} is not a known access key.")
    return key


def check_security_token(key: Credentials, presented: str | None, name: str) -> None:
    """An STS key needs its token; a permanent key takes none. The token is never echoed."""
    if not same(presented or "", key.security_token):
        rule = (f"{name} is required with the STS access key {key.access_key_id!r} and must be its token."
                if key.security_token else
                f"{name} was sent with the permanent access key {key.access_key_id!r}, which takes none.")
        raise rejected(TOKEN_MISMATCH, rule)


def claim_nonce(nonces: ReplayCache | None, access_key_id: str, nonce: str, name: str) -> None:
    """Remember `nonce` for this key; a second use within the window is a replay."""
    if nonces is not None and not nonces.claim(("alibaba", access_key_id, nonce)):
        raise rejected(NONCE_USED, f"{name} {nonce[:64]!r} was already used by access key {access_key_id!r}.")
