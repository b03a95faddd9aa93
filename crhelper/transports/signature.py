"""`HttpConfig.SignKey` request signatures: signing, verification and replay detection (pure, stdlib).

What ROS documents (ROS CDK `ros.generated.ts`, `RosCustomResource.HttpConfigProperty.signKey`; spec §3.5):
with a SignKey, ROS adds ``"Signature": {"Date": "2021-03-11T13:32:02Z", "Value": "<40 hex>"}`` to the
request data and computes Value over these lines joined by ``\\n``::

    POST
    <content type: HttpConfig.ContentType, else application/json>
    <md5 of the request data without Signature: "json format, utf-8 encoded, sort keys, ensure ascii">
    <Signature.Date>
    <header 1 name>:<header 1 value>        (HttpConfig.Headers, sorted by name; no line when there are none)
    ...
    <the URL in the ServiceToken, e.g. https://abc.com>

then "calculate signature with sha1".

What we implement by default (`DEFAULT_VARIANT`), and why:

* Value = ``hmac.new(SignKey.encode("utf-8"), string_to_sign.encode("utf-8"), sha1).hexdigest()``.
  A keyed signature needs the key in the digest; HMAC is the standard way and the documented example
  Value is 40 lowercase hex characters, i.e. a hex SHA-1 digest. Verification uses `hmac.compare_digest`.
* The MD5 line is ``md5(json.dumps(data, sort_keys=True, ensure_ascii=True).encode("utf-8")).hexdigest()``
  with Python's default separators ``", "`` and ``": "``. The documented wording ("sort keys, ensure
  ascii") is a transcription of Python's `json.dumps` keyword arguments, so the ROS side very likely
  calls it with defaults; hex is the usual rendering of an MD5 in a string-to-sign.
* The date must be ``yyyy-MM-ddTHH:mm:ssZ`` (UTC) and within `max_skew` seconds of our clock, either way.

None of this has been confirmed against a real signed ROS request (spec §11 question 5), so every
uncertain choice is a field of `SignatureVariant`: plain SHA-1 over string-plus-key instead of HMAC,
MD5 as base64, compact JSON separators, the key as hex bytes. `sign()` uses the same variant, so the
stack emulator and this verifier always agree with each other.

Replays: `ReplayCache` remembers (StackId, RequestId, LogicalResourceId, Signature.Value) of accepted
requests for the freshness window. ROS stamps Signature.Date with "the UTC time to send request", so a
legitimate re-delivery of an Update or Delete (or a retried idempotent Create) is re-signed with a new
Date and therefore a new Value; it passes and the idempotency store absorbs it as a duplicate. The very
same Value presented twice means the same bytes were sent again — a replay — and is refused. The one
legitimate case this refuses is a byte-identical resend within the same second after our
acknowledgement was lost in transit; the first copy is then already being handled and answers the
ResponseURL, so nothing is lost. Requests we refuse for load (503) are never remembered, so ROS may
retry them unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Literal, Mapping

from ..cloud.signing.replay import ReplayCache  # the one replay cache; re-exported here

__all__ = [
    "DATE_FORMAT",
    "DEFAULT_MAX_SKEW",
    "DEFAULT_VARIANT",
    "ReplayCache",
    "SignatureError",
    "SignatureVariant",
    "VerifiedSignature",
    "data_md5",
    "format_date",
    "parse_date",
    "sign",
    "signed_body",
    "string_to_sign",
    "verify",
]

DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
DEFAULT_MAX_SKEW = 300.0
DEFAULT_CONTENT_TYPE = "application/json"
SIGNATURE_FIELD = "Signature"


class SignatureError(ValueError):
    """The request's signature is missing, malformed, stale or wrong; `field` names what, `rule` why."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


@dataclass(frozen=True)
class SignatureVariant:
    """The uncertain parts of the algorithm; the defaults are the documented reading (module docstring)."""

    #: "hmac-sha1": HMAC-SHA1 keyed with SignKey. "sha1-append": SHA-1 of string_to_sign + SignKey.
    digest: Literal["hmac-sha1", "sha1-append"] = "hmac-sha1"
    #: How the MD5 of the request data is written into the string to sign.
    md5_encoding: Literal["hex", "base64"] = "hex"
    #: `json.dumps` separators for the MD5 input; Python's defaults unless told otherwise.
    json_separators: tuple[str, str] = (", ", ": ")
    #: "utf-8": the SignKey text is the key. "hex": the SignKey is hex and its bytes are the key.
    key_encoding: Literal["utf-8", "hex"] = "utf-8"

    @classmethod
    def named(cls, spec: str) -> "SignatureVariant":
        """Parse ``digest=sha1-append,md5=base64,json=compact,key=hex`` (any subset) for CLI and env use."""
        values: dict[str, Any] = {}
        for part in (p.strip() for p in spec.split(",") if p.strip()):
            name, _, value = part.partition("=")
            if name == "digest" and value in ("hmac-sha1", "sha1-append"):
                values["digest"] = value
            elif name == "md5" and value in ("hex", "base64"):
                values["md5_encoding"] = value
            elif name == "json" and value in ("default", "compact"):
                values["json_separators"] = (", ", ": ") if value == "default" else (",", ":")
            elif name == "key" and value in ("utf-8", "hex"):
                values["key_encoding"] = value
            else:
                raise ValueError(
                    f"signature variant: unknown setting {part!r}; use digest=hmac-sha1|sha1-append, "
                    "md5=hex|base64, json=default|compact, key=utf-8|hex"
                )
        return cls(**values)


DEFAULT_VARIANT = SignatureVariant()


@dataclass(frozen=True)
class VerifiedSignature:
    """A signature that passed: its Date as epoch seconds and its Value, trimmed and lower-cased (the
    replay-cache key part: any spelling that verifies maps to the same key)."""

    date: float
    value: str


