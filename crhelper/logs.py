"""Structured JSON logs that carry the request's identifiers and never a credential."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import sys
import time
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

LOGGER_NAME = "crhelper"
_request_fields: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("crhelper_request", default={})
_HANDLER_MARK = "_crhelper_json_handler"


def redact_url(url: str | None) -> str:
    """scheme://host/path only: a presigned URL's query string is a credential."""
    if not url:
        return "<none>"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    suffix = "?<redacted>" if parts.query else ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}{suffix}"


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
        return json.dumps(entry, ensure_ascii=False, default=str)


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


@contextlib.contextmanager
def request_context(fields: Mapping[str, str]) -> Iterator[None]:
    """Every log line inside carries these fields (RequestId, StackId, ...)."""
    token = _request_fields.set(dict(fields))
    try:
        yield
    finally:
        _request_fields.reset(token)
