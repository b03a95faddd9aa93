"""The real aliyun-mns-sdk against LocalMNS: every queue operation, timing and error."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from email.utils import formatdate
from typing import Any

import pytest
import requests
from mns.account import Account
from mns.mns_exception import MNSServerException
from mns.queue import Message, QueueMeta

from crhelper.local.mns_server import LocalMNS

# The SDK warns about its own deprecated queue-meta fields on every get_attributes().
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _queue(account: Any, name: str, encoding: bool = False, **attrs: int) -> Any:
    queue = account.get_queue(name)
    queue.set_encoding(encoding)
    meta = QueueMeta()
    for key, value in attrs.items():
        getattr(meta, f"set_{key}")(value)
    queue.create(meta)
    return queue


def _error(fn: Any, *args: Any) -> MNSServerException:
    with pytest.raises(MNSServerException) as info:
        fn(*args)
    return info.value


def test_create_get_set_delete_queue(account: Any, name: str, local_mns: LocalMNS) -> None:
    queue = account.get_queue(name)
    url = queue.create(QueueMeta(vis_timeout=45, polling_wait_sec=3))
    assert url == f"{local_mns.endpoint}/queues/{name}"
    attrs = queue.get_attributes()
    assert (attrs.visibility_timeout, attrs.polling_wait_seconds, attrs.delay_seconds) == (45, 3, 0)
    assert attrs.queue_name == name and attrs.maximum_message_size == 65536
    # Creating again with the same attributes succeeds; different attributes conflict.
    queue.create(QueueMeta(vis_timeout=45, polling_wait_sec=3))
    assert _error(queue.create, QueueMeta(vis_timeout=10)).type == "QueueAlreadyExist"
    meta = QueueMeta()
    meta.set_delay_seconds(2)
    queue.set_attributes(meta)
    assert queue.get_attributes().delay_seconds == 2
    queue.delete()
    assert _error(queue.get_attributes).type == "QueueNotExist"


def test_list_queues_by_prefix(account: Any, name: str) -> None:
    for suffix in ("a", "b", "c"):
        _queue(account, f"{name}{suffix}")
    urls, marker = account.list_queue(prefix=name, ret_number=2)
    assert [u.rsplit("/", 1)[1] for u in urls] == [f"{name}a", f"{name}b"] and marker == f"{name}c"
    urls, marker = account.list_queue(prefix=name, marker=marker)
    assert [u.rsplit("/", 1)[1] for u in urls] == [f"{name}c"] and marker == ""


def test_send_receive_delete_raw_json(account: Any, name: str) -> None:
    queue = _queue(account, name)
    body = json.dumps({"RequestType": "Create", "note": "ünïcode & <xml>"}, ensure_ascii=False)
    sent = queue.send_message(Message(body))
    assert sent.message_body_md5 == hashlib.md5(body.encode()).hexdigest().upper()
    got = queue.receive_message()
    assert got.message_body == body and got.message_id == sent.message_id
    assert got.dequeue_count == 1 and got.priority == 8
    assert got.next_visible_time > got.enqueue_time
    queue.delete_message(got.receipt_handle)
    assert _error(queue.receive_message).type == "MessageNotExist"


def test_default_base64_mode_round_trips_and_stores_base64(account: Any, name: str) -> None:
    encoded = _queue(account, name, encoding=True)
    encoded.send_message(Message("héllo"))
    raw = account.get_queue(name)
    raw.set_encoding(False)
    peeked = raw.peek_message()
    assert peeked.message_body == base64.b64encode("héllo".encode()).decode()
    got = encoded.receive_message()
    assert got.message_body == "héllo".encode()
    encoded.delete_message(got.receipt_handle)


def test_missing_queue_errors(account: Any, name: str) -> None:
    queue = account.get_queue(name)
    queue.set_encoding(False)
    for call, args in ((queue.send_message, (Message("x"),)), (queue.receive_message, ()),
                       (queue.get_attributes, ())):
        err = _error(call, *args)
        assert (err.type, err.message) == ("QueueNotExist", "The queue name you provided is not exist.")


@pytest.mark.slow
def test_long_poll_times_out_then_wakes_on_send(account: Any, name: str, local_mns: LocalMNS) -> None:
    queue = _queue(account, name)
    start = time.monotonic()
    assert _error(queue.receive_message, 1).type == "MessageNotExist"
    assert 0.9 <= time.monotonic() - start < 2.5

    sender = _queue(local_mns.account(), name)  # an SDK client is one connection: not shared across threads
    timer = threading.Timer(0.3, lambda: sender.send_message(Message("late")))
    timer.start()
    try:
        start = time.monotonic()
        got = queue.receive_message(wait_seconds=5)
        elapsed = time.monotonic() - start
    finally:
        timer.join()
    assert got.message_body == "late" and 0.25 <= elapsed < 2.0


@pytest.mark.slow
def test_visibility_timeout_expiry_redelivers_with_new_handle(account: Any, name: str) -> None:
    queue = _queue(account, name, visibilitytimeout=1)
    queue.send_message(Message("work"))
    first = queue.receive_message()
    assert first.dequeue_count == 1
    assert _error(queue.receive_message).type == "MessageNotExist"  # in flight
    time.sleep(1.1)
    second = queue.receive_message(wait_seconds=2)
    assert second.message_id == first.message_id and second.dequeue_count == 2
    assert second.receipt_handle != first.receipt_handle
    assert second.first_dequeue_time == first.first_dequeue_time
    err = _error(queue.delete_message, first.receipt_handle)  # expired handle
    assert err.type == "MessageNotExist"
    assert _error(queue.delete_message, "not-a-receipt-handle").type == "ReceiptHandleError"
    queue.delete_message(second.receipt_handle)


@pytest.mark.slow
def test_change_message_visibility_extends_and_reissues_handle(account: Any, name: str) -> None:
    queue = _queue(account, name, visibilitytimeout=30)
    queue.send_message(Message("long work"))
    got = queue.receive_message()
    changed = queue.change_message_visibility(got.receipt_handle, 1)
    assert changed.receipt_handle != got.receipt_handle
    assert int(changed.next_visible_time) <= int(time.time() * 1000) + 1500
    assert _error(queue.delete_message, got.receipt_handle).type == "MessageNotExist"
    again = queue.receive_message(wait_seconds=3)  # visible again after ~1 s instead of 30 s
    assert again.message_id == got.message_id and again.dequeue_count == 2
    queue.delete_message(again.receipt_handle)


@pytest.mark.slow
def test_delay_seconds_hold_message_back(account: Any, name: str) -> None:
    queue = _queue(account, name)
    msg = Message("later")
    msg.set_delayseconds(1)
    queue.send_message(msg)
    assert queue.get_attributes().delay_messages == 1
    assert _error(queue.receive_message).type == "MessageNotExist"
    start = time.monotonic()
    got = queue.receive_message(wait_seconds=3)
    assert got.message_body == "later" and 0.8 <= time.monotonic() - start < 2.5


def test_priority_orders_delivery(account: Any, name: str) -> None:
    queue = _queue(account, name)
    queue.send_message(Message("low", priority=12))
    queue.send_message(Message("high", priority=1))
    assert [queue.receive_message().message_body for _ in range(2)] == ["high", "low"]


def test_batch_send_receive_peek_delete(account: Any, name: str) -> None:
    queue = _queue(account, name)
    sent = queue.batch_send_message([Message(f"m{i}") for i in range(5)])
    assert len(sent) == 5 and len({m.message_id for m in sent}) == 5
    assert sorted(m.message_body for m in queue.batch_peek_message(16)) == [f"m{i}" for i in range(5)]
    got = queue.batch_receive_message(3, wait_seconds=1)
    assert len(got) == 3 and all(m.dequeue_count == 1 for m in got)
    queue.batch_delete_message([m.receipt_handle for m in got])
    rest = queue.batch_receive_message(16)
    assert len(rest) == 2
    err = _error(queue.batch_delete_message, [rest[0].receipt_handle, "0" * 32])
    assert err.type == "MessageNotExist"
    assert [e["ReceiptHandle"] for e in err.sub_errors] == ["0" * 32]
    assert _error(queue.delete_message, rest[0].receipt_handle).type == "MessageNotExist"  # it was deleted


def test_wrong_secret_and_unknown_key_are_rejected(local_mns: LocalMNS, name: str) -> None:
    bad = Account(local_mns.endpoint, local_mns.access_key_id, "wrong-secret").get_queue(name)
    err = _error(bad.create, QueueMeta())
    assert err.type == "SignatureDoesNotMatch" and "wrong-secret" not in err.message
    unknown = Account(local_mns.endpoint, "NoSuchKey", local_mns.access_key_secret).get_queue(name)
    assert _error(unknown.create, QueueMeta()).type == "InvalidAccessKeyId"
    assert name not in str(local_mns.account().list_queue(prefix=name)[0])


def _signed_headers(local_mns: LocalMNS, method: str, uri: str, date: str) -> dict[str, str]:
    """Headers signed by the SDK's own signer, so the check is independent of our code."""
    client = local_mns.account().mns_client
    headers = {"x-mns-version": "2015-06-06", "date": date}
    credential = client.credentials_provider.get_credentials()
    headers["Authorization"] = client.get_signature(method, headers, uri, credential)
    return headers


