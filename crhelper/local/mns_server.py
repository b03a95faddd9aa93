"""A local MNS endpoint speaking the HTTP/XML API (2015-06-06) that ``aliyun-mns-sdk`` uses.

Queues (create, attributes, send with delay and priority, batch send, long-poll
receive, visibility timeouts, delete, change visibility, peek) and topics (publish,
subscriptions pushing to a queue or to a signed HTTP endpoint with retries). Every
request's signature is checked, and errors come back as MNS's XML errors, so code
tested here meets the same failures it would meet in the cloud.

Run standalone with ``python -m crhelper.local.mns_server --port 8100``.
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import time
import uuid
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from crhelper.local import mns_xml
from crhelper.local.mns_auth import check_request
from crhelper.local.mns_cert import SigningIdentity, make_signing_identity
from crhelper.local.mns_pusher import PushAttempt, Pusher, is_supported_endpoint
from crhelper.local.mns_state import (
    CONTENT_FORMATS,
    MAX_BATCH,
    NOTIFY_STRATEGIES,
    Broker,
    MnsError,
    StoredMessage,
    invalid_argument,
    ranged_int,
)
from crhelper.servers import LocalHTTPServer, ServerThread
from crhelper.signals import stop_requested

__all__ = ["LocalMNS", "main", "CERT_PATH"]

LOG = logging.getLogger(__name__)
CERT_PATH = "/x509_public_certificate.pem"
API_VERSION = "2015-06-06"


class Reply:
    """Status, extra headers and body of one answer."""

    def __init__(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.body = body
        self.headers = headers or {}


def _ms(seconds: float) -> str:
    return str(int(seconds * 1000))


class MnsApi:
    """Maps MNS REST calls onto the Broker; independent of the socket server."""

    def __init__(self, broker: Broker, pusher: Pusher, base_url: Callable[[], str], owner: str) -> None:
        self.broker = broker
        self.pusher = pusher
        self.base_url = base_url
        self.owner = owner

    def handle(self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes) -> Reply:
        parts = [p for p in path.split("/") if p]
        if not parts and query.get("accountmeta") == "true":
            if method == "GET":
                return Reply(200, mns_xml.render("Account", [("LoggingBucket", "")]))
            return Reply(204)
        if parts and parts[0] == "queues":
            return self._queues(method, parts[1:], query, headers, body)
        if parts and parts[0] == "topics":
            return self._topics(method, parts[1:], query, headers, body)
        raise MnsError(400, "InvalidRequestURL", "Http request URL format invalid.")

    # ----------------------------------------------------------------- queues
    def _queues(
        self, method: str, rest: list[str], query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> Reply:
        if not rest and method == "GET":
            return self._list(headers, self.broker.list_queues, "Queues", "Queue", "QueueURL", "queues")
        if len(rest) == 1:
            name = rest[0]
            if method == "PUT" and query.get("metaoverride") == "true":
                self.broker.set_queue_attributes(name, mns_xml.parse_fields(body, "Queue"))
                return Reply(204)
            if method == "PUT":
                created = self.broker.create_queue(name, mns_xml.parse_fields(body, "Queue"))
                return Reply(201 if created else 204, headers={"Location": f"{self.base_url()}/queues/{name}"})
            if method == "GET":
                return Reply(200, self._queue_attributes(name))
            if method == "DELETE":
                self.broker.delete_queue(name)
                return Reply(204)
        if len(rest) == 2 and rest[1] == "messages":
            return self._messages(method, rest[0], query, body)
        raise MnsError(400, "InvalidRequestURL", "Http request URL format invalid.")

    def _queue_attributes(self, name: str) -> bytes:
        queue, counts = self.broker.queue_snapshot(name)
        a = queue.attrs
        return mns_xml.render("Queue", [
            ("QueueName", queue.name),
            ("CreateTime", str(int(queue.create_time))),
            ("LastModifyTime", str(int(queue.last_modify_time))),
            ("VisibilityTimeout", str(a["VisibilityTimeout"])),
            ("MaximumMessageSize", str(a["MaximumMessageSize"])),
            ("MessageRetentionPeriod", str(a["MessageRetentionPeriod"])),
            ("DelaySeconds", str(a["DelaySeconds"])),
            ("PollingWaitSeconds", str(a["PollingWaitSeconds"])),
            ("ActiveMessages", str(counts["ActiveMessages"])),
            ("InactiveMessages", str(counts["InactiveMessages"])),
            ("DelayMessages", str(counts["DelayMessages"])),
            ("LoggingEnabled", "True" if a["LoggingEnabled"] else "False"),
        ])

    def _messages(self, method: str, queue: str, query: dict[str, str], body: bytes) -> Reply:
        if method == "POST":
            return self._send(queue, body)
        if method == "GET":
            return self._receive(queue, query)
        if method == "DELETE":
            if "ReceiptHandle" in query:
                self.broker.delete_message(queue, query["ReceiptHandle"])
                return Reply(204)
            return self._batch_delete(queue, body)
        if method == "PUT":
            handle = query.get("ReceiptHandle")
            if not handle:
                raise MnsError(400, "MissingReceiptHandle", "ReceiptHandle is required.")
            if "VisibilityTimeout" not in query:
                raise MnsError(400, "MissingVisibilityTimeout", "VisibilityTimeout is required.")
            timeout = ranged_int("VisibilityTimeout", query["VisibilityTimeout"], 1, 43200)
            msg = self.broker.change_visibility(queue, handle, timeout)
            return Reply(200, mns_xml.render("ChangeVisibility", [
                ("ReceiptHandle", msg.receipt_handle or ""), ("NextVisibleTime", _ms(msg.visible_at)),
            ]))
        raise MnsError(400, "InvalidRequestURL", "Http request URL format invalid.")

    def _send(self, queue: str, body: bytes) -> Reply:
        if mns_xml.root_name(body) == "Messages":
            items = mns_xml.parse_list(body, "Messages", "Message")
            if not 1 <= len(items) <= MAX_BATCH:
                raise invalid_argument(f"The count of messages should between 1 and {MAX_BATCH}.")
            self.broker.queue_snapshot(queue)  # QueueNotExist before any message is stored
            sent = [self._send_one(queue, item) for item in items]
            rows = [[("MessageId", m.message_id), ("MessageBodyMD5", m.body_md5)] for m in sent]
            return Reply(201, mns_xml.render_list("Messages", "Message", rows))
        msg = self._send_one(queue, mns_xml.parse_fields(body, "Message"))
        return Reply(201, mns_xml.render("Message", [("MessageId", msg.message_id), ("MessageBodyMD5", msg.body_md5)]))

    def _send_one(self, queue: str, fields: dict[str, str]) -> StoredMessage:
        text = fields.get("MessageBody", "")
        if not text:
            raise invalid_argument("The value of MessageBody should between 1 and 65536 seconds/bytes.")
        delay = ranged_int("DelaySeconds", fields["DelaySeconds"], 0, 604800) if fields.get("DelaySeconds") else None
        priority = ranged_int("Priority", fields["Priority"], 1, 16) if fields.get("Priority") else None
        return self.broker.send(queue, text, delay, priority)

    def _receive(self, queue: str, query: dict[str, str]) -> Reply:
        peek = query.get("peekonly") == "true"
        batch = "numOfMessages" in query
        count = ranged_int("numOfMessages", query["numOfMessages"], 1, MAX_BATCH) if batch else 1
        wait: float | None = None
        if "waitseconds" in query and not peek:
            wait = ranged_int("waitseconds", query["waitseconds"], 0, 30)
        messages = self.broker.receive(queue, count, 0.0 if peek else wait, peek=peek)
        rows = [_message_fields(m, peek) for m in messages]
        if batch:
            return Reply(200, mns_xml.render_list("Messages", "Message", rows))
        return Reply(200, mns_xml.render("Message", rows[0]))

    def _batch_delete(self, queue: str, body: bytes) -> Reply:
        handles = mns_xml.parse_text_list(body, "ReceiptHandles", "ReceiptHandle")
        if not handles:
            raise MnsError(400, "MissingReceiptHandle", "ReceiptHandle is required.")
        errors = []
        for handle in handles:
            try:
                self.broker.delete_message(queue, handle)
            except MnsError as exc:
                if exc.code == "QueueNotExist":
                    raise
                errors.append([("ErrorCode", exc.code), ("ErrorMessage", exc.message), ("ReceiptHandle", handle)])
        if errors:
            return Reply(404, mns_xml.render_list("Errors", "Error", errors))
        return Reply(204)

    # ----------------------------------------------------------------- topics
    def _topics(
        self, method: str, rest: list[str], query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> Reply:
        if not rest and method == "GET":
            return self._list(headers, self.broker.list_topics, "Topics", "Topic", "TopicURL", "topics")
        if len(rest) == 1:
            name = rest[0]
            if method == "PUT" and query.get("metaoverride") == "true":
                self.broker.set_topic_attributes(name, mns_xml.parse_fields(body, "Topic"))
                return Reply(204)
            if method == "PUT":
                created = self.broker.create_topic(name, mns_xml.parse_fields(body, "Topic"))
                return Reply(201 if created else 204, headers={"Location": f"{self.base_url()}/topics/{name}"})
            if method == "GET":
                return Reply(200, self._topic_attributes(name))
            if method == "DELETE":
                self.broker.delete_topic(name)
                return Reply(204)
        if len(rest) == 2 and rest[1] == "messages" and method == "POST":
            return self._publish(rest[0], body)
        if len(rest) == 2 and rest[1] == "subscriptions" and method == "GET":
            topic = rest[0]

            def lister(prefix: str, number: int, marker: str) -> tuple[list[str], str]:
                return self.broker.list_subscriptions(topic, prefix, number, marker)

            return self._list(headers, lister, "Subscriptions", "Subscription", "SubscriptionURL",
                              f"topics/{topic}/subscriptions", with_meta=False)
        if len(rest) == 3 and rest[1] == "subscriptions":
            return self._subscription(method, rest[0], rest[2], query, body)
        raise MnsError(400, "InvalidRequestURL", "Http request URL format invalid.")

    def _topic_attributes(self, name: str) -> bytes:
        topic = self.broker.topic_snapshot(name)
        return mns_xml.render("Topic", [
            ("TopicName", topic.name),
            ("CreateTime", str(int(topic.create_time))),
            ("LastModifyTime", str(int(topic.last_modify_time))),
            ("MaximumMessageSize", str(topic.attrs["MaximumMessageSize"])),
            ("MessageRetentionPeriod", "86400"),
            ("MessageCount", str(topic.message_count)),
            ("LoggingEnabled", "True" if topic.attrs["LoggingEnabled"] else "False"),
        ])

    def _publish(self, topic: str, body: bytes) -> Reply:
        fields = mns_xml.parse_fields(body, "Message")
        text = fields.get("MessageBody", "")
        if not text:
            raise invalid_argument("The value of MessageBody should between 1 and 65536 seconds/bytes.")
        message, targets = self.broker.publish(topic, text, fields.get("MessageTag", ""))
        self.pusher.deliver(message, targets)
        return Reply(201, mns_xml.render("Message", [("MessageId", message.message_id),
                                                     ("MessageBodyMD5", message.body_md5)]))

    def _subscription(self, method: str, topic: str, name: str, query: dict[str, str], body: bytes) -> Reply:
        if method == "PUT" and query.get("metaoverride") == "true":
            fields = mns_xml.parse_fields(body, "Subscription")
            self.broker.set_subscription_strategy(topic, name, _choice("NotifyStrategy", fields, NOTIFY_STRATEGIES))
            return Reply(204)
        if method == "PUT":
            fields = mns_xml.parse_fields(body, "Subscription")
            endpoint = fields.get("Endpoint", "")
            if not is_supported_endpoint(endpoint):
                raise invalid_argument(
                    "The value of Endpoint is invalid: use acs:mns:<region>:<account>:queues/<name> or an http(s) URL."
                )
            created = self.broker.subscribe(
                topic, name, endpoint,
                _choice("NotifyStrategy", fields, NOTIFY_STRATEGIES),
                _choice("NotifyContentFormat", fields, CONTENT_FORMATS),
                fields.get("FilterTag", ""),
            )
            location = f"{self.base_url()}/topics/{topic}/subscriptions/{name}"
            return Reply(201 if created else 204, headers={"Location": location})
        if method == "GET":
            sub = self.broker.subscription_snapshot(topic, name)
            return Reply(200, mns_xml.render("Subscription", [
                ("TopicOwner", self.owner), ("TopicName", sub.topic), ("SubscriptionName", sub.name),
                ("Endpoint", sub.endpoint), ("NotifyStrategy", sub.notify_strategy),
                ("NotifyContentFormat", sub.content_format), ("FilterTag", sub.filter_tag),
                ("CreateTime", str(int(sub.create_time))), ("LastModifyTime", str(int(sub.last_modify_time))),
            ]))
        if method == "DELETE":
            self.broker.unsubscribe(topic, name)
            return Reply(204)
        raise MnsError(400, "InvalidRequestURL", "Http request URL format invalid.")

    # ----------------------------------------------------------------- shared
    def _list(self, headers: dict[str, str], lister: Callable[[str, int, str], tuple[list[str], str]],
              root: str, item: str, url_field: str, prefix_path: str, with_meta: bool = True) -> Reply:
        raw_number = headers.get("x-mns-ret-number", "")
        number = ranged_int("RetNumber", raw_number, 1, 1000) if raw_number else 0
        names, marker = lister(headers.get("x-mns-prefix", ""), number, headers.get("x-mns-marker", ""))
        rows = [[(url_field, f"{self.base_url()}/{prefix_path}/{n}")] for n in names]
        if with_meta and headers.get("x-mns-with-meta", "").lower() == "true":
            kind = "QueueName" if root == "Queues" else "TopicName"
            rows = [row + [(kind, n)] for row, n in zip(rows, names)]
        extra = [("NextMarker", marker)] if marker else []
        return Reply(200, mns_xml.render_list(root, item, rows, extra))


def _choice(name: str, fields: dict[str, str], allowed: tuple[str, ...]) -> str:
    value = fields.get(name) or allowed[0]
    if value not in allowed:
        raise invalid_argument(f"The value of {name} should be one of {', '.join(allowed)}.")
    return value


def _message_fields(m: StoredMessage, peek: bool) -> list[tuple[str, str]]:
    fields = [("MessageId", m.message_id)]
    if not peek:
        fields.append(("ReceiptHandle", m.receipt_handle or ""))
    fields += [("MessageBodyMD5", m.body_md5), ("MessageBody", m.body), ("EnqueueTime", _ms(m.enqueue_time))]
    if not peek:
        fields.append(("NextVisibleTime", _ms(m.visible_at)))
    fields += [
        ("FirstDequeueTime", _ms(m.first_dequeue_time or m.enqueue_time)),
        ("DequeueCount", str(m.dequeue_count)),
        ("Priority", str(m.priority)),
    ]
    return fields


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes: avoid a 40 ms stall each
    timeout = 300  # idle keep-alive connections are closed after this many seconds
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._serve()

    def do_PUT(self) -> None:  # noqa: N802
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        self._serve()

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature from BaseHTTPRequestHandler
        LOG.debug("local MNS %s %s", self.command, urlsplit(self.path).path)

    def _serve(self) -> None:
        owner: LocalMNS = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request_id = uuid.uuid4().hex.upper()[:24]
        split = urlsplit(self.path)
        if self.command == "GET" and split.path == CERT_PATH:
            self._send(Reply(200, owner.cert_pem, {"Content-Type": "application/x-pem-file"}), request_id)
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            check_request(self.command, self.path, headers, body, owner.credentials, time.time())
            query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
            reply = owner.started_api.handle(self.command, split.path, query, headers, body)
        except MnsError as exc:
            reply = Reply(exc.status, mns_xml.render_error(exc.code, exc.message, request_id, owner.host_id))
        except mns_xml.MalformedXML as exc:
            reply = Reply(400, mns_xml.render_error("MalformedXML", str(exc), request_id, owner.host_id))
        except Exception:  # a bug here must still answer like MNS, not drop the connection
            LOG.exception("local MNS failed on %s %s", self.command, split.path)
            reply = Reply(500, mns_xml.render_error("InternalError", "Interal error.", request_id, owner.host_id))
        self._send(reply, request_id)

    def _send(self, reply: Reply, request_id: str) -> None:
        self.send_response(reply.status)
        self.send_header("x-mns-request-id", request_id)
        self.send_header("x-mns-version", API_VERSION)
        self.send_header("Date", formatdate(usegmt=True))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.body and "Content-Type" not in reply.headers:
            self.send_header("Content-Type", "text/xml;charset=utf-8")
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if reply.body:
            self.wfile.write(reply.body)


class _Server(LocalHTTPServer):
    """The HTTP side of one LocalMNS. Handler threads are joined on stop (a long-poll receive
    must not outlive its account), after ``close_connections`` has ended idle keep-alive ones."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], owner: "LocalMNS") -> None:
        self.owner = owner
        super().__init__(address, _Handler)


