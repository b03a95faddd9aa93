"""Verify ACS3-HMAC-SHA256 signatures (Alibaba OpenAPI V3), as the Tea/Darabonba SDKs send them:
`alibabacloud-ecs20140526` 7.x, `alibabacloud-fc20230330`, `alibabacloud-ros20190910`.

    Authorization: ACS3-HMAC-SHA256 Credential=<AK>,SignedHeaders=<a;b;...>,Signature=<hex>
    CanonicalRequest = METHOD \\n path \\n canonical query \\n canonical headers \\n SignedHeaders \\n x-acs-content-sha256
    Signature = hex(HMAC-SHA256(secret, "ACS3-HMAC-SHA256\\n" + hex(SHA-256(CanonicalRequest))))

The path is taken as sent (the SDKs sign it percent-encoded); the query is decoded, sorted and
re-encoded with RFC 3986 (never the raw `+`-encoded wire string); the headers are the ones
`SignedHeaders` names, which must include `host`, `content-type` when sent, and every `x-acs-*`
header sent (an unsigned one could be changed in transit). `x-acs-content-sha256` must be the
SHA-256 of the body, `x-acs-date` within the skew window, and `x-acs-signature-nonce` unused.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Mapping
from urllib.parse import quote

from ..credentials import Credentials
from . import alibaba as A
from .core import MalformedParameters, WireRequest, parse_pairs, same
from .replay import ReplayCache

ALGORITHM = "ACS3-HMAC-SHA256"
ALWAYS_SIGNED = ("host", "x-acs-content-sha256", "x-acs-date", "x-acs-signature-nonce")


def _encode(text: str) -> str:
    return quote(text, safe="~")


def canonical_query(raw_query: str) -> str:
    """Decoded pairs sorted by name, each name and value RFC 3986-encoded, joined by `&`; a name
    given twice is refused."""
    try:
        pairs = parse_pairs(raw_query, "the query string")
    except MalformedParameters as exc:
        raise A.rejected(A.INCOMPLETE_SIGNATURE, f"{exc}.") from None
    A.refuse_repeated(pairs, "query parameter")
    return "&".join(f"{_encode(name)}={_encode(value)}" for name, value in sorted(pairs))


def canonical_request(request: WireRequest, signed_headers: list[str]) -> str:
    headers = "".join(f"{name}:{(request.header(name) or '').strip()}\n" for name in signed_headers)
    return "\n".join([
        request.method.upper(),
        request.path,
        canonical_query(request.query),
        headers,
        ";".join(signed_headers),
        request.header("x-acs-content-sha256") or "",
    ])


def string_to_sign(canonical: str) -> str:
    return f"{ALGORITHM}\n{hashlib.sha256(canonical.encode('utf-8')).hexdigest()}"


def compute_signature(secret: str, text: str) -> str:
    return hmac.new(secret.encode("utf-8"), text.encode("utf-8"), hashlib.sha256).hexdigest()


def parse_authorization(value: str) -> tuple[str, list[str], str]:
    """(access key id, signed header names, hex signature) from the Authorization header."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme != ALGORITHM:
        raise A.rejected(A.INCOMPLETE_SIGNATURE,
                         f"Authorization must start with {ALGORITHM}, got {scheme[:32]!r}.")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, text = part.strip().partition("=")
        if sep:
            fields[name] = text.strip()
    missing = [name for name in ("Credential", "SignedHeaders", "Signature") if not fields.get(name)]
    if missing:
        raise A.rejected(A.INCOMPLETE_SIGNATURE,
                         f"Authorization must have Credential=, SignedHeaders= and Signature=; "
                         f"{', '.join(missing)} missing or empty.")
    return fields["Credential"], fields["SignedHeaders"].lower().split(";"), fields["Signature"]


def _check_signed_headers(request: WireRequest, signed: list[str]) -> None:
    for name in signed:
        if request.header(name) is None:
            raise A.rejected(A.INCOMPLETE_SIGNATURE, f"SignedHeaders names {name[:64]!r}, which the request does not carry.")
    sent_unsigned = [name for name in request.headers
                     if (name.startswith("x-acs-") or name == "content-type") and name not in signed]
    needed = [name for name in ALWAYS_SIGNED if name not in signed]
    if needed or sent_unsigned:
        raise A.rejected(A.INCOMPLETE_SIGNATURE,
                         f"SignedHeaders must include {', '.join(sorted(needed + sent_unsigned))}.")


def verify(request: WireRequest, keys: Mapping[str, Credentials], *, now: float, nonces: ReplayCache | None,
           max_skew: float = A.MAX_CLOCK_SKEW_SECONDS) -> str:
    """The access key id that signed `request`, or SignatureRejected with the gateway's code.

    `now` is epoch seconds; `nonces` remembers `x-acs-signature-nonce` values (None turns replay
    refusal off, which an endpoint should do only for tests of something else)."""
    authorization = request.header("authorization")
    if not authorization:
        raise A.missing("Authorization")
    access_key_id, signed, signature = parse_authorization(authorization)
    A.check_timestamp("x-acs-date", request.header("x-acs-date"), now, max_skew)
    nonce = request.header("x-acs-signature-nonce")
    if not nonce:
        raise A.missing("x-acs-signature-nonce")
    _check_signed_headers(request, signed)
    key = A.signing_key(keys, access_key_id, "Credential")
    if not same((request.header("x-acs-content-sha256") or "").lower(), hashlib.sha256(request.body).hexdigest()):
        raise A.rejected(A.SIGNATURE_DOES_NOT_MATCH, "x-acs-content-sha256 must be the hex SHA-256 of the request body.")
    canonical = canonical_request(request, signed)
    if not same(signature.lower(), compute_signature(key.access_key_secret, string_to_sign(canonical))):
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        raise A.rejected(A.SIGNATURE_DOES_NOT_MATCH,
                         f"Signature must be HMAC-SHA256 with the secret of {access_key_id!r} over the "
                         f"canonical request, whose SHA-256 here is {digest}.")
    A.check_security_token(key, request.header("x-acs-security-token"), "x-acs-security-token")
    A.claim_nonce(nonces, access_key_id, nonce, "x-acs-signature-nonce")
    return access_key_id
