"""MNS push verification under attack: exact replays inside the Date window, and certificate redirects.

Real sockets throughout: a local certificate server (one host serves the certificate, an allowlisted
one redirects to it), pushes signed with a real RSA identity, and a real `crhelper` HTTP endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest
import requests

from crhelper import Provider, Result, mns_push
from crhelper.cli.serve import BackgroundServer
from crhelper.local.mns_cert import make_signing_identity
from crhelper.mns_push import CertificateFetcher, PushVerificationError, build_string_to_sign
from crhelper.testing import ResponseServer, make_event
from crhelper.transports.http import wsgi_app
from crhelper.transports.http_config import EndpointConfig


class CertServer:
    """Serves /cert.pem; every other path answers 302 to `redirect_to` (another host's certificate)."""

    def __init__(self, cert_pem: bytes, redirect_to: str | None = None) -> None:
        self.hits: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                owner.hits.append(self.path)
                if self.path == "/cert.pem":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(cert_pem)))
                    self.end_headers()
                    self.wfile.write(cert_pem)
                    return
                self.send_response(302)
                self.send_header("Location", owner.redirect_to or "/cert.pem")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.redirect_to = redirect_to
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def url(self, host: str, path: str) -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@pytest.fixture()
def attacker() -> Any:
    return make_signing_identity("attacker")


@pytest.fixture()
def cert_server(attacker: Any) -> Iterator[CertServer]:
    server = CertServer(attacker.cert_pem)
    yield server
    server.close()


def _signed(identity: Any, cert_url: str, body: bytes, resource: str = "/mns") -> dict[str, str]:
    headers = {
        "content-md5": hashlib.md5(body).hexdigest(),
        "content-type": "text/plain;charset=utf-8",
        "date": formatdate(usegmt=True),
        "x-mns-message-id": "M-1",
        "x-mns-request-id": "R-1",
        "x-mns-signing-cert-url": base64.b64encode(cert_url.encode()).decode(),
        "x-mns-version": "2015-06-06",
    }
    headers["authorization"] = identity.sign_b64(build_string_to_sign("POST", resource, headers))
    return headers


def test_redirect_from_an_allowlisted_host_to_another_hosts_certificate_is_refused(cert_server: CertServer, attacker: Any) -> None:
    # "localhost" is allowlisted; it redirects to the attacker's certificate on 127.0.0.1 (not allowlisted).
    cert_server.redirect_to = cert_server.url("127.0.0.1", "/cert.pem")
    body = b'{"RequestType": "Delete"}'
    headers = _signed(attacker, cert_server.url("localhost", "/x509_public_certificate.pem"), body)
    with pytest.raises(PushVerificationError) as info:
        mns_push.verify("POST", "/mns", headers, body, allowed_hosts={"localhost"}, require_https=False,
                        fetcher=CertificateFetcher(timeout=2))
    reason = info.value.reason
    assert "HTTP 302" in reason and "redirect" in reason and "127.0.0.1" in reason, reason
    assert cert_server.hits == ["/x509_public_certificate.pem"]  # the redirect target was never fetched
    # The same certificate served directly by an allowlisted host verifies: only the redirect was refused.
    direct = _signed(attacker, cert_server.url("127.0.0.1", "/cert.pem"), body)
    assert mns_push.verify("POST", "/mns", direct, body, allowed_hosts={"127.0.0.1"}, require_https=False)


def test_exact_replay_within_the_date_window_is_refused(cert_server: CertServer, attacker: Any) -> None:
    body = b'{"RequestType": "Delete"}'
    url = cert_server.url("127.0.0.1", "/cert.pem")
    options: dict[str, Any] = {"allowed_hosts": {"127.0.0.1"}, "require_https": False, "replays": mns_push.replay_cache()}
    headers = _signed(attacker, url, body)
    assert mns_push.verify("POST", "/mns", headers, body, **options)
    for spelled in (headers["authorization"], " " + headers["authorization"] + " "):
        with pytest.raises(PushVerificationError, match="replayed push"):
            mns_push.verify("POST", "/mns", {**headers, "authorization": spelled}, body, **options)
    # MNS signs every attempt anew (its own request id): a retry of the same message passes.
    retry = _signed(attacker, url, body) | {"x-mns-request-id": "R-2"}
    retry["authorization"] = attacker.sign_b64(build_string_to_sign("POST", "/mns", retry))
    assert mns_push.verify("POST", "/mns", retry, body, **options)
    # A forged push carrying a genuine signature fails verification and is not remembered.
    fresh = _signed(attacker, url, body) | {"x-mns-request-id": "R-3"}
    fresh["authorization"] = attacker.sign_b64(build_string_to_sign("POST", "/mns", fresh))
    with pytest.raises(PushVerificationError, match="does not match"):
        mns_push.verify("POST", "/mns", {**fresh, "x-mns-topic-name": "other"}, body, **options)
    assert mns_push.verify("POST", "/mns", fresh, body, **options)


def test_serve_mns_route_answers_a_push_once_and_refuses_its_replay(
    cert_server: CertServer, attacker: Any, response_server: ResponseServer
) -> None:
    provider = Provider(store="none")
    runs: list[str] = []

    @provider.create("Custom::Echo")
    def create(props: dict, request: Any) -> Result:
        runs.append(request.request_id)
        return Result(physical_id="echo-1")

    config = EndpointConfig(mns_cert_hosts=("127.0.0.1",), mns_require_https=False)
    event = response_server.attach(make_event("Create", "Custom::Echo", {}))
    body = json.dumps(event).encode()
    with BackgroundServer(wsgi_app(provider, config=config)) as server:
        headers = _signed(attacker, cert_server.url("127.0.0.1", "/cert.pem"), body)
        first = requests.post(server.url + "/mns", data=body, headers=headers, timeout=10)
        assert first.status_code == 200, first.text
        response_server.wait_for(event["RequestId"], timeout=10)
        replay = requests.post(server.url + "/mns", data=body, headers=headers, timeout=10)
        assert replay.status_code == 409, replay.text
        assert replay.json()["Error"] == "Replayed" and "replayed push" in replay.json()["Message"]
    assert runs == [event["RequestId"]]
    assert len(response_server.responses_for(event["RequestId"])) == 1