class LocalMNS:
    """A local MNS account on 127.0.0.1.

    ``with LocalMNS() as mns: Account(mns.endpoint, mns.access_key_id, mns.access_key_secret)``
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        account_id: str = "1234567890123456",
        region: str = "cn-hangzhou",
        access_key_id: str = "LocalMnsAccessKeyId",
        access_key_secret: str | None = None,
        retry_time_scale: float = 1.0,
        push_timeout: float = 5.0,
    ) -> None:
        self.host = host
        self.port = port
        self.account_id = account_id
        self.region = region
        self.access_key_id = access_key_id
        self.access_key_secret = access_key_secret or secrets.token_urlsafe(24)
        self.retry_time_scale = retry_time_scale
        self.push_timeout = push_timeout
        self._server: _Server | None = None
        self._serving: ServerThread | None = None
        self._identity: SigningIdentity | None = None
        self.broker: Broker | None = None
        self.pusher: Pusher | None = None
        self.api: MnsApi | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> "LocalMNS":
        if self._server is not None:
            return self
        self._identity = make_signing_identity()
        self.broker = Broker()
        self._server = _Server((self.host, self.port), self)
        self.port = self._server.port
        self.pusher = Pusher(self.broker, self._identity, lambda: self.cert_url, self.account_id,
                             self.retry_time_scale, self.push_timeout)
        self.api = MnsApi(self.broker, self.pusher, lambda: self.endpoint, self.account_id)
        self._serving = ServerThread(self._server, "local-mns").start()
        return self

    def stop(self) -> None:
        serving, self._server, self._serving = self._serving, None, None
        if serving is None:
            return
        assert self.broker is not None and self.pusher is not None
        self.broker.close()  # wakes long-poll receives
        serving.stop()
        self.pusher.close()

    def __enter__(self) -> "LocalMNS":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ addresses
    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def host_id(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def cert_url(self) -> str:
        """Where the push-signing certificate is served (no authentication, like MNS's OSS bucket)."""
        return f"{self.endpoint}{CERT_PATH}"

    @property
    def cert_pem(self) -> bytes:
        if self._identity is None:
            raise RuntimeError("LocalMNS is not started")
        return self._identity.cert_pem

    def holds_message(self, queue: str, message_id: str) -> bool:
        """Whether `queue` still holds the message (a consumer has not deleted it yet)."""
        return self.broker is not None and self.broker.holds(queue, message_id)

    @property
    def started_api(self) -> MnsApi:
        """The request router; start() sets it before the server begins serving."""
        if self.api is None:
            raise RuntimeError("LocalMNS is not started")
        return self.api

    @property
    def credentials(self) -> dict[str, str]:
        return {self.access_key_id: self.access_key_secret}

    def queue_arn(self, name: str) -> str:
        return f"acs:mns:{self.region}:{self.account_id}:queues/{name}"

    def topic_arn(self, name: str) -> str:
        return f"acs:mns:{self.region}:{self.account_id}:topics/{name}"

    def push_attempts(self) -> list[PushAttempt]:
        """Every HTTP/queue push tried so far, in order."""
        return [] if self.pusher is None else self.pusher.attempts()

    def wait_push_attempts(self, message_id: str, count: int, timeout: float = 5.0) -> list[PushAttempt]:
        """The push attempts for one published message, once ``count`` exist or ``timeout`` passed."""
        if self.pusher is None:
            return []
        return self.pusher.wait_attempts(message_id, count, timeout)

    def account(self) -> Any:
        """An ``mns.account.Account`` bound to this endpoint and key."""
        from mns.account import Account

        return Account(self.endpoint, self.access_key_id, self.access_key_secret)


def main(argv: list[str] | None = None) -> int:
    """Serve a LocalMNS until SIGINT/SIGTERM; prints its coordinates as one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m crhelper.local.mns_server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--account-id", default="1234567890123456")
    parser.add_argument("--region", default="cn-hangzhou")
    parser.add_argument("--access-key-id", default="LocalMnsAccessKeyId")
    parser.add_argument("--access-key-secret", default=None,
                        help="secret the SDK must sign with; generated and printed when omitted")
    parser.add_argument("--retry-time-scale", type=float, default=1.0,
                        help="multiply push retry delays (e.g. 0.01 for quick local runs)")
    args = parser.parse_args(argv)
    generated = args.access_key_secret is None
    mns = LocalMNS(args.host, args.port, account_id=args.account_id, region=args.region,
                   access_key_id=args.access_key_id, access_key_secret=args.access_key_secret,
                   retry_time_scale=args.retry_time_scale)
    with stop_requested() as stop, mns:
        info = {"endpoint": mns.endpoint, "account_id": mns.account_id, "region": mns.region,
                "access_key_id": mns.access_key_id, "cert_url": mns.cert_url}
        if generated:
            info["access_key_secret"] = mns.access_key_secret
        print(json.dumps(info), flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
