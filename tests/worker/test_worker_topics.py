"""Topic paths end to end: topic -> queue subscription -> worker, and the Function Compute MNS trigger
forms (topic STREAM and JSON, queue CloudEvents batch) through provider.fc_handler."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

import pytest
from mns.queue import Message
from mns.subscription import SubscriptionMeta
from mns.topic import Base64TopicMessage, TopicMessage, TopicMeta

from crhelper import Provider, Result, mns_push
from crhelper.local.mns_server import LocalMNS
from crhelper.testing import make_event
from worker_support import queue_empty, wait_until

#: Every test here waits out the worker's 1 s long poll when it stops: slow by construction.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.slow]


@pytest.fixture()
def greeting(providers: Any, store_url: str) -> Provider:
    provider = providers()

    @provider.create("Custom::Greeting")
    def create(props: dict, request: Any) -> Result:
        return Result(physical_id=f"greeting-{props['Name']}", data={"Greeting": f"hello {props['Name']}"})

    return provider


def _topic(local_mns: LocalMNS, name: str) -> Any:
    topic = local_mns.account().get_topic(name)
    topic.create(TopicMeta())
    return topic


def _subscribe(topic: Any, sub_name: str, endpoint: str, fmt: str) -> None:
    topic.get_subscription(sub_name).subscribe(SubscriptionMeta(endpoint, notify_content_format=fmt))


@pytest.mark.parametrize("fmt", ["XML", "JSON", "SIMPLIFIED"])
@pytest.mark.parametrize("message_class", [TopicMessage, Base64TopicMessage])
def test_topic_to_queue_subscription_to_worker(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, greeting: Provider,
    start_worker: Any, fmt: str, message_class: type,
) -> None:
    queue_name = "q-" + name
    make_queue(queue_name)
    topic = _topic(local_mns, name)
    _subscribe(topic, "to-worker", local_mns.queue_arn(queue_name), fmt)
    event = response_server.attach(make_event("Create", "Custom::Greeting", {"Name": fmt}))
    topic.publish_message(message_class(json.dumps(event)))
    worker = start_worker(greeting, queue_name)
    body = response_server.wait_for(event["RequestId"])
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Greeting": f"hello {fmt}"}
    wait_until(lambda: queue_empty(local_mns, queue_name))
    assert worker.stats()["poison"] == 0


class FcTrigger:
    """Stands in for Function Compute's MNS topic trigger: verifies the signed push, then invokes the
    provider with the event FC would pass (STREAM: the body, or {body, attrs}; JSON: the notification)."""

    def __init__(self, provider: Provider, with_attrs: bool) -> None:
        self.provider = provider
        self.with_attrs = with_attrs
        self.results: list[dict] = []
        self.errors: list[str] = []
        self.done = threading.Condition()
        trigger = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = dict(self.headers.items())
                try:
                    mns_push.verify("POST", self.path, headers, body, allowed_hosts={"127.0.0.1"}, require_https=False)
                except mns_push.PushVerificationError as exc:
                    trigger.errors.append(exc.reason)
                    self._reply(403)
                    return
                event: Any = body
                if trigger.with_attrs:
                    tag = headers.get("x-mns-message-tag", "")
                    event = json.dumps({"body": body.decode("utf-8"), "attrs": {"tag": tag}}).encode()
                result = json.loads(trigger.provider.fc_handler(event, None))
                self._reply(204)
                with trigger.done:
                    trigger.results.append(result)
                    trigger.done.notify_all()

            def _reply(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/invoke"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def wait(self, count: int, timeout: float = 5.0) -> list[dict]:
        with self.done:
            assert self.done.wait_for(lambda: len(self.results) >= count, timeout), "trigger not invoked"
            return list(self.results)


@pytest.fixture()
def fc_trigger() -> Iterator[Callable[[Provider, bool], FcTrigger]]:
    made: list[FcTrigger] = []

    def make(provider: Provider, with_attrs: bool = False) -> FcTrigger:
        trigger = FcTrigger(provider, with_attrs)
        trigger.thread.start()
        made.append(trigger)
        return trigger

    yield make
    for trigger in made:
        trigger.server.shutdown()
        trigger.server.server_close()
        trigger.thread.join(5)


@pytest.mark.parametrize(("fmt", "with_attrs"), [("SIMPLIFIED", False), ("SIMPLIFIED", True), ("JSON", False)],
                         ids=["stream", "stream-with-attrs", "json"])
def test_fc_topic_trigger_forms(
    local_mns: LocalMNS, name: str, response_server: Any, greeting: Provider, fc_trigger: Any, fmt: str, with_attrs: bool,
) -> None:
    trigger = fc_trigger(greeting, with_attrs)
    topic = _topic(local_mns, name)
    _subscribe(topic, "fc", trigger.url, fmt)
    event = response_server.attach(make_event("Create", "Custom::Greeting", {"Name": "topic"}))
    topic.publish_message(TopicMessage(json.dumps(event), message_tag="ros"))
    assert response_server.wait_for(event["RequestId"])["Status"] == "SUCCESS"
    result = trigger.wait(1)[0]
    assert trigger.errors == []
    statuses = [result.get("Status")] if "Status" in result else [m.get("Status") for m in result["Messages"]]
    assert statuses == ["SUCCESS"]


def _cloud_event(local_mns: LocalMNS, queue_name: str, message: Any) -> dict:
    """A message received from the queue, wrapped the way FC's queue trigger (EventBridge) passes it."""
    return {
        "id": str(uuid.uuid4()), "source": "MNS-Function-mnstrigger", "specversion": "1.0",
        "type": "mns:Queue:SendMessage", "datacontenttype": "application/json; charset=utf-8",
        "subject": local_mns.queue_arn(queue_name), "time": "2026-01-01T00:00:00.000Z",
        "aliyunaccountid": local_mns.account_id, "aliyunpublishtime": "2026-01-01T00:00:00.000Z",
        "aliyunoriginalaccountid": local_mns.account_id, "aliyuneventbusname": "MNS-Function-mnstrigger",
        "aliyunregionid": local_mns.region, "aliyunpublishaddr": "127.0.0.1",
        "data": {"requestId": uuid.uuid4().hex, "messageId": message.message_id, "messageBody": message.message_body},
    }


def test_fc_queue_trigger_batch_answers_each_and_survives_a_bad_one(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, greeting: Provider,
) -> None:
    queue = make_queue(name)
    events = [response_server.attach(make_event("Create", "Custom::Greeting", {"Name": f"b{i}"})) for i in range(3)]
    queue.send_message(Message(json.dumps(events[0])))
    queue.send_message(Message("{not json"))
    local_mns.account().get_queue(name).send_message(Message(json.dumps(events[1])))  # base64 body
    queue.send_message(Message(json.dumps(events[2])))
    received = queue.batch_receive_message(16, 1)
    assert len(received) == 4
    batch = [_cloud_event(local_mns, name, message) for message in received]
    summary = json.loads(greeting.fc_handler(json.dumps(batch).encode("utf-8"), None))["Messages"]
    for event in events:
        assert response_server.wait_for(event["RequestId"])["Status"] == "SUCCESS"
    assert sorted(entry.get("Status") or "error" for entry in summary) == ["SUCCESS", "SUCCESS", "SUCCESS", "error"]
    bad = next(entry for entry in summary if "Error" in entry)
    assert bad["MessageId"] == received[1].message_id and "JSON" in bad["Error"]
