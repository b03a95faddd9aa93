"""Structured JSON logs that carry the request's identifiers and never a credential."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import re
import sys
import time
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

LOGGER_NAME = "crhelper"
_request_fields: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("crhelper_request", default={})
_HANDLER_MARK = "_crhelper_json_handler"


#: Characters escaped in a redacted URL: controls (log injection) and lone surrogates (not encodable).
#: A pattern string, compiled (and cached by `re`) only for a URL that has one: compiling this class
#: costs ~0.8 ms, a cold start's worth of it for URLs that almost never need it (issue 18).
_UNPRINTABLE = r"[\x00-\x20\x7f\ud800-\udfff]"
#: A redacted URL longer than this is cut: it is a hint in a log line, not the credential.
_MAX_REDACTED_CHARS = 300


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def redact_url(url: str | None) -> str:
    """scheme://host[:port]/path only: a presigned URL's query string is a credential.

    Never raises, whatever the input (an out-of-range port, a bad IPv6 literal, CR/LF, surrogates):
    it is called on the very URLs that failed to parse, to say which one failed.
    """
    if not url:
        return "<none>"
    try:
        parts = urlsplit(str(url))
        # Neither .hostname nor .port: they raise on the malformed URLs we must still name.
        host = parts.netloc.rpartition("@")[2].lower()  # userinfo is a credential too
        suffix = "?<redacted>" if parts.query else ""
        text = f"{parts.scheme}://{host}{parts.path}{suffix}"
    except (ValueError, TypeError):
        return "<unparseable url>"
    if not text.isprintable() or " " in text:  # controls and surrogates are not printable
        text = re.sub(_UNPRINTABLE, _escape, text)
    if len(text) > _MAX_REDACTED_CHARS:
        text = text[: _MAX_REDACTED_CHARS - 1] + "…"
    return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the current request's identifiers merged in."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_request_fields.get())
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            entry.update(fields)
        if record.exc_info and record.exc_info[0] is not None:
            entry["exception"] = self.formatException(record.exc_info)
        text = json.dumps(entry, ensure_ascii=False, default=str)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (from a request field): keep it as its JSON escape
            text = json.dumps(entry, ensure_ascii=True, default=str)
        return text


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is now (test capture and CLI redirection replace it)."""

    @property  # type: ignore[override]
    def stream(self):  # type: ignore[no-untyped-def]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # type: ignore[no-untyped-def]
        pass


def get_logger(name: str = "") -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}" if name else LOGGER_NAME)


def configure(level: str | None = None) -> logging.Logger:
    """Attach the JSON handler once; the level comes from CRHELPER_LOG_LEVEL unless given."""
    logger = logging.getLogger(LOGGER_NAME)
    wanted = (level or os.environ.get("CRHELPER_LOG_LEVEL") or "INFO").upper()
    logger.setLevel(getattr(logging, wanted, logging.INFO))
    if not any(getattr(h, _HANDLER_MARK, False) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(JsonFormatter())
        setattr(handler, _HANDLER_MARK, True)
        logger.addHandler(handler)
        logger.propagate = False
    return logger


def current_request() -> Mapping[str, str]:
    """The fields of the request being handled in this context (empty outside any request): lets a
    host that runs providers in its own process tell whose output a write is."""
    return _request_fields.get()


@contextlib.contextmanager
def request_context(fields: Mapping[str, str]) -> Iterator[None]:
    """Every log line inside carries these fields (RequestId, StackId, ...)."""
    token = _request_fields.set(dict(fields))
    try:
        yield
    finally:
        _request_fields.reset(token)
