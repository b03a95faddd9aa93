"""mns_push.verify against real signed pushes from LocalMNS, and against forged or replayed ones."""

from __future__ import annotations

import base64
import hashlib
import io
import threading
from datetime import datetime, timedelta, timezone
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

import pytest
from mns.topic import TopicMeta, TopicMessage
from mns.subscription import SubscriptionMeta

from crhelper import mns_push
from crhelper.local.mns_cert import make_signing_identity
from crhelper.local.mns_server import LocalMNS
from crhelper.mns_push import CertificateFetcher, PushVerificationError, build_string_to_sign

LOCAL = {"allowed_hosts": {"127.0.0.1"}, "require_https": False}


@pytest.fixture()
def captured(account: Any, name: str, push_receiver: Any) -> Any:
    topic = account.get_topic(name)
    topic.create(TopicMeta())
    topic.get_subscription("s").subscribe(SubscriptionMeta(push_receiver.url, notify_content_format="XML"))
    topic.publish_message(TopicMessage('{"RequestType": "Delete"}'))
    (push,) = push_receiver.wait_for(1)
    assert push.error is None, push.error
    return push


def _verify(push: Any, headers: dict[str, str] | None = None, body: bytes | None = None, **options: Any) -> Any:
    merged = {**LOCAL, **options}
    return mns_push.verify("POST", push.path, headers or push.headers, push.body if body is None else body, **merged)


def _with(push: Any, **changes: str) -> dict[str, str]:
    headers = {k.lower(): v for k, v in push.headers.items()}
    headers.update({k.replace("_", "-"): v for k, v in changes.items()})
    return headers


def _reason(call: Callable[[], Any]) -> str:
    with pytest.raises(PushVerificationError) as info:
        call()
    return info.value.reason


def test_genuine_push_verifies(captured: Any) -> None:
    verdict = _verify(captured)
    assert verdict.cert_url.endswith("/x509_public_certificate.pem")
    assert abs((datetime.now(timezone.utc) - verdict.date).total_seconds()) < 60


def test_verify_wsgi_rebuilds_the_request(captured: Any) -> None:
    environ = {"REQUEST_METHOD": "POST", "SCRIPT_NAME": "", "PATH_INFO": "/notifications",
               "QUERY_STRING": "token=abc", "wsgi.input": io.BytesIO(captured.body)}
    for key, value in captured.headers.items():
        name = key.upper().replace("-", "_")
        environ[name if name in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + name] = value
    assert mns_push.verify_wsgi(environ, captured.body, **LOCAL).message_id == captured.verdict.message_id


def test_tampered_body_is_refused(captured: Any) -> None:
    assert "Content-MD5" in _reason(lambda: _verify(captured, body=captured.body.replace(b"Delete", b"Create")))


def test_tampered_body_with_recomputed_md5_is_refused(captured: Any) -> None:
    body = captured.body.replace(b"Delete", b"Create")
    md5 = base64.b64encode(hashlib.md5(body).hexdigest().encode()).decode()
    reason = _reason(lambda: _verify(captured, _with(captured, content_md5=md5), body))
    assert "signature does not match" in reason


def test_tampered_mns_header_is_refused(captured: Any) -> None:
    reason = _reason(lambda: _verify(captured, _with(captured, x_mns_topic_name="other-topic")))
    assert "signature does not match" in reason


def test_other_path_is_refused(captured: Any) -> None:
    with pytest.raises(PushVerificationError, match="signature does not match"):
        mns_push.verify("POST", "/elsewhere", captured.headers, captured.body, **LOCAL)


def test_signature_by_another_key_is_refused(captured: Any) -> None:
    forger = make_signing_identity("forger")
    headers = _with(captured)
    headers["authorization"] = forger.sign_b64(build_string_to_sign("POST", captured.path, headers))
    assert "signature does not match" in _reason(lambda: _verify(captured, headers))


def test_unlisted_cert_host_is_refused_before_fetching(captured: Any, local_mns: LocalMNS) -> None:
    forged_url = f"http://localhost:{local_mns.port}/x509_public_certificate.pem"
    headers = _with(captured, x_mns_signing_cert_url=base64.b64encode(forged_url.encode()).decode())
    assert "not in the allowlist" in _reason(lambda: _verify(captured, headers))
    # The default allowlist holds only the MNS certificate bucket.
    assert "not in the allowlist" in _reason(lambda: mns_push.verify(
        "POST", captured.path, captured.headers, captured.body, require_https=False))
    assert "must be https" in _reason(lambda: mns_push.verify("POST", captured.path, captured.headers))


def test_stale_push_is_refused_as_replay(captured: Any) -> None:
    later = datetime.now(timezone.utc) + timedelta(minutes=16)
    assert "replay" in _reason(lambda: _verify(captured, now=later))
    assert _verify(captured, now=datetime.now(timezone.utc) + timedelta(minutes=14))


