"""Unwrap the events Function Compute hands a provider into ROS request bodies (spec §4.2, §4.3).

A provider function may be invoked directly (the event is the request), by an MNS
topic trigger (STREAM or JSON form), or by an MNS queue trigger (a CloudEvents
batch). Each message is decoded on its own so that one bad message in a batch does
not sink the others. Pure and stdlib-only: this module runs on every cold start.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Union

from .config import Value
from .constants import MAX_NESTING_DEPTH
from .request import NestedTooDeeply, load_json

__all__ = [
    "Envelope",
    "BodyDecodeError",
    "SOURCE_DIRECT",
    "SOURCE_MNS_TOPIC_STREAM",
    "SOURCE_MNS_TOPIC_JSON",
    "SOURCE_MNS_TOPIC_XML",
    "SOURCE_MNS_QUEUE",
    "SOURCE_UNKNOWN",
    "unwrap_event",
    "decode_body",
]

SOURCE_DIRECT = "direct"
SOURCE_MNS_TOPIC_STREAM = "mns-topic-stream"
SOURCE_MNS_TOPIC_JSON = "mns-topic-json"
SOURCE_MNS_TOPIC_XML = "mns-topic-xml"
SOURCE_MNS_QUEUE = "mns-queue"
SOURCE_UNKNOWN = "unknown"

Event = Union[bytes, bytearray, str, dict, list]

# Keys of the JSON topic form; any other top-level key is a message attribute.
_TOPIC_JSON_KEYS = frozenset(
    {"TopicOwner", "TopicName", "Subscriber", "SubscriptionName", "MessageId", "Message", "MessageMD5",
     "MessageTag", "PublishTime"}
)


class BodyDecodeError(ValueError):
    """A message body that is neither a JSON object nor base64 of one."""


class Envelope(Value):
    """One incoming message: ``body`` is the request dict, or the raw bytes when ``error`` says why not."""

    __slots__ = ("source", "message_id", "body", "error", "attributes")
    source: str
    message_id: str | None
    body: Union[bytes, dict]
    error: str | None
    attributes: dict

    def __init__(self, source: str, message_id: str | None, body: Union[bytes, dict], error: str | None,
                 attributes: dict | None = None) -> None:
        self._init(source=source, message_id=message_id, body=body, error=error,
                   attributes={} if attributes is None else attributes)

    @property
    def ok(self) -> bool:
        return self.error is None


def decode_body(raw: Union[bytes, bytearray, str, dict]) -> dict:
    """Decode one message body: a dict, raw JSON text, base64 of JSON, or an MNS XML notification."""
    if isinstance(raw, dict):
        return raw
    text = _to_text(raw).strip()
    if not text:
        raise BodyDecodeError("message body is empty")
    if text.startswith("<"):
        notification = _parse_notification_xml(text)
        return decode_body(notification.get("Message", ""))
    if text.startswith("{") or text.startswith("["):
        value = _json_object(text)
        if _is_topic_json(value):
            # A topic subscription in JSON form delivered into a queue: unwrap once.
            return decode_body(value["Message"]) if isinstance(value["Message"], str) else _not_text(value)
        return value
    try:
        decoded = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BodyDecodeError("message body is neither JSON nor base64") from None
    try:
        inner = decoded.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise BodyDecodeError("base64 message body does not decode to UTF-8 text") from None
    if not inner.startswith("{"):
        raise BodyDecodeError("base64 message body does not hold a JSON object")
    return _json_object(inner)


def unwrap_event(event: Event) -> list[Envelope]:
    """Detect the event's shape and return one Envelope per message it carries (never raises)."""
    if isinstance(event, (bytes, bytearray, str)):
        try:
            text = _to_text(event).strip()
        except BodyDecodeError as exc:
            return [_failed(SOURCE_UNKNOWN, None, event, str(exc))]
        if text.startswith("<"):
            return [_from_xml_notification(text)]
        try:
            value: Any = load_json(text, salvage=True)
        except NestedTooDeeply:
            return [_failed(SOURCE_UNKNOWN, None, event, f"event is nested too deeply (limit {MAX_NESTING_DEPTH} levels)")]
        except ValueError:
            # STREAM form may carry a base64 body; anything else is undecodable.
            return [_decoded(SOURCE_MNS_TOPIC_STREAM, None, text, {})]
        if isinstance(value, str):
            return [_decoded(SOURCE_MNS_TOPIC_STREAM, None, value, {})]
        event = value
    if isinstance(event, list):
        return _from_list(event)
    if isinstance(event, dict):
        return [_from_dict(event)]
    return [_failed(SOURCE_UNKNOWN, None, repr(event), f"event of type {type(event).__name__} is not supported")]


