"""Support for the local ECS tests: a fast LocalECS for fixtures (`local_ecs`; tests of other
folders put this folder and tests/cloud on sys.path to use it), requests signed by hand (ACS3 and
RPC, for the quick tests that need no SDK) sent over a real socket, and a zombie-aware liveness
check; `sdk` (the optional-SDK rule) is the cloud tests'."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import secrets
import time
from typing import Any, Iterator, Mapping
from urllib.parse import urlencode

import pytest
from cloud_support import sdk

from crhelper.cloud.signing import acs3, rpc
from crhelper.cloud.signing.core import WireRequest
from crhelper.local.ecs_server import EcsTimings, LocalECS

__all__ = ["FAST", "REGION", "acs3_request", "local_ecs", "pid_alive", "rpc_request", "sdk", "send"]

REGION = "cn-hangzhou"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
#: Fast enough for tests, slow enough that a poll sees each transitory status.
FAST = EcsTimings(pending=0.05, starting=0.05, stopping=0.05, forced_stopping=0.02)


def local_ecs(monkeypatch: pytest.MonkeyPatch, *, with_sdk: bool = False) -> Iterator[LocalECS]:
    """A started fast LocalECS for a fixture to yield from; the credentials chain never reaches for
    100.100.100.200 (cloud-apis.md §1.2). `with_sdk`: the test drives the official SDK (skipped
    without it, except on CI)."""
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")
    if with_sdk:
        sdk("alibabacloud_ecs20140526.client")
    with LocalECS(timings=FAST, kill_grace=0.3) as server:
        yield server


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def acs3_request(host: str, action: str, params: Mapping[str, str], key: str, secret: str, *,
                 date: str | None = None, nonce: str | None = None, version: str = "2014-05-26") -> WireRequest:
    """A POST signed like the 7.x SDK signs it (parameters in the query, empty body)."""
    headers = {"host": host, "x-acs-action": action, "x-acs-version": version,
               "x-acs-content-sha256": EMPTY_SHA256, "x-acs-date": date or _now(),
               "x-acs-signature-nonce": nonce or secrets.token_hex(16)}
    unsigned = WireRequest.of("POST", "/?" + urlencode(params), headers)
    names = sorted(unsigned.headers)
    signature = acs3.compute_signature(secret, acs3.string_to_sign(acs3.canonical_request(unsigned, names)))
    headers["authorization"] = (f"ACS3-HMAC-SHA256 Credential={key},SignedHeaders={';'.join(names)},"
                                f"Signature={signature}")
    return WireRequest.of("POST", unsigned.target, headers)


def rpc_request(host: str, action: str, params: Mapping[str, str], key: str, secret: str, *,
                timestamp: str | None = None, nonce: str | None = None) -> WireRequest:
    """A POST signed like the V1.0 SDK and `signature_algorithm="v2"` sign it."""
    full = {**params, "Action": action, "Version": "2014-05-26", "Format": "json", "AccessKeyId": key,
            "SignatureMethod": "HMAC-SHA1", "SignatureVersion": "1.0",
            "SignatureNonce": nonce or secrets.token_hex(16), "Timestamp": timestamp or _now()}
    full["Signature"] = rpc.compute_signature(secret, rpc.string_to_sign("POST", full))
    return WireRequest.of("POST", "/?" + urlencode(full), {"host": host})


def send(endpoint: str, request: WireRequest) -> tuple[int, dict[str, str], Any]:
    """Send `request` as is over a real connection; (status, lower-cased headers, parsed JSON)."""
    host, _, port = endpoint.partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        headers = {name: value for name, value in request.headers.items() if name != "host"}
        connection.putrequest(request.method, request.target, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", request.header("host") or endpoint)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(request.body)))
        connection.endheaders(request.body)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(response.read())
    finally:
        connection.close()


def pid_alive(pid: int) -> bool:
    """The process exists and is not a zombie (an unreaped zombie of PID 1 has ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