@pytest.mark.parametrize(
    "header, value, expected",
    [
        ("authorization", None, "Authorization is missing"),
        ("authorization", "%%%not-base64", "Authorization is not base64"),
        ("x-mns-signing-cert-url", None, "x-mns-signing-cert-url is missing"),
        ("x-mns-signing-cert-url", "%%%", "not base64"),
        ("date", None, "Date is missing"),
        ("date", "yesterday", "not an RFC 1123"),
        ("content-md5", None, "Content-MD5 is missing"),
    ],
)
def test_malformed_headers_are_refused(captured: Any, header: str, value: str | None, expected: str) -> None:
    headers = _with(captured)
    if value is None:
        headers.pop(header)
    else:
        headers[header] = value
    assert expected in _reason(lambda: _verify(captured, headers))


def test_unreachable_certificate_is_refused(captured: Any) -> None:
    url = "http://127.0.0.1:9/cert.pem?sig=secret"
    headers = _with(captured, x_mns_signing_cert_url=base64.b64encode(url.encode()).decode())
    reason = _reason(lambda: _verify(captured, headers, fetcher=CertificateFetcher(timeout=1)))
    assert "cannot fetch signing certificate" in reason and "secret" not in reason


@pytest.fixture()
def cert_server() -> Iterator[tuple[Any, str, list[str], Callable[[], None]]]:
    identity = make_signing_identity("cache-test")
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(identity.cert_pem)))
            self.end_headers()
            self.wfile.write(identity.cert_pem)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    stopped = []

    def stop() -> None:
        if not stopped:
            stopped.append(True)
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

    try:
        yield identity, f"http://127.0.0.1:{server.server_address[1]}/cert.pem", hits, stop
    finally:
        stop()


def test_certificate_is_fetched_once_per_url(cert_server: Any) -> None:
    identity, url, hits, stop = cert_server
    body = b"hello"
    headers = {
        "content-md5": hashlib.md5(body).hexdigest(),  # hex, as seen on a captured real push
        "content-type": "text/plain;charset=utf-8",
        "date": formatdate(usegmt=True),
        "x-mns-signing-cert-url": base64.b64encode(url.encode()).decode(),
        "x-mns-version": "2015-06-06",
    }
    headers["authorization"] = identity.sign_b64(build_string_to_sign("POST", "/n", headers))
    fetcher = CertificateFetcher()
    for _ in range(2):
        mns_push.verify("POST", "/n", headers, body, fetcher=fetcher, **LOCAL)
    stop()
    mns_push.verify("POST", "/n", headers, body, fetcher=fetcher, **LOCAL)  # served from cache
    assert hits == ["/cert.pem"]


def _signed_headers(identity: Any, url: str, body: bytes) -> dict[str, str]:
    headers = {
        "content-md5": hashlib.md5(body).hexdigest(),
        "content-type": "text/plain;charset=utf-8",
        "date": formatdate(usegmt=True),
        "x-mns-signing-cert-url": base64.b64encode(url.encode()).decode(),
        "x-mns-version": "2015-06-06",
    }
    headers["authorization"] = identity.sign_b64(build_string_to_sign("POST", "/n", headers))
    return headers


def test_cert_url_with_userinfo_or_an_odd_https_port_is_refused(cert_server: Any) -> None:
    identity, url, hits, _ = cert_server
    port = url.split(":")[2].split("/")[0]
    body = b"hello"
    cases = [
        (f"http://evil.example@127.0.0.1:{port}/cert.pem", LOCAL, "user information"),
        (f"https://127.0.0.1:{port}/cert.pem", {"allowed_hosts": {"127.0.0.1"}}, "port 443"),
        (f"https://127.0.0.1:0x1bb/cert.pem", {"allowed_hosts": {"127.0.0.1"}}, "not hold a valid URL"),
    ]
    for forged, options, expected in cases:
        headers = _signed_headers(identity, forged, body)
        reason = _reason(lambda: mns_push.verify("POST", "/n", headers, body, fetcher=CertificateFetcher(timeout=1), **options))
        assert expected in reason, (forged, reason)
    assert hits == []  # refused before anything was fetched
    verdict = mns_push.verify("POST", "/n", _signed_headers(identity, f" {url}#frag", body), body, **LOCAL)
    assert verdict.cert_url == url  # the URL fetched is the one checked, rebuilt from its parts


def test_certificate_cache_stays_bounded_when_urls_vary(cert_server: Any) -> None:
    identity, url, hits, _ = cert_server
    body = b"hello"
    fetcher = CertificateFetcher(max_entries=3)
    for n in range(6):
        mns_push.verify("POST", "/n", _signed_headers(identity, f"{url}?v={n}", body), body, fetcher=fetcher, **LOCAL)
    assert len(hits) == 6 and len(fetcher) == 3


def test_a_failed_certificate_fetch_is_not_retried_for_a_while() -> None:
    """Forged pushes naming an unreachable certificate must not each wait out the fetch timeout."""
    hits: list[str] = []

    class Broken(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/cert.pem"
        fetcher = CertificateFetcher(timeout=2, failure_seconds=60)
        for _ in range(3):
            with pytest.raises(PushVerificationError, match="cannot fetch signing certificate"):
                fetcher.public_key(url)
        assert len(hits) == 1
        fetcher.clear()
        with pytest.raises(PushVerificationError):
            fetcher.public_key(url)
        assert len(hits) == 2
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
