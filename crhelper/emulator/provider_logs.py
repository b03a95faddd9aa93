"""Provider logs of one stack operation: one sink for every line a provider process writes.

Whatever path a request took (a local FC worker process, the in-process provider, the MNS queue
worker in this process), each line its provider writes (prints, stderr, log records, the
traceback of a failure) becomes one `LogRecord` naming the stack, the resource and the request.
`ProviderLogs` appends it as a JSON line to the stack's file (`<home>/logs/<stack>.jsonl`, read
back by `crhelper stack logs`) and shows it on the terminal, readable and aligned with the event
table, or as a JSON line on stderr under `--json` (stdout then carries the final document only).

Lines are redacted before they go anywhere: a provider printing its whole event must not leak a
ResponseURL's presigned query string (`protect` names the URLs this operation handed out).

In-process providers are captured without touching the framework (`ProviderLogs.capture`): writes
to `sys.stdout` / `sys.stderr` made inside a request's context (`crhelper.logs.current_request`)
and records of loggers without a handler (Python's "last resort") go to the sink; other writes pass
through, as whole lines under the same print lock as the events.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlsplit

from ..config import env_float
from ..constants import IN_PROGRESS_LOG_MESSAGE
from ..logs import LOGGER_NAME, current_request, redact_url
from .model import utc_now

LOGS_DIR = "logs"
#: A stack's log file is rotated to `<stack>.jsonl.1` (the one kept before it) beyond this size.
MAX_LOG_BYTES = 8 * 1024 * 1024
#: Width of the resource column, shared with the event table.
RESOURCE_WIDTH = 24
#: Framework records below this level stay off the terminal unless CRHELPER_LOG_LEVEL says otherwise.
DEFAULT_TERMINAL_LEVEL = "WARNING"
LOG_LEVEL_ENV = "CRHELPER_LOG_LEVEL"
FOLLOW_INTERVAL_ENV = "CRHELPER_FOLLOW_INTERVAL"
#: The loggers the framework's own modules use (`crhelper.<name>`); tests/stack/test_stack_logs.py checks
#: every `get_logger(...)` in crhelper/ is listed, so a provider's `crhelper.get_logger("x")` is told apart.
FRAMEWORK_LOGGERS = frozenset({
    "dispatch", "emulator", "fc", "http", "lifecycle", "local", "outbound", "provider", "reentry", "ros", "runtime",
    "serve", "servers", "services", "supervisor", "tiers", "worker",
})
#: The framework's record for each step of a long operation (crhelper.lifecycle): one poll.
POLL_MESSAGE = IN_PROGRESS_LOG_MESSAGE

STREAM_STDOUT, STREAM_STDERR, STREAM_LOG, STREAM_OUTPUT = "stdout", "stderr", "log", "output"

#: Identifier fields of the framework's JSON lines: they become the record's own fields.
_IDENTIFIERS = ("time", "level", "logger", "message", "RequestType", "RequestId", "StackId",
                "LogicalResourceId", "ResourceType")
_MULTILINE_FIELDS = ("exception", "traceback")
#: FC's Python runtime log line (crhelper.local.fc_worker): '<UTC time> <request id> [LEVEL] message'.
_FC_RUNTIME_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z \S+ \[([A-Z]+)\] (.*)$", re.S)
_LEVELS = frozenset({"CRITICAL", "FATAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG"})
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class LogRecord:
    """One line a provider wrote, attributed to its stack, resource and request."""

    time: str
    stack: str
    resource: str
    request_type: str
    request_id: str
    stream: str
    level: str
    logger: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        document = asdict(self)
        text = json.dumps(document, ensure_ascii=False, default=str)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: keep its JSON escape
            text = json.dumps(document, ensure_ascii=True, default=str)
        return text

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> "LogRecord":
        fields = document.get("fields")
        return cls(**{name: str(document.get(name) or "") for name in (
            "time", "stack", "resource", "request_type", "request_id", "stream", "level", "logger", "message")},
            fields=dict(fields) if isinstance(fields, Mapping) else {})

    @property
    def from_framework(self) -> bool:
        """A record of the framework itself (kept off the terminal below its level), not of a provider
        that logs through the public `crhelper.get_logger("mine")` (always shown)."""
        if self.logger == LOGGER_NAME:
            return True
        prefix, _, rest = self.logger.partition(".")
        return prefix == LOGGER_NAME and rest.partition(".")[0] in FRAMEWORK_LOGGERS


# ------------------------------------------------------------------------------------ parsing


@dataclass(frozen=True)
class ParsedLine:
    level: str
    logger: str
    message: str
    fields: dict[str, Any]
    identifiers: dict[str, str]


def parse_line(line: str) -> ParsedLine:
    """What a written line says: a framework JSON record, an FC runtime log line, or plain text."""
    text = line.rstrip("\r\n")
    if text.startswith("{") and text.endswith("}"):
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            document = None
        if isinstance(document, dict) and {"level", "message"} <= document.keys():
            identifiers = {k: str(document[k]) for k in _IDENTIFIERS[4:] if isinstance(document.get(k), str)}
            fields = {k: v for k, v in document.items() if k not in _IDENTIFIERS}
            return ParsedLine(str(document["level"]), str(document.get("logger") or ""), str(document["message"]),
                              fields, identifiers)
    match = _FC_RUNTIME_LINE.match(text)
    if match and match.group(1) in _LEVELS:
        return ParsedLine(match.group(1), "", match.group(2), {}, {})
    return ParsedLine("", "", text, {}, {})


def level_number(name: str | None, default: int = logging.WARNING) -> int:
    value = logging.getLevelName((name or "").upper())
    return value if isinstance(value, int) else default


def terminal_level(env: Mapping[str, str]) -> str:
    """The level framework records need to reach the terminal: CRHELPER_LOG_LEVEL, else WARNING."""
    wanted = (env.get(LOG_LEVEL_ENV) or DEFAULT_TERMINAL_LEVEL).upper()
    return wanted if isinstance(logging.getLevelName(wanted), int) else DEFAULT_TERMINAL_LEVEL


def provider_level(terminal: str) -> str:
    """The level providers run at during an operation: at least INFO, so the sink sees every poll
    (the heartbeat counts them) while the terminal keeps to `terminal`."""
    return terminal if level_number(terminal) < logging.INFO else "INFO"


# ------------------------------------------------------------------------------------ rendering


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if text and " " not in text else json.dumps(text, ensure_ascii=False)


def render(record: LogRecord, width: int = RESOURCE_WIDTH) -> list[str]:
    """The record for people: `15:21:45.248  A        | WARNING x: message  key=value`, the
    exception text and further message lines indented under it."""
    prefix = f"{record.time[11:23]:<12}  {record.resource or '-':<{width}} | "
    head, *more = record.message.split("\n") or [""]
    if record.level:
        head = f"{record.level} {record.logger}: {head}" if record.logger else f"{record.level} {head}"
    extras = [f"{k}={_shown(v)}" for k, v in record.fields.items() if k not in _MULTILINE_FIELDS]
    if extras:
        head += "  " + " ".join(extras)
    lines = [prefix + head] + [prefix + "    " + line for line in more]
    for key in _MULTILINE_FIELDS:
        value = record.fields.get(key)
        if value:
            lines.extend(prefix + "    " + line for line in str(value).rstrip("\n").split("\n"))
    return lines


# ------------------------------------------------------------------------------------ files


def log_path(home: str | os.PathLike[str], stack: str) -> Path:
    """`<home>/logs/<stack>.jsonl`: one file per stack name, kept after the stack is deleted."""
    return Path(home) / LOGS_DIR / f"{_UNSAFE_NAME.sub('_', stack) or '_'}.jsonl"


def _rotated(path: Path) -> Path:
    return path.with_name(path.name + ".1")


def _records_of(lines: list[str]) -> Iterator[LogRecord]:
    for line in lines:
        try:
            document = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        if isinstance(document, dict):
            yield LogRecord.from_dict(document)


def read_records(home: str | os.PathLike[str], stack: str) -> list[LogRecord]:
    """Every record kept for the stack, oldest first (the rotated file, then the current one)."""
    path = log_path(home, stack)
    lines: list[str] = []
    for source in (_rotated(path), path):
        try:
            lines.extend(source.read_text(encoding="utf-8", errors="replace").splitlines())
        except FileNotFoundError:
            continue
    return list(_records_of(lines))


def follow_records(home: str | os.PathLike[str], stack: str, running: Callable[[], bool],
                   interval: float = 0.2) -> Iterator[LogRecord]:
    """The stack's records, then new ones as they are appended while `running()` says an operation
    is under way; ends once it is not (after reading what it wrote last)."""
    path = log_path(home, stack)
    for record in read_records(home, stack):
        yield record
    position = path.stat().st_size if path.exists() else 0
    identity = _identity(path)
    pending = ""
    while True:
        alive = running()  # read before the file: what the operation wrote last is then in it
        if _identity(path) != identity:  # rotated (or created): read the new file from its start
            identity, position, pending = _identity(path), 0, ""
        try:
            with path.open("rb") as stream:
                stream.seek(position)
                chunk = stream.read()
        except FileNotFoundError:
            chunk = b""
        position += len(chunk)
        *complete, pending = (pending + chunk.decode("utf-8", errors="replace")).split("\n")
        yield from _records_of(complete)
        if not alive:
            return
        time.sleep(interval)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def follow_interval(env: Mapping[str, str]) -> float:
    """How often `--follow` looks for new events and log lines (CRHELPER_FOLLOW_INTERVAL, seconds)."""
    return env_float(env, FOLLOW_INTERVAL_ENV, 0.2, minimum=0.01, maximum=60.0)


# ------------------------------------------------------------------------------------ the sink


class ProviderLogs:
    """The log sink of one stack operation; see the module docstring. Thread-safe.

    `out` gets the readable lines (the event table's stream), `err` the JSON lines under
    `json_mode`; `lock` is the print lock shared with whatever prints the events."""

    def __init__(
        self, stack: str, home: str | os.PathLike[str], *, out: TextIO | None = None, err: TextIO | None = None,
        json_mode: bool = False, level: str = DEFAULT_TERMINAL_LEVEL, lock: "threading.RLock | None" = None,
        max_bytes: int = MAX_LOG_BYTES,
    ) -> None:
        self.stack = stack
        self.path = log_path(home, stack)
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.json_mode = json_mode
        self.level = level_number(level)
        self.lock = lock or threading.RLock()
        self.max_bytes = max_bytes
        self._file: io.BufferedWriter | None = None
        self._size = 0
        self._secrets: dict[str, str] = {}
        self._polls: dict[str, int] = {}
        self._serving: set[str] = set()

    # -------------------------------------------------------------- lifecycle

    def open(self) -> "ProviderLogs":
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.path.exists() and self.path.stat().st_size >= self.max_bytes:
            os.replace(self.path, _rotated(self.path))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "ab")
        self._size = self.path.stat().st_size
        return self

    def close(self) -> None:
        with self.lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> "ProviderLogs":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------- what the delivery tells it

    def protect(self, url: str) -> None:
        """Never let this presigned URL's query string reach the file or the terminal."""
        replacements = {url: redact_url(url)}
        query = urlsplit(url).query
        if query:
            replacements[query] = "<redacted>"
            for _, value in parse_qsl(query):
                if len(value) >= 8:
                    replacements[value] = "<redacted>"
        with self.lock:
            self._secrets.update(replacements)

    def redact(self, text: str) -> str:
        with self.lock:
            secrets = sorted(self._secrets.items(), key=lambda item: -len(item[0]))
        for secret, shown in secrets:
            if secret in text:
                text = text.replace(secret, shown)
        return text

    def serving(self, resource: str) -> None:
        """A provider this operation runs (FC worker, in process, MNS worker) serves the resource,
        so its polls are seen (the heartbeat counts them)."""
        with self.lock:
            self._serving.add(resource)

    def polls(self, resource: str) -> int | None:
        """How many steps of a long operation the resource's provider reported so far; None when
        its provider is not one this operation runs (a web token: nothing to count)."""
        with self.lock:
            return self._polls.get(resource, 0) if resource in self._serving else None

    # -------------------------------------------------------------- records

    def line(self, text: str, *, stream: str, resource: str = "", request_type: str = "", request_id: str = "") -> None:
        """One line a provider wrote; a framework JSON line's own identifiers take precedence."""
        parsed = parse_line(self.redact(text))
        ids = parsed.identifiers
        self.add(LogRecord(utc_now(), self.stack, ids.get("LogicalResourceId") or resource,
                           ids.get("RequestType") or request_type, ids.get("RequestId") or request_id, stream,
                           parsed.level, parsed.logger, parsed.message, parsed.fields))

    def add(self, record: LogRecord) -> None:
        """Keep the record in the file and show it (unless it is a framework record below the level)."""
        shown = not (record.from_framework and level_number(record.level, logging.INFO) < self.level)
        with self.lock:
            if record.from_framework and record.message == POLL_MESSAGE:
                self._polls[record.resource] = self._polls.get(record.resource, 0) + 1
            self._write(record)
            if not shown:
                return
            try:
                if self.json_mode:
                    print(record.to_json(), file=self.err, flush=True)
                else:
                    print("\n".join(render(record)), file=self.out, flush=True)
            except (OSError, ValueError):  # a closed terminal must not fail the operation
                pass

    def _write(self, record: LogRecord) -> None:
        if self._file is None:
            return
        data = (record.to_json() + "\n").encode("utf-8", errors="backslashreplace")
        if self._size + len(data) > self.max_bytes and self._size > 0:
            self._file.close()
            os.replace(self.path, _rotated(self.path))
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._file, self._size = os.fdopen(fd, "ab"), 0
        self._file.write(data)
        self._file.flush()
        self._size += len(data)

    def passthrough(self, text: str, target: TextIO) -> None:
        """A whole line written outside any request: to its stream (stderr for stdout under --json),
        redacted, under the print lock."""
        destination = self.err if self.json_mode and target is self.out else target
        with self.lock:
            try:
                destination.write(self.redact(text))
                destination.flush()
            except (OSError, ValueError):
                pass

    # -------------------------------------------------------------- in-process capture

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """While inside: route in-process providers' output here (see the module docstring)."""
        previous_out, previous_err, previous_last = sys.stdout, sys.stderr, logging.lastResort
        routers = [_LineRouter(self, previous_out, STREAM_STDOUT), _LineRouter(self, previous_err, STREAM_STDERR)]
        sys.stdout, sys.stderr = routers[0], routers[1]  # type: ignore[assignment]
        logging.lastResort = last_resort = _LastResort(self, previous_last)
        # A root logger without handlers gets this one meanwhile: then a library's module-level
        # `logging.debug(...)` (fc2 calls them) cannot basicConfig() a raw stderr handler mid-operation.
        root = logging.getLogger()
        on_root = not root.handlers
        if on_root:
            root.addHandler(last_resort)
        try:
            yield
        finally:
            if on_root:
                root.removeHandler(last_resort)
            sys.stdout, sys.stderr, logging.lastResort = previous_out, previous_err, previous_last
            for router in routers:
                router.drain()


class _LineRouter(io.TextIOBase):
    """A stand-in for sys.stdout / sys.stderr that hands over whole lines, per writing thread."""

    def __init__(self, logs: ProviderLogs, original: TextIO, stream: str) -> None:
        super().__init__()
        self._logs = logs
        self._original = original
        self._stream = stream
        self._pending: dict[int, str] = {}
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not text:
            return 0
        ident = threading.get_ident()
        with self._lock:
            *complete, rest = (self._pending.pop(ident, "") + text).split("\n")
            if rest:
                self._pending[ident] = rest
        for line in complete:
            self._emit(line)
        return len(text)

    def _emit(self, line: str) -> None:
        fields = current_request()
        resource = fields.get("LogicalResourceId", "")
        if resource:
            self._logs.line(line, stream=self._stream, resource=resource, request_type=fields.get("RequestType", ""),
                            request_id=fields.get("RequestId", ""))
            return
        parsed = parse_line(line)
        if parsed.level and parsed.logger:  # a framework record outside any request: readable, filtered
            self._logs.line(line, stream=self._stream)
        else:
            self._logs.passthrough(line + "\n", self._original)

    def drain(self) -> None:
        """Hand over the unfinished lines left when the capture ends."""
        with self._lock:
            left = list(self._pending.values())
            self._pending.clear()
        for line in left:
            self._emit(line)

    def flush(self) -> None:
        try:
            self._original.flush()
        except (OSError, ValueError):
            pass

    def fileno(self) -> int:
        return self._original.fileno()

    def isatty(self) -> bool:
        return self._original.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._original, "encoding", None) or "utf-8"

    @property
    def buffer(self) -> Any:
        return getattr(self._original, "buffer", None)


class _LastResort(logging.Handler):
    """Python's handler for loggers nobody configured: inside a request, a record of the sink."""

    def __init__(self, logs: ProviderLogs, previous: logging.Handler | None) -> None:
        super().__init__(logging.WARNING)
        self._logs = logs
        self._previous = previous
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        fields = current_request()
        resource = fields.get("LogicalResourceId", "")
        if not resource:
            if self._previous is not None and record.levelno >= self._previous.level:
                self._previous.handle(record)
            return
        try:
            extra: dict[str, Any] = {}
            if record.exc_info and record.exc_info[0] is not None:
                extra["exception"] = self._logs.redact(self._formatter.formatException(record.exc_info))
            self._logs.add(LogRecord(utc_now(), self._logs.stack, resource, fields.get("RequestType", ""),
                                     fields.get("RequestId", ""), STREAM_LOG, record.levelname, record.name,
                                     self._logs.redact(record.getMessage()), extra))
        except Exception:  # noqa: BLE001 - logging must never raise into the provider
            self.handleError(record)
