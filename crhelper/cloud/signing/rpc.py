"""Verify RPC v1 HMAC-SHA1 signatures (`Signature`, `SignatureMethod=HMAC-SHA1`,
`SignatureVersion=1.0`, `SignatureNonce`, `Timestamp`), as the `aliyun` CLI, the V1.0 SDKs and the
Tea SDKs with `signature_algorithm="v2"` send them, in the query of a GET or POST and in a
form-encoded POST body.

    canon = sorted name=value pairs of query and form body, Signature left out, RFC 3986-encoded
    StringToSign = METHOD & %2F & enc(canon)
    Signature = base64(HMAC-SHA1(secret + "&", StringToSign))

On a mismatch the message carries the server's string to sign, after the first `:`, as the gateway
does (the V1.0 SDK compares it with its own to tell a wrong secret from a wrong string), unless the
request holds a SecurityToken, which is never echoed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Mapping
from urllib.parse import quote

from ..credentials import Credentials
from . import alibaba as A
from .core import MalformedParameters, WireRequest, form_text, parse_pairs, same
from .replay import ReplayCache

SIGNATURE_METHOD = "HMAC-SHA1"
SIGNATURE_VERSION = "1.0"


def _encode(text: str) -> str:
    return quote(text, safe="~")


def request_parameters(request: WireRequest) -> dict[str, str]:
    """The query's and the form body's parameters, decoded: what is signed and what an endpoint
    should act on. A name given twice (in one or across both) is refused."""
    try:
        pairs = parse_pairs(request.query, "the query string") + parse_pairs(form_text(request), "the form body")
    except MalformedParameters as exc:
        raise A.rejected(A.INCOMPLETE_SIGNATURE, f"{exc}.") from None
    A.refuse_repeated(pairs, "parameter")
    return dict(pairs)


def string_to_sign(method: str, parameters: Mapping[str, str]) -> str:
    canon = "&".join(f"{_encode(name)}={_encode(parameters[name])}"
                     for name in sorted(parameters) if name != "Signature")
    return f"{method.upper()}&{_encode('/')}&{_encode(canon)}"


def compute_signature(secret: str, text: str) -> str:
    digest = hmac.new(f"{secret}&".encode("utf-8"), text.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def _require(parameters: Mapping[str, str], name: str, expected: str) -> None:
    value = parameters.get(name)
    if not value:
        raise A.missing(name)
    if value != expected:
        raise A.rejected(A.INCOMPLETE_SIGNATURE, f"{name} must be {expected}, got {value[:32]!r}.")


def verify(request: WireRequest, keys: Mapping[str, Credentials], *, now: float, nonces: ReplayCache | None,
           max_skew: float = A.MAX_CLOCK_SKEW_SECONDS) -> str:
    """The access key id that signed `request`, or SignatureRejected with the gateway's code.

    `now` is epoch seconds; `nonces` remembers `SignatureNonce` values (None turns replay refusal off)."""
    parameters = request_parameters(request)
    signature = parameters.get("Signature")
    if not signature:
        raise A.missing("Signature")
    _require(parameters, "SignatureMethod", SIGNATURE_METHOD)
    _require(parameters, "SignatureVersion", SIGNATURE_VERSION)
    if parameters.get("SignatureType"):
        raise A.rejected(A.INCOMPLETE_SIGNATURE,
                         f"SignatureType {parameters['SignatureType'][:32]!r} is not supported; leave it empty.")
    A.check_timestamp("Timestamp", parameters.get("Timestamp"), now, max_skew)
    nonce = parameters.get("SignatureNonce")
    if not nonce:
        raise A.missing("SignatureNonce")
    access_key_id = parameters.get("AccessKeyId", "")
    key = A.signing_key(keys, access_key_id, "AccessKeyId")
    text = string_to_sign(request.method, parameters)
    if not same(signature, compute_signature(key.access_key_secret, text)):
        rule = f"Signature must be HMAC-SHA1 with the secret of {access_key_id!r} over the sorted parameters."
        shown = "" if "SecurityToken" in parameters else f"server string to sign is:{text}"
        raise A.rejected(A.SIGNATURE_DOES_NOT_MATCH, rule, shown)
    A.check_security_token(key, parameters.get("SecurityToken"), "SecurityToken")
    A.claim_nonce(nonces, access_key_id, nonce, "SignatureNonce")
    return access_key_id
