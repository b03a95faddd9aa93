"""Verify that an HTTP push really comes from MNS (spec §4.3, [MNS-SIG]).

MNS signs each push with RSA-SHA1 and names its X.509 certificate by URL in
``x-mns-signing-cert-url``. Anyone can send such headers, so the URL's host must be
on an allowlist before the certificate is fetched, and the Date must be fresh so a
captured push cannot be replayed later. ``cryptography`` is imported lazily: this
module sits on the request path of a provider.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from .cloud.signing.replay import ReplayCache
from .cloud.signing.mns import string_to_sign as build_string_to_sign  # shared by request and push signing

__all__ = [
    "DEFAULT_CERT_HOSTS",
    "DEFAULT_MAX_AGE_SECONDS",
    "PushVerificationError",
    "PushVerdict",
    "CertificateFetcher",
    "build_string_to_sign",
    "replay_cache",
    "verify",
    "verify_wsgi",
]

# The host [MNS-SIG] documents. Newer MNS pages also name mns-cert.oss-cn-<region>.aliyuncs.com;
# pass such hosts in ``allowed_hosts`` once a real push shows them.
DEFAULT_CERT_HOSTS: frozenset[str] = frozenset({"mnstest.oss-cn-hangzhou.aliyuncs.com"})
# MNS rejects requests whose Date is more than 15 minutes off; pushes get the same window.
DEFAULT_MAX_AGE_SECONDS = 900.0
_MAX_CERT_BYTES = 64 * 1024


class PushVerificationError(Exception):
    """The push is not provably from MNS; ``reason`` says which check failed."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class PushVerdict:
    """What a verified push proved: who signed it, when, and for which subscription."""

    cert_url: str
    date: datetime
    message_id: str | None
    topic_owner: str | None
    topic_name: str | None
    subscription_name: str | None
    #: What the replay cache remembers for this push (certificate URL, signature bytes in hex).
    replay_key: tuple[str, ...] = ()


