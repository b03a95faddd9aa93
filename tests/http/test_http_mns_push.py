"""MNS topic → HTTP subscription → our endpoint's /mns route: signed pushes handled, forged ones refused."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
import requests
from mns.subscription import SubscriptionMeta
from mns.topic import TopicMessage, TopicMeta

from crhelper.local.mns_server import LocalMNS
from crhelper.testing import make_event
from crhelper.transports.http_config import EndpointConfig


@pytest.fixture
def local_mns():
    with LocalMNS(retry_time_scale=0.01) as mns:
        yield mns


def _config(mns: LocalMNS) -> EndpointConfig:
    return EndpointConfig(mns_cert_hosts=(urlsplit(mns.cert_url).hostname,), mns_require_https=False)


@pytest.mark.parametrize("fmt", ["XML", "JSON", "SIMPLIFIED"])
def test_topic_push_reaches_the_provider(local_mns, serve, response_server, fmt):
    server = serve(_config(local_mns))
    topic = local_mns.account().get_topic(f"ros-{fmt.lower()}")
    topic.create(TopicMeta())
    topic.get_subscription("provider").subscribe(SubscriptionMeta(server.url + "/mns", notify_content_format=fmt))
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": fmt}))
    topic.publish_message(TopicMessage(json.dumps(event)))
    body = response_server.wait_for(event["RequestId"], timeout=10)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == f"echo-{fmt}"


def test_unsigned_and_forged_pushes_are_refused(local_mns, serve, response_server):
    server = serve(_config(local_mns))
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "forged"}))
    reply = requests.post(server.url + "/mns", data=json.dumps(event), timeout=5)
    assert reply.status_code == 403
    assert "x-mns-signing-cert-url is missing" in reply.json()["Message"]
    forged = requests.post(
        server.url + "/mns", data=json.dumps(event), timeout=5,
        headers={"x-mns-signing-cert-url": "aHR0cHM6Ly9ldmlsLmV4YW1wbGUvY2VydC5wZW0=",  # https://evil.example/cert.pem
                 "Authorization": "AAAA", "Date": "Mon, 30 Nov 2026 10:00:00 GMT"},
    )
    assert forged.status_code == 403 and "evil.example" in forged.json()["Message"]
    assert response_server.captures == []


def test_default_allowlist_refuses_the_local_certificate_host(local_mns, serve, response_server):
    server = serve(EndpointConfig())
    topic = local_mns.account().get_topic("ros-default")
    topic.create(TopicMeta())
    topic.get_subscription("provider").subscribe(SubscriptionMeta(server.url + "/mns", notify_content_format="XML"))
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "x"}))
    message_id = topic.publish_message(TopicMessage(json.dumps(event))).message_id
    attempts = local_mns.wait_push_attempts(message_id, 1, timeout=5)
    assert attempts and attempts[0].status == 403
    assert response_server.captures == []
