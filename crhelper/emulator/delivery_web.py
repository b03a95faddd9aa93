"""`web:` / `web[sync]:` ServiceTokens: the request is POSTed to the URL for real, as ROS does.

Headers and body follow `HttpConfig` (spec §3.5, §4.4): `ContentType` (JSON or form), extra
`Headers`, and a `Signature` object when `SignKey` is set. Async tokens must be acknowledged
with 2xx (the answer comes on the ResponseURL); for `web[sync]:` the reply body is the answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import requests

from ..servicetoken import WebToken
from ..transports.http import encode_form
from ..transports.signature import signed_body

#: ROS waits a fixed 10 s for a web[sync] reply (spec §3.4).
SYNC_LIMIT = 10.0
JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"


class WebDeliveryError(RuntimeError):
    """The endpoint refused or garbled the request; the message names the status and the rule."""


def request_body(request: Mapping[str, Any], token: WebToken, http_config: Mapping[str, Any]) -> tuple[bytes, dict[str, str]]:
    """(body, headers) exactly as ROS would send them for this HttpConfig (pure)."""
    content_type = str(http_config.get("ContentType") or JSON_TYPE)
    if content_type not in (JSON_TYPE, FORM_TYPE):
        raise WebDeliveryError(f"HttpConfig.ContentType: must be {JSON_TYPE} or {FORM_TYPE}, got {content_type!r}")
    extra = http_config.get("Headers") or {}
    if not isinstance(extra, Mapping):
        raise WebDeliveryError("HttpConfig.Headers: must be a map of header name to value")
    headers = {str(k): str(v) for k, v in extra.items()}
    data: dict[str, Any] = dict(request)
    sign_key = http_config.get("SignKey")
    if sign_key:
        data = signed_body(data, key=str(sign_key), url=token.url, content_type=content_type, headers=headers)
    if content_type == FORM_TYPE:
        raw = encode_form(data).encode("utf-8")
    else:
        raw = json.dumps(data, ensure_ascii=False).encode("utf-8")
    headers["Content-Type"] = content_type
    return raw, headers


def post(token: WebToken, request: Mapping[str, Any], http_config: Mapping[str, Any], timeout: float) -> bytes | None:
    """POST the request; the raw reply body for sync tokens (the response), None for async ones after a 2xx."""
    raw, headers = request_body(request, token, http_config)
    limit = min(timeout, SYNC_LIMIT) if token.sync else min(timeout, 30.0)
    try:
        reply = requests.post(token.url, data=raw, headers=headers, timeout=(5.0, limit))
    except requests.Timeout:
        raise WebDeliveryError(f"web endpoint did not reply within {limit:g} s") from None
    except requests.RequestException as exc:
        raise WebDeliveryError(f"web endpoint unreachable: {type(exc).__name__}") from None
    if not 200 <= reply.status_code < 300:
        raise WebDeliveryError(f"web endpoint answered HTTP {reply.status_code}: {reply.text[:200]}")
    return reply.content if token.sync else None
