"""Helpers of the local ROS API tests: templates on in-process echo providers, a hand-signed RPC v1 call."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import requests

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: Well-behaved Custom::Echo providers (Sleep, CreateSleep, Fail, FailDelete properties), loaded by file path.
PROVIDERS = REPO / "tests" / "stack" / "stack_providers.py"
TOKEN = "acs:fc:cn-hangzhou:123456789:services/tests/functions/echo"
REGION = "cn-hangzhou"


def echo_template(resources: dict[str, dict[str, Any]] | None = None, parameters: dict[str, Any] | None = None,
                  **extra: Any) -> str:
    """Custom::Echo resources (logical id -> Parameters) with an output per Name."""
    resources = resources or {"Echo": {"Name": "one"}}
    body = {name: {"Type": "Custom::Echo", "Properties": {"ServiceToken": TOKEN, "Timeout": 20, "Parameters": params}}
            for name, params in resources.items()}
    outputs = {f"{name}Name": {"Value": {"Fn::GetAtt": [name, "Name"]}, "Description": f"{name}'s name"}
               for name, params in resources.items() if "Name" in params}
    document: dict[str, Any] = {"ROSTemplateFormatVersion": "2015-09-01", "Resources": body, "Outputs": outputs, **extra}
    if parameters:
        document["Parameters"] = parameters
    return json.dumps(document)


def wait_until(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout} s")
        time.sleep(interval)


def _encode(text: str) -> str:
    return quote(text, safe="~")


def rpc_call(endpoint: str, key_id: str, secret: str, action: str, params: dict[str, str], *,
             form: dict[str, str] | None = None, nonce: str | None = None, secret_used: str | None = None,
             method: str = "POST") -> requests.Response:
    """An RPC v1 request as the `aliyun` CLI (alibaba-cloud-sdk-go) sends it: common parameters in the
    query, HMAC-SHA1 over `METHOD&%2F&enc(sorted params)` keyed with `secret&`, body params as a form.
    Signed here by hand, independently of the endpoint's verifier."""
    common = {"Action": action, "Version": "2019-09-10", "Format": "JSON", "AccessKeyId": key_id,
              "SignatureMethod": "HMAC-SHA1", "SignatureVersion": "1.0", "SignatureNonce": nonce or uuid.uuid4().hex,
              "Timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "RegionId": REGION}
    query = {**common, **params}
    signed = {**query, **(form or {})}
    canonical = "&".join(f"{_encode(k)}={_encode(signed[k])}" for k in sorted(signed))
    text = f"{method}&{_encode('/')}&{_encode(canonical)}"
    digest = hmac.new(f"{secret_used or secret}&".encode(), text.encode(), hashlib.sha1).digest()
    query["Signature"] = base64.b64encode(digest).decode()
    url = f"http://{endpoint}/?" + "&".join(f"{_encode(k)}={_encode(v)}" for k, v in query.items())
    body = "&".join(f"{_encode(k)}={_encode(v)}" for k, v in (form or {}).items())
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if form else {}
    return requests.request(method, url, data=body.encode() if form else None, headers=headers, timeout=30)