@pytest.mark.parametrize(
    "mutate, status, code",
    [
        (lambda h: h.pop("Authorization"), 400, "MissingAuthorizationHeader"),
        (lambda h: h.update(Authorization="Basic abc"), 400, "InvalidAuthorizationHeader"),
        (lambda h: h.update({"x-mns-version": "2015-06-07"}), 403, "SignatureDoesNotMatch"),
        (lambda h: h.pop("date"), 400, "MissingDateHeader"),
    ],
)
def test_raw_auth_errors_are_mns_xml(local_mns: LocalMNS, mutate: Any, status: int, code: str) -> None:
    headers = _signed_headers(local_mns, "GET", "/queues", formatdate(usegmt=True))
    mutate(headers)
    resp = requests.get(local_mns.endpoint + "/queues", headers=headers, timeout=5)
    assert resp.status_code == status
    assert f"<Code>{code}</Code>" in resp.text and "<RequestId>" in resp.text and "<HostId>" in resp.text
    assert resp.headers["x-mns-request-id"]


def test_stale_but_correctly_signed_request_is_expired(local_mns: LocalMNS) -> None:
    headers = _signed_headers(local_mns, "GET", "/queues", formatdate(time.time() - 3600, usegmt=True))
    resp = requests.get(local_mns.endpoint + "/queues", headers=headers, timeout=5)
    assert resp.status_code == 408 and "<Code>TimeExpired</Code>" in resp.text