class CertificateFetcher:
    """Fetches certificates over HTTP(S) with a timeout and a size cap, caching the public key per URL."""

    def __init__(
        self, timeout: float = 5.0, cache_seconds: float = 3600.0, max_entries: int = 32, failure_seconds: float = 60.0
    ) -> None:
        if max_entries < 1:
            raise ValueError("CertificateFetcher.max_entries must be at least 1")
        self.timeout = timeout
        self.cache_seconds = cache_seconds
        #: A URL that could not be fetched is not tried again for this long: forged pushes naming an
        #: allowlisted host must not each hold a thread for the whole fetch timeout.
        self.failure_seconds = failure_seconds
        self._failures: OrderedDict[str, tuple[float, str]] = OrderedDict()
        # Bounded: every push names its own URL, and a sender may vary it (query strings) at will.
        self.max_entries = max_entries
        self._cache: OrderedDict[str, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def public_key(self, url: str) -> Any:
        """The certificate's public key; raises PushVerificationError when it cannot be had."""
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(url)
            if hit is not None and now - hit[0] < self.cache_seconds:
                return hit[1]
            failed = self._failures.get(url)
            if failed is not None and now - failed[0] < self.failure_seconds:
                raise PushVerificationError(failed[1])
        try:
            key = _load_public_key(self._download(url))
        except PushVerificationError as exc:
            with self._lock:
                self._failures[url] = (now, exc.reason)
                self._failures.move_to_end(url)
                while len(self._failures) > self.max_entries:
                    self._failures.popitem(last=False)
            raise
        with self._lock:
            self._cache[url] = (now, key)
            self._cache.move_to_end(url)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return key

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._failures.clear()

    def _download(self, url: str) -> bytes:
        where = _url_without_query(url)
        opener = urllib.request.build_opener(_RefuseRedirects)
        try:
            with opener.open(url, timeout=self.timeout) as resp:  # noqa: S310 - host checked by caller
                data = resp.read(_MAX_CERT_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                # The allowlist vouches for one host only: following a redirect would let that host (or
                # anyone controlling one of its paths) hand us another host's certificate.
                target = _url_without_query(str(exc.headers.get("Location") or "?"))
                raise PushVerificationError(
                    f"signing certificate URL {where} answered HTTP {exc.code}, a redirect to {target}; "
                    "redirects are not followed"
                ) from None
            raise PushVerificationError(f"cannot fetch signing certificate from {where}: HTTP {exc.code}") from None
        except Exception as exc:  # network errors of every kind mean "cannot verify"
            reason = f"cannot fetch signing certificate from {where}: {exc.__class__.__name__}"
            raise PushVerificationError(reason) from None
        if len(data) > _MAX_CERT_BYTES:
            raise PushVerificationError(f"signing certificate at {where} is larger than {_MAX_CERT_BYTES} bytes")
        return data


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Turn every 3xx into an HTTPError instead of following it."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None


_DEFAULT_FETCHER = CertificateFetcher()


def verify(
    method: str,
    resource: str,
    headers: Mapping[str, str],
    body: bytes | None = None,
    *,
    allowed_hosts: Iterable[str] = DEFAULT_CERT_HOSTS,
    require_https: bool = True,
    max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
    fetcher: CertificateFetcher | None = None,
    now: datetime | None = None,
    replays: ReplayCache | None = None,
) -> PushVerdict:
    """Verify one push; ``resource`` is the request path (with its query string, if any).

    With ``body`` given, it must match the signed Content-MD5 header, since the
    signature covers the headers and not the body itself.

    With ``replays`` (a ReplayCache whose window covers the Date window both ways, see
    `replay_cache`), a push whose exact signature was already accepted is refused: the Date
    check alone lets a captured push be replayed for 15 minutes. MNS signs every attempt anew
    (each carries its own x-mns-request-id), so its own retries pass. The signature is
    remembered only once it verified, so a forger cannot pre-empt a genuine push; call
    ``replays.release(verdict.replay_key)`` when the push is then refused for a retryable reason.
    """
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    cert_url = _cert_url(lower, allowed_hosts, require_https)
    date = _fresh_date(lower, max_age_seconds, now)
    signature = _signature(lower)
    if body is not None:
        _check_body_md5(lower, body)
    key = (_DEFAULT_FETCHER if fetcher is None else fetcher).public_key(cert_url)
    candidates = [build_string_to_sign(method, resource, lower)]
    lowered_type = lower.get("content-type", "").lower()
    if lowered_type != lower.get("content-type", ""):
        candidates.append(build_string_to_sign(method, resource, lower, content_type=lowered_type))
    if not any(_rsa_sha1_ok(key, signature, text.encode("utf-8")) for text in candidates):
        raise PushVerificationError("Authorization signature does not match the string-to-sign for this certificate")
    # The decoded signature bytes: a replay that respells the base64 (padding, whitespace) maps here too.
    replay_key = (cert_url, signature.hex())
    if replays is not None and not replays.claim(replay_key):
        raise PushVerificationError(
            "replayed push: this exact signature was already accepted within the Date window (replay guard)"
        )
    return PushVerdict(
        cert_url=cert_url,
        date=date,
        message_id=lower.get("x-mns-message-id"),
        topic_owner=lower.get("x-mns-topic-owner"),
        topic_name=lower.get("x-mns-topic-name"),
        subscription_name=lower.get("x-mns-subscription-name"),
        replay_key=replay_key,
    )


def replay_cache(max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS, max_entries: int = 10_000) -> ReplayCache:
    """A cache of accepted push signatures for ``verify(replays=...)``: remembered for twice the Date
    window (a Date may be that far behind or ahead), at most ``max_entries`` (oldest first out)."""
    return ReplayCache(2 * max_age_seconds, max_entries)


def verify_wsgi(environ: Mapping[str, Any], body: bytes, **options: Any) -> PushVerdict:
    """``verify`` for a WSGI request: rebuilds the headers and the path from ``environ``."""
    headers = {k[5:].replace("_", "-").lower(): str(v) for k, v in environ.items() if k.startswith("HTTP_")}
    for key, name in (("CONTENT_TYPE", "content-type"), ("CONTENT_LENGTH", "content-length")):
        if environ.get(key):
            headers[name] = str(environ[key])
    path = str(environ.get("SCRIPT_NAME", "")) + str(environ.get("PATH_INFO", "")) or "/"
    if environ.get("QUERY_STRING"):
        path += "?" + str(environ["QUERY_STRING"])
    return verify(str(environ.get("REQUEST_METHOD", "POST")), path, headers, body, **options)


def _cert_url(lower: Mapping[str, str], allowed_hosts: Iterable[str], require_https: bool) -> str:
    encoded = lower.get("x-mns-signing-cert-url")
    if not encoded:
        raise PushVerificationError("header x-mns-signing-cert-url is missing")
    try:
        url = base64.b64decode(encoded.strip(), validate=True).decode("ascii")
    except (binascii.Error, ValueError):
        raise PushVerificationError("header x-mns-signing-cert-url is not base64 of an ASCII URL") from None
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        raise PushVerificationError("header x-mns-signing-cert-url does not hold a valid URL") from None
    allowed = {h.lower() for h in allowed_hosts}
    if parts.scheme not in ("http", "https") or (require_https and parts.scheme != "https"):
        need = "https" if require_https else "http or https"
        raise PushVerificationError(
            f"signing certificate URL scheme {parts.scheme!r} is not allowed; it must be {need}"
        )
    if "@" in parts.netloc:
        # Credentials in the URL make hosts ambiguous between parsers; MNS never sends them.
        raise PushVerificationError("signing certificate URL must not carry user information ('@')")
    if host not in allowed:
        raise PushVerificationError(f"signing certificate host {host!r} is not in the allowlist {sorted(allowed)}")
    if require_https and port not in (None, 443):
        raise PushVerificationError("signing certificate URL must use the default https port 443")
    # Fetch exactly what was checked: rebuilt from the parsed parts, without fragment or stray spaces.
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{parts.query}" if parts.query else "")


def _fresh_date(lower: Mapping[str, str], max_age_seconds: float, now: datetime | None) -> datetime:
    raw = lower.get("date")
    if not raw:
        raise PushVerificationError("header Date is missing")
    try:
        date = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        raise PushVerificationError("header Date is not an RFC 1123 GMT date") from None
    if date.tzinfo is None:
        date = date.replace(tzinfo=timezone.utc)
    current = now or datetime.now(timezone.utc)
    skew = abs((current - date).total_seconds())
    if skew > max_age_seconds:
        raise PushVerificationError(
            f"header Date is {skew:.0f} s away from now; at most {max_age_seconds:.0f} s is accepted (replay guard)"
        )
    return date


def _signature(lower: Mapping[str, str]) -> bytes:
    raw = lower.get("authorization")
    if not raw:
        raise PushVerificationError("header Authorization is missing")
    try:
        return base64.b64decode(raw.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise PushVerificationError("header Authorization is not base64") from None


def _check_body_md5(lower: Mapping[str, str], body: bytes) -> None:
    declared = lower.get("content-md5", "").strip()
    if not declared:
        if body:
            raise PushVerificationError("header Content-MD5 is missing, so the body is not covered by the signature")
        return
    digest = hashlib.md5(body)  # noqa: S324 - MNS protocol field, not a security hash on its own
    hex_digest = digest.hexdigest()
    accepted = (
        hex_digest,
        base64.b64encode(hex_digest.encode("ascii")).decode("ascii"),
        base64.b64encode(digest.digest()).decode("ascii"),
    )
    if declared.lower() != accepted[0] and declared not in accepted[1:]:
        raise PushVerificationError("body does not match header Content-MD5 (hex, base64 of hex, or base64 accepted)")


def _load_public_key(data: bytes) -> Any:
    from cryptography import x509

    try:
        if b"-----BEGIN" in data:
            cert = x509.load_pem_x509_certificate(data)
        else:
            cert = x509.load_der_x509_certificate(data)
    except ValueError:
        raise PushVerificationError("signing certificate is not a PEM or DER X.509 certificate") from None
    now = datetime.now(timezone.utc)
    if not (cert.not_valid_before_utc <= now <= cert.not_valid_after_utc):
        raise PushVerificationError("signing certificate is outside its validity period")
    return cert.public_key()


def _rsa_sha1_ok(key: Any, signature: bytes, data: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    if not isinstance(key, rsa.RSAPublicKey):
        raise PushVerificationError("signing certificate does not hold an RSA public key")
    try:
        key.verify(signature, data, padding.PKCS1v15(), hashes.SHA1())  # noqa: S303 - MNS protocol mandates SHA1
    except InvalidSignature:
        return False
    return True


def _url_without_query(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"