def _from_list(items: list) -> list[Envelope]:
    if not items:
        return [_failed(SOURCE_UNKNOWN, None, b"[]", "event is an empty list")]
    out: list[Envelope] = []
    for index, item in enumerate(items):
        if isinstance(item, dict) and _is_cloud_event(item):
            out.append(_from_cloud_event(item))
        else:
            out.append(
                _failed(SOURCE_MNS_QUEUE, None, _dump(item), f"batch element {index} is not an MNS CloudEvent")
            )
    return out


def _from_dict(event: dict) -> Envelope:
    if _is_cloud_event(event):
        return _from_cloud_event(event)
    if _is_topic_json(event):
        attrs = {k: v for k, v in event.items() if k != "Message"}
        return _decoded(SOURCE_MNS_TOPIC_JSON, _opt_str(event.get("MessageId")), event["Message"], attrs)
    if "body" in event and set(event) <= {"body", "attrs"}:
        given = event.get("attrs")
        return _decoded(SOURCE_MNS_TOPIC_STREAM, None, event["body"], given if isinstance(given, dict) else {})
    if "RequestType" in event:
        return Envelope(SOURCE_DIRECT, None, event, None)
    return Envelope(SOURCE_UNKNOWN, None, event, "event is not a ROS request: field 'RequestType' is missing")


def _is_topic_json(value: dict) -> bool:
    return "Message" in value and "RequestType" not in value and ("TopicOwner" in value or "TopicName" in value)


def _not_text(value: dict) -> dict:
    raise BodyDecodeError(f"topic notification field 'Message' is {type(value['Message']).__name__}, expected text")


def _is_cloud_event(item: dict) -> bool:
    return isinstance(item.get("data"), dict) and (
        "specversion" in item or str(item.get("type", "")).startswith("mns:")
    )


def _from_cloud_event(item: dict) -> Envelope:
    data = item["data"]
    message_id = _opt_str(data.get("messageId")) or _opt_str(item.get("id"))
    attrs = {k: v for k, v in item.items() if k != "data"}
    attrs.update({k: v for k, v in data.items() if k != "messageBody"})
    if "messageBody" not in data:
        return _failed(SOURCE_MNS_QUEUE, message_id, _dump(item), "CloudEvent field 'data.messageBody' is missing")
    return _decoded(SOURCE_MNS_QUEUE, message_id, data["messageBody"], attrs)


def _from_xml_notification(text: str) -> Envelope:
    try:
        fields = _parse_notification_xml(text)
    except BodyDecodeError as exc:
        return _failed(SOURCE_MNS_TOPIC_XML, None, text, str(exc))
    attrs = {k: v for k, v in fields.items() if k != "Message"}
    return _decoded(SOURCE_MNS_TOPIC_XML, fields.get("MessageId"), fields.get("Message", ""), attrs)


def _decoded(source: str, message_id: str | None, raw: Any, attrs: dict) -> Envelope:
    if not isinstance(raw, (bytes, bytearray, str, dict)):
        return _failed(source, message_id, _dump(raw), f"message body of type {type(raw).__name__} is not supported")
    try:
        body = decode_body(raw)
    except BodyDecodeError as exc:
        return _failed(source, message_id, raw, str(exc), attrs)
    return Envelope(source, message_id, body, None, dict(attrs))


def _failed(source: str, message_id: str | None, raw: Any, error: str, attrs: dict | None = None) -> Envelope:
    if isinstance(raw, (bytes, bytearray)):
        data = bytes(raw)
    elif isinstance(raw, str):
        data = raw.encode("utf-8", "backslashreplace")
    else:
        data = _dump(raw)
    return Envelope(source, message_id, data, error, dict(attrs or {}))


def _parse_notification_xml(text: str) -> dict[str, str]:
    import xml.etree.ElementTree as ElementTree  # only the XML topic form needs it: ~3 ms off every cold start

    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise BodyDecodeError(f"XML message is not well-formed ({exc})") from None
    if _local_name(root.tag) != "Notification":
        raise BodyDecodeError(f"XML root element is {_local_name(root.tag)!r}, expected 'Notification'")
    return {_local_name(child.tag): (child.text or "") for child in root}


def _local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _json_object(text: str) -> dict:
    try:
        value = load_json(text, salvage=True)  # a too-deep field stays a placeholder: the request can still be answered
    except NestedTooDeeply:
        raise BodyDecodeError(f"message body is nested too deeply (limit {MAX_NESTING_DEPTH} levels)") from None
    except ValueError as exc:
        raise BodyDecodeError(f"message body is not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(value, dict):
        raise BodyDecodeError(f"message body is JSON {type(value).__name__}, expected an object")
    return value


def _to_text(raw: Union[bytes, bytearray, str]) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise BodyDecodeError("message is not UTF-8 text") from None


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _dump(value: Any) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "backslashreplace")
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return repr(value).encode("utf-8", "backslashreplace")
    except RecursionError:  # repr() recurses as deeply as json.dumps
        return f"<{type(value).__name__} nested too deeply to show>".encode("utf-8")