def test_correctly_signed_raw_request_succeeds(local_mns: LocalMNS) -> None:
    headers = _signed_headers(local_mns, "GET", "/queues", formatdate(usegmt=True))
    resp = requests.get(local_mns.endpoint + "/queues", headers=headers, timeout=5)
    assert resp.status_code == 200 and "<Queues" in resp.text


@pytest.mark.parametrize(
    "call, code",
    [
        (lambda q: q.create(QueueMeta(vis_timeout=50000)), "InvalidArgument"),
        (lambda q: q.create(QueueMeta(polling_wait_sec=31)), "InvalidArgument"),
        (lambda q: q.send_message(Message("x", priority=17)), "InvalidArgument"),
        (lambda q: q.send_message(Message("x", delay_seconds=604801)), "InvalidArgument"),
        (lambda q: q.receive_message(wait_seconds=31), "InvalidArgument"),
        (lambda q: q.change_message_visibility("0" * 32, 0), "InvalidArgument"),
    ],
)
def test_out_of_range_values_are_invalid_argument(account: Any, name: str, call: Any, code: str) -> None:
    queue = _queue(account, name)
    err = _error(call, queue)
    assert err.type == code and "should between" in err.message


def test_invalid_queue_name(account: Any) -> None:
    assert _error(account.get_queue("9-starts-with-digit").create, QueueMeta()).type == "InvalidQueueName"


def test_oversized_message_is_rejected(account: Any, name: str) -> None:
    queue = account.get_queue(name)
    queue.set_encoding(False)
    queue.create(QueueMeta(max_msg_size=1024))
    assert _error(queue.send_message, Message("x" * 1025)).type == "InvalidArgument"
    queue.send_message(Message("x" * 1024))


def test_malformed_xml_body(local_mns: LocalMNS, name: str) -> None:
    client = local_mns.account().mns_client
    uri = f"/queues/{name}"
    body = b"<Queue><VisibilityTimeout>3</Visib"
    headers = {"x-mns-version": "2015-06-06", "date": formatdate(usegmt=True),
               "content-type": "text/xml;charset=UTF-8",
               "content-md5": base64.b64encode(hashlib.md5(body).hexdigest().encode()).decode()}
    headers["Authorization"] = client.get_signature("PUT", headers, uri, client.credentials_provider.get_credentials())
    resp = requests.put(local_mns.endpoint + uri, data=body, headers=headers, timeout=5)
    assert resp.status_code == 400 and "<Code>MalformedXML</Code>" in resp.text
    headers["content-md5"] = base64.b64encode(b"0" * 32).decode()
    headers["Authorization"] = client.get_signature("PUT", headers, uri, client.credentials_provider.get_credentials())
    resp = requests.put(local_mns.endpoint + uri, data=body, headers=headers, timeout=5)
    assert resp.status_code == 400 and "<Code>InvalidDegist</Code>" in resp.text
