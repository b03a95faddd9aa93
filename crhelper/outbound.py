"""All outbound HTTP for responses: URL choice, allowlist, TLS, timeouts, bounded retries.

Stdlib http.client only: this runs on every cold start, and `requests` alone costs ~100 ms of import.
"""

from __future__ import annotations

import fnmatch
import functools
import http.client
import random
import time
from dataclasses import dataclass
from email.utils import formatdate
from typing import Callable
from urllib.parse import urlsplit

from .config import DeliverySettings
from .logs import get_logger, redact_url

USER_AGENT = "ros-crhelper/0.1"
_log = get_logger("outbound")


@dataclass(frozen=True)
class DeliveryReport:
    """What happened to one response: delivered or not, after how many attempts, and why."""

    delivered: bool
    attempts: int
    status: int | None = None
    url_kind: str | None = None
    error: str | None = None


class _Retryable(Exception):
    """An attempt that may succeed if repeated (connection trouble, 429, 5xx)."""

    def __init__(self, message: str, retry_after: float | None = None, connection: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.connection = connection


class _Final(Exception):
    """An attempt whose answer will not change (other 4xx, a refused URL)."""


def host_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    """True when no allowlist is set, or the URL's host matches one of its patterns (`*.aliyuncs.com`)."""
    if not allowed:
        return True
    host = (urlsplit(url).hostname or "").lower()
    return any(fnmatch.fnmatchcase(host, pattern) for pattern in allowed)


def ordered_urls(public: str | None, intranet: str | None, mode: str, on_function_compute: bool) -> list[tuple[str, str]]:
    """(kind, url) in the order to try: the preferred one first, the other as a fallback."""
    prefer_intranet = mode == "intranet" or (mode == "auto" and on_function_compute)
    candidates = [("intranet", intranet), ("public", public)] if prefer_intranet else [("public", public), ("intranet", intranet)]
    return [(kind, url) for kind, url in candidates if url]


@functools.lru_cache(maxsize=8)
def _ssl_context(ca_bundle: str | None, verify: bool):  # type: ignore[no-untyped-def]
    import os
    import ssl  # only when a URL is https

    if not verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if ca_bundle and os.path.isdir(ca_bundle):
        return ssl.create_default_context(capath=ca_bundle)
    if ca_bundle or os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(cafile=ca_bundle)
    # The system bundle file makes OpenSSL parse every CA (~50 ms of a cold start); the hashed
    # certificate directory next to it is read lazily, one CA per handshake.
    directory = ssl.get_default_verify_paths().capath
    if directory and _has_hashed_certificates(directory):
        return ssl.create_default_context(capath=directory)
    return ssl.create_default_context()


def _has_hashed_certificates(directory: str) -> bool:
    """OpenSSL's capath lookup needs `<hash>.0` links; a plain folder of PEM files does not work."""
    import os
    import re

    try:
        with os.scandir(directory) as entries:
            return any(re.fullmatch(r"[0-9a-f]{8}\.[0-9]", entry.name) for entry in entries)
    except OSError:
        return False


def _attempt(url: str, body: bytes, settings: DeliverySettings, timeout: float) -> int:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _Final(f"response URL must be http(s) with a host, got {redact_url(url)}")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=min(settings.connect_timeout, timeout),
            context=_ssl_context(settings.ca_bundle, settings.verify_tls),
        )
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=min(settings.connect_timeout, timeout))
    headers = {
        "Content-Type": "application/json",
        "Date": formatdate(usegmt=True),
        "Content-Length": str(len(body)),
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }
    try:
        try:
            connection.connect()
        except (OSError, http.client.HTTPException) as exc:
            if type(exc).__name__ == "SSLCertVerificationError":
                raise _Final(f"TLS certificate of {parts.hostname} not trusted: {exc}; set CRHELPER_CA_BUNDLE to its CA") from None
            raise _Retryable(f"cannot connect: {exc.__class__.__name__}: {exc}", connection=True) from None
        connection.sock.settimeout(min(settings.read_timeout, timeout))  # type: ignore[union-attr]
        try:
            connection.request(settings.method, target, body=body, headers=headers)
            reply = connection.getresponse()
            reply_text = reply.read(512).decode("utf-8", errors="replace")
        except (OSError, http.client.HTTPException) as exc:
            raise _Retryable(f"{exc.__class__.__name__}: {exc}") from None
    finally:
        connection.close()
    status = reply.status
    if 200 <= status < 300:
        return status
    detail = f"HTTP {status}: {' '.join(reply_text.split())[:200]}"
    if status == 429 or status >= 500:
        retry_after = reply.getheader("Retry-After")
        raise _Retryable(detail, retry_after=float(retry_after) if retry_after and retry_after.isdigit() else None)
    raise _Final(detail)


def backoff_delay(attempt: int, settings: DeliverySettings, rand: Callable[[float, float], float] = random.uniform) -> float:
    """Exponential back-off with full jitter; attempt counts from 1."""
    return rand(0.0, min(settings.backoff_cap, settings.backoff_base * (2 ** (attempt - 1))))


def deliver(
    body: bytes,
    public_url: str | None,
    intranet_url: str | None,
    settings: DeliverySettings,
    *,
    on_function_compute: bool = False,
    deadline: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> DeliveryReport:
    """Send one response body. Retries only what can succeed, never past `deadline` (time.monotonic())."""
    urls = ordered_urls(public_url, intranet_url, settings.url_mode, on_function_compute)
    if not urls:
        return DeliveryReport(False, 0, error="the request has no ResponseURL to answer")
    refused = [url for _, url in urls if not host_allowed(url, settings.allowed_hosts)]
    if refused:
        error = f"response URL host not in CRHELPER_RESPONSE_HOSTS allowlist: {', '.join(redact_url(u) for u in refused)}"
        _log.error("response refused", extra={"fields": {"error": error}})
        return DeliveryReport(False, 0, error=error)
    index, attempts, last_error = 0, 0, "not attempted"
    while attempts < settings.max_attempts:
        kind, url = urls[index]
        remaining = (deadline - time.monotonic()) if deadline is not None else settings.connect_timeout + settings.read_timeout
        if remaining <= 0.05:
            last_error = f"gave up: no time left before the deadline ({last_error})"
            break
        attempts += 1
        try:
            status = _attempt(url, body, settings, remaining)
        except _Final as exc:
            last_error = str(exc)
            _log.error("response rejected", extra={"fields": {"url": redact_url(url), "attempt": attempts, "error": last_error}})
            return DeliveryReport(False, attempts, url_kind=kind, error=last_error)
        except _Retryable as exc:
            last_error = str(exc)
            _log.warning("response attempt failed", extra={"fields": {"url": redact_url(url), "attempt": attempts, "error": last_error}})
            if exc.connection and len(urls) > 1:
                index = (index + 1) % len(urls)  # the other network may reach ROS when this one cannot
            if attempts >= settings.max_attempts:
                break
            delay = min(exc.retry_after if exc.retry_after is not None else backoff_delay(attempts, settings), settings.backoff_cap)
            if deadline is not None and time.monotonic() + delay + 0.05 >= deadline:
                last_error = f"gave up: the next attempt would start after the deadline ({last_error})"
                break
            sleep(delay)
            continue
        _log.info("response delivered", extra={"fields": {"url": redact_url(url), "attempt": attempts, "status": status, "via": kind}})
        return DeliveryReport(True, attempts, status=status, url_kind=kind)
    _log.error("response not delivered", extra={"fields": {"attempts": attempts, "error": last_error}})
    return DeliveryReport(False, attempts, error=last_error)