def format_date(epoch: float | None = None) -> str:
    """`Signature.Date` for a moment (now by default): UTC ``yyyy-MM-ddTHH:mm:ssZ``."""
    moment = datetime.fromtimestamp(time.time() if epoch is None else epoch, tz=timezone.utc)
    return moment.strftime(DATE_FORMAT)


def parse_date(text: str) -> float:
    """Epoch seconds of a `Signature.Date`; ValueError unless it is exactly ``yyyy-MM-ddTHH:mm:ssZ``."""
    return datetime.strptime(text, DATE_FORMAT).replace(tzinfo=timezone.utc).timestamp()


def _unsigned(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != SIGNATURE_FIELD}


def data_md5(data: Mapping[str, Any], variant: SignatureVariant = DEFAULT_VARIANT) -> str:
    """MD5 of the request data without `Signature`, serialised as the variant says."""
    text = json.dumps(_unsigned(data), sort_keys=True, ensure_ascii=True, separators=variant.json_separators)
    digest = hashlib.md5(text.encode("utf-8"))
    if variant.md5_encoding == "base64":
        return base64.b64encode(digest.digest()).decode("ascii")
    return digest.hexdigest()


def string_to_sign(
    data: Mapping[str, Any],
    *,
    date: str,
    url: str,
    content_type: str = DEFAULT_CONTENT_TYPE,
    headers: Mapping[str, str] | None = None,
    variant: SignatureVariant = DEFAULT_VARIANT,
) -> str:
    """The documented lines joined by newlines; one `name:value` line per custom header, sorted by name."""
    header_lines = [f"{name}:{value}" for name, value in sorted((headers or {}).items())]
    return "\n".join(["POST", content_type, data_md5(data, variant), date, *header_lines, url])


def _key_bytes(key: str, variant: SignatureVariant) -> bytes:
    if variant.key_encoding == "hex":
        try:
            return bytes.fromhex(key)
        except ValueError:
            raise SignatureError("SignKey", "must be hexadecimal with the key=hex signature variant") from None
    return key.encode("utf-8")


def _digest(key: str, text: str, variant: SignatureVariant) -> str:
    key_bytes = _key_bytes(key, variant)
    if variant.digest == "sha1-append":
        return hashlib.sha1(text.encode("utf-8") + key_bytes).hexdigest()
    return hmac.new(key_bytes, text.encode("utf-8"), hashlib.sha1).hexdigest()


def sign(
    data: Mapping[str, Any],
    *,
    key: str,
    url: str,
    date: str | None = None,
    content_type: str = DEFAULT_CONTENT_TYPE,
    headers: Mapping[str, str] | None = None,
    variant: SignatureVariant = DEFAULT_VARIANT,
) -> dict[str, str]:
    """The `Signature` object ROS would add to `data` (any existing `Signature` in `data` is ignored)."""
    if not key:
        raise SignatureError("SignKey", "must not be empty")
    stamp = date or format_date()
    text = string_to_sign(data, date=stamp, url=url, content_type=content_type, headers=headers, variant=variant)
    return {"Date": stamp, "Value": _digest(key, text, variant)}


def signed_body(data: Mapping[str, Any], **options: Any) -> dict[str, Any]:
    """`data` with its `Signature` added, ready to POST to a `web:` endpoint. Options as for `sign`."""
    body = _unsigned(data)
    body[SIGNATURE_FIELD] = sign(body, **options)
    return body


def _signature_object(body: Mapping[str, Any]) -> tuple[str, str]:
    raw = body.get(SIGNATURE_FIELD)
    if raw is None:
        raise SignatureError("Signature", "required when a SignKey is configured")
    if not isinstance(raw, Mapping):
        raise SignatureError("Signature", "must be an object with Date and Value")
    date, value = raw.get("Date"), raw.get("Value")
    if not isinstance(date, str) or not date:
        raise SignatureError("Signature.Date", "required, a string yyyy-MM-ddTHH:mm:ssZ")
    if not isinstance(value, str) or not value:
        raise SignatureError("Signature.Value", "required, a non-empty string")
    return date, value


def verify(
    body: Mapping[str, Any],
    *,
    key: str,
    urls: Iterable[str],
    content_type: str = DEFAULT_CONTENT_TYPE,
    headers: Mapping[str, str] | None = None,
    now: float | None = None,
    max_skew: float = DEFAULT_MAX_SKEW,
    variant: SignatureVariant = DEFAULT_VARIANT,
) -> VerifiedSignature:
    """Check `body["Signature"]`; `urls` are the ServiceToken URLs this endpoint may be called as.

    Raises SignatureError naming the field and the rule; the expected value is never revealed."""
    date, value = _signature_object(body)
    try:
        stamp = parse_date(date)
    except ValueError:
        raise SignatureError("Signature.Date", "must be UTC time formatted yyyy-MM-ddTHH:mm:ssZ") from None
    current = time.time() if now is None else now
    if abs(current - stamp) > max_skew:
        raise SignatureError("Signature.Date", f"must be within {max_skew:g} s of the server clock")
    normalized = value.strip().lower()
    presented = normalized.encode("ascii", "replace")
    matched = False
    for url in urls:
        text = string_to_sign(body, date=date, url=url, content_type=content_type, headers=headers, variant=variant)
        # Evaluate every candidate, so the time taken does not reveal which URL nearly matched.
        matched |= hmac.compare_digest(presented, _digest(key, text, variant).encode("ascii"))
    if not matched:
        raise SignatureError("Signature.Value", "does not match the request signed with the configured SignKey")
    # The normalized Value: Signature is outside the signed data, so a replay may respell it freely.
    return VerifiedSignature(stamp, normalized)
