"""Verify CloudStack API signatures the way its Java server does (`ApiServer.verifyRequest`), for
requests as the `cs` package sends them (GET query or POST form body, `signatureVersion=3` with
`expires` by default).

    string = names sorted case-sensitively, `name=URLEncoder.encode(value).replace("+", "%20")`
             joined by `&` (`signature` left out), then lower-cased as a whole
    signature = base64(HMAC-SHA1(secret, string))

Java's encoder escapes `~` (`%7E`) where Python's `quote` does not, so a value with `~` signed by
`cs` fails here as it fails on a real server. For `signatureVersion=3`, `expires` must parse and lie
in the future; with `require_expires` (CloudStack's "enforce timestamps") every request needs it,
and no more than `max_ahead` seconds ahead. Every failure is CloudStack's one 401 text; `reason`
says which rule failed, for the endpoint's log.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import datetime
from typing import Mapping
from urllib.parse import quote

from ..credentials import Credentials
from .core import MalformedParameters, SignatureRejected, WireRequest, form_text, parse_pairs, same

UNAUTHORIZED_STATUS = 401
UNAUTHORIZED_TEXT = "unable to verify user credentials and/or request signature"
EXPIRES_FORMAT = "%Y-%m-%dT%H:%M:%S%z"
#: How far ahead `expires` may lie when timestamps are enforced (CloudStack: 15 minutes).
MAX_AHEAD_SECONDS = 900.0


def unauthorized(reason: str) -> SignatureRejected:
    return SignatureRejected(UNAUTHORIZED_STATUS, str(UNAUTHORIZED_STATUS), UNAUTHORIZED_TEXT, reason)


def request_parameters(request: WireRequest) -> dict[str, str]:
    """The query's then the form body's parameters, decoded; the first value of a name wins (the
    servlet's `getParameterMap()[name][0]`), so an endpoint acting on these acts on what was verified."""
    try:
        pairs = parse_pairs(request.query, "the query string") + parse_pairs(form_text(request), "the form body")
    except MalformedParameters as exc:
        raise unauthorized(str(exc)) from None
    parameters: dict[str, str] = {}
    for name, value in pairs:
        parameters.setdefault(name, value)
    return parameters


def java_url_encode(value: str) -> str:
    """`java.net.URLEncoder.encode(value, "UTF-8").replace("+", "%20")`: only letters, digits and
    `.-*_` stay as they are."""
    return quote(value, safe="*").replace("~", "%7E")


def string_to_sign(parameters: Mapping[str, str]) -> str:
    return "&".join(f"{name}={java_url_encode(parameters[name])}"
                    for name in sorted(parameters) if name.lower() != "signature").lower()


def compute_signature(secret: str, text: str) -> str:
    digest = hmac.new(secret.encode("utf-8"), text.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def _named(parameters: Mapping[str, str], name: str) -> str | None:
    """A parameter looked up case-insensitively, as the server's `equalsIgnoreCase` does."""
    for key, value in parameters.items():
        if key.lower() == name.lower():
            return value
    return None


def _check_expires(parameters: Mapping[str, str], now: float, require: bool, max_ahead: float) -> None:
    version, expires = _named(parameters, "signatureVersion"), _named(parameters, "expires")
    if version != "3":
        if require:
            raise unauthorized("signatureVersion: must be 3 (with expires) while timestamps are enforced")
        return
    if not expires:
        raise unauthorized("expires: required with signatureVersion=3")
    try:
        moment = datetime.strptime(expires, EXPIRES_FORMAT).timestamp()
    except ValueError:
        raise unauthorized(f"expires: {expires[:40]!r} must be formatted yyyy-MM-ddTHH:mm:ss+0000") from None
    if moment < now:
        raise unauthorized(f"expires: {expires!r} has passed")
    if require and moment - now > max_ahead:
        raise unauthorized(f"expires: {expires!r} is more than {max_ahead:g} s ahead")


def verify(request: WireRequest, keys: Mapping[str, Credentials], *, now: float,
           require_expires: bool = False, max_ahead: float = MAX_AHEAD_SECONDS) -> str:
    """The apiKey that signed `request`, or SignatureRejected (401, CloudStack's text, a precise `reason`)."""
    parameters = request_parameters(request)
    signature, api_key = _named(parameters, "signature"), _named(parameters, "apiKey")
    if not signature or not api_key:
        raise unauthorized("apiKey and signature: both required")
    _check_expires(parameters, now, require_expires, max_ahead)
    key = keys.get(api_key)
    if key is None:
        raise unauthorized(f"apiKey: {api_key[:64]!r} is not a known key")
    if not same(signature, compute_signature(key.access_key_secret, string_to_sign(parameters))):
        raise unauthorized(f"signature: does not match HMAC-SHA1 with the secret of apiKey {api_key[:64]!r} "
                           "over the sorted, Java-encoded, lower-cased parameters")
    return api_key
