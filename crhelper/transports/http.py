"""The HTTP(S) transport: a WSGI application that accepts ROS requests for `web:` ServiceTokens.

Use it with any WSGI server (`crhelper serve` runs it on waitress) or as a Function Compute HTTP
trigger handler: ``app = wsgi_app(provider, config=EndpointConfig(...))``.

Modes — how an endpoint knows whether ROS waits for the reply:

* a request whose path ends in ``/sync`` (`EndpointConfig.sync_suffix`) is answered in sync mode;
  any other path uses `EndpointConfig.mode` (``async`` unless configured otherwise). So one server
  serves ``web:https://host/`` and ``web[sync]:https://host/sync`` side by side.
* async (``web:``): the request is checked (body, auth, signature), acknowledged at once with
  ``{"Accepted": true, "RequestId": ...}``, then handled by a bounded worker pool which posts the
  response to the ResponseURL. With `inline`, the handler runs before the acknowledgement (for hosts
  that freeze the process after replying, such as Function Compute HTTP triggers).
* sync (``web[sync]:``): the HTTP 200 body *is* the response object; a handler still running after
  `sync_within` (8.5 s by default, ROS allows 10 s) is answered FAILED. A ResponseURL is optional.

Queueing: accepted async requests wait in a FIFO for a worker, bounded by memory (`backlog` requests,
`queue_bytes` of bodies) and by time: a request that waited longer than `start_within` seconds for a
worker is answered FAILED at its ResponseURL, exactly once, instead of being run after ROS stopped
waiting; only the memory bound refuses (a plain `web:` Create is never retried by ROS, so keep it large).

Status codes: 5xx only where a retry can help (queue full or server stopping → 500,
the status ROS documents retries after; configurable; a SignKey without `public_url` → 500 EndpointMisconfigured); everything
else is 4xx — 400 body not JSON/form, nested deeper than `MAX_JSON_DEPTH`, or not a ROS request, 401 auth or
signature, 403 MNS push not verified, 405 not POST, 409 replayed signed request or MNS push, 413 body over
`max_body`, 415 content type — or, in sync mode, 200 with a FAILED body. Absurd input is never a 5xx, which
would invite ROS to retry it. Error bodies are ``{"Error", "Field", "Message"}`` and never repeat a
credential or the request.

Signatures cover the ServiceToken URL, so it comes from `EndpointConfig.public_url`, never from the Host
header (a client would choose it); `BackgroundServer` fills in its own bound URL.

Failures of our own: an async handler that escapes with a BaseException (KeyboardInterrupt,
asyncio.CancelledError, SystemExit) is answered FAILED here (`abandon`), and the pool thread lives on;
`close(grace=...)` answers FAILED (`SHUTDOWN_REASON`) for accepted requests still running when the grace
ends, recording that answer in the idempotency store so that nothing answers a second time.

Bodies: ``application/json`` (also when no content type is sent), or ``application/x-www-form-urlencoded``
(HttpConfig.ContentType). ROS does not document how its maps travel in a form, so each top-level field
is one form field and a value that reads as a JSON object or array is decoded (ResourceProperties,
OldResourceProperties, Signature); bracketed keys (``Signature[Date]``, ``ResourceProperties[Name]``)
and ``Signature.Date`` are folded into their map as well. The signature is checked over the decoded
object, the same data the provider sees.

Duplicates: the transport runs `handle(event)` (default `provider.handle`, which absorbs duplicate
deliveries through the provider's idempotency store, CRHELPER_STORE) for async requests and
`respond(event, within)` (default `provider.respond`) for sync ones. Pass other callables to `wsgi_app`
to put a different store or policy in front of the provider.
"""

from __future__ import annotations

import base64
import binascii
import collections
import functools
import hmac
import json
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import parse_qsl, quote, urlencode

from ..config import ConfigError, Settings
from ..logs import get_logger, redact_url, request_context
from ..request import response_urls_of
from ..response import encode, failed_body_from_raw
from ..runtime import send_failed
from .hosted import HostedProvider
from .http_config import EndpointConfig
from .signature import ReplayCache, SignatureError, verify

__all__ = ["FORM_TYPE", "HttpApp", "HttpRefusal", "decode_body", "encode_form", "wsgi_app"]

_log = get_logger("http")

JSON_TYPES = frozenset({"application/json", "text/json"})
FORM_TYPE = "application/x-www-form-urlencoded"
#: Stands in for the ResponseURL of a sync request that carries none; sync replies never use it.
SYNC_REPLY_URL = "urn:crhelper:sync-reply"
#: Fields without which no response object can be built; their absence means "not a ROS request".
IDENTITY_FIELDS = ("RequestType", "RequestId", "StackId", "LogicalResourceId")
_MAP_FIELDS = ("Signature", "ResourceProperties", "OldResourceProperties")
#: Deepest JSON nesting accepted. Real requests nest a few levels; Python's decoder gives up near 1,000
#: with a RecursionError, and the signature check and handlers re-serialise what we accept.
MAX_JSON_DEPTH = 100
#: mns_push.DEFAULT_MAX_AGE_SECONDS (not imported: that module loads urllib on a cold start); a pushed
#: Date may be this far behind or ahead, so accepted push signatures are remembered for twice as long.
MNS_PUSH_MAX_AGE = 900.0
#: The Reason of async requests still running (or still waiting) when the server stops after its grace.
SHUTDOWN_REASON = "the provider was shut down while the handler ran; retry the stack operation"

Handle = Callable[[dict[str, Any]], object]
Respond = Callable[[dict[str, Any], float], "Mapping[str, Any] | None"]


class HttpRefusal(Exception):
    """A request we do not accept; becomes an HTTP error reply naming the field and the rule."""

    def __init__(self, status: int, error: str, field: str, rule: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(f"{field}: {rule}")
        self.status = status
        self.error = error
        self.field = field
        self.rule = rule
        self.headers = list(headers)


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


_REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


# body decoding (pure) -------------------------------------------------------------------------------
def _media_type(content_type: str) -> tuple[str, dict[str, str]]:
    main, *params = content_type.split(";")
    parsed = {}
    for param in params:
        name, _, value = param.partition("=")
        parsed[name.strip().lower()] = value.strip().strip('"').lower()
    return main.strip().lower(), parsed


def _maybe_json(value: str) -> Any:
    text = value.strip()
    if text[:1] in ("{", "["):
        if json_depth_exceeds(text, MAX_JSON_DEPTH):
            raise _too_deep("body")
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return value
    return value


def _decode_form(text: str) -> dict[str, Any]:
    result: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in parse_qsl(text, keep_blank_values=True):
        outer, inner = key, None
        if key.endswith("]") and "[" in key:
            outer, _, inner = key[:-1].partition("[")
        elif key.startswith("Signature.") and len(key) > len("Signature."):
            outer, inner = "Signature", key[len("Signature.") :]
        if inner is not None:
            slot = nested.setdefault(outer, {})
            if inner in slot:
                raise HttpRefusal(400, "InvalidBody", f"{outer}[{inner}]", "must be given once")
            slot[inner] = _maybe_json(value)
            continue
        if key in result:
            raise HttpRefusal(400, "InvalidBody", key, "form field must be given once")
        result[key] = _maybe_json(value) if key in _MAP_FIELDS else value
    for outer, values in nested.items():
        if outer in result:
            raise HttpRefusal(400, "InvalidBody", outer, "given both as one field and as bracketed fields")
        result[outer] = values
    return result


def encode_form(body: Mapping[str, Any]) -> str:
    """A request as a form body the way `decode_body` reads it: one field per top-level key, maps and
    lists as JSON. For clients such as the stack emulator calling `web:` endpoints with form bodies."""
    fields = {k: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for k, v in body.items()}
    return urlencode(fields)


def json_depth_exceeds(text: str, limit: int) -> bool:
    """Whether JSON `text` nests objects/arrays deeper than `limit`, scanned without recursion (brackets
    inside strings do not count). Checked before json.loads, whose recursion ends in a RecursionError."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def _too_deep(field: str) -> HttpRefusal:
    return HttpRefusal(400, "InvalidBody", field, f"must not nest JSON objects or arrays more than {MAX_JSON_DEPTH} levels deep")


def decode_body(raw: bytes, media_type: str) -> dict[str, Any]:
    """The request object from a JSON or form-encoded body; HttpRefusal(400) says what is wrong.

    Absurd input is always a 4xx: a 5xx would invite ROS to retry a body that can never be read."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HttpRefusal(400, "InvalidBody", "body", f"must be UTF-8 text (bad byte at {exc.start})") from None
    if media_type == FORM_TYPE:
        try:
            return _decode_form(text)
        except RecursionError:  # a form field holding absurdly nested JSON
            raise _too_deep("body") from None
    if not text.strip():
        raise HttpRefusal(400, "InvalidBody", "body", "must not be empty")
    if json_depth_exceeds(text, MAX_JSON_DEPTH):
        raise _too_deep("body")
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HttpRefusal(400, "InvalidBody", "body", f"must be JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:  # defensive: the scan above should have refused it
        raise _too_deep("body") from None
    if not isinstance(decoded, dict):
        raise HttpRefusal(400, "InvalidBody", "body", f"must be a JSON object, got {type(decoded).__name__}")
    return decoded


def check_ros_request(event: Mapping[str, Any], *, need_url: bool) -> None:
    """Refuse (400) a body that is not a ROS request: we could neither answer nor deliver it.
    Anything else wrong (unknown RequestType, bad properties) is answered FAILED by the provider."""
    missing = [name for name in IDENTITY_FIELDS if not isinstance(event.get(name), str) or not event.get(name)]
    if missing:
        raise HttpRefusal(400, "NotARosRequest", ", ".join(missing), "required non-empty string field(s) of a ROS request")
    if need_url and response_urls_of(event) == (None, None):
        raise HttpRefusal(400, "NotARosRequest", "ResponseURL", "required for asynchronous (web:) requests")


# request checks that read the WSGI environ ---------------------------------------------------------
def _header(environ: Mapping[str, Any], name: str) -> str | None:
    key = name.upper().replace("-", "_")
    value = environ.get(key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}")
    return value if isinstance(value, str) else None


def _request_path(environ: Mapping[str, Any]) -> str:
    raw = environ.get("REQUEST_URI") or environ.get("RAW_URI")
    if isinstance(raw, str) and raw.startswith("/"):
        return raw.split("?", 1)[0]
    return quote(f"{environ.get('SCRIPT_NAME', '')}{environ.get('PATH_INFO', '')}") or "/"


def _read_body(environ: Mapping[str, Any], limit: int) -> bytes:
    length_text = environ.get("CONTENT_LENGTH") or ""
    stream = environ["wsgi.input"]
    if length_text:
        try:
            length = int(length_text)
        except ValueError:
            raise HttpRefusal(400, "InvalidRequest", "Content-Length", "must be a whole number") from None
        if length < 0:
            raise HttpRefusal(400, "InvalidRequest", "Content-Length", "must not be negative")
        if length > limit:
            raise HttpRefusal(413, "BodyTooLarge", "body", f"must be at most {limit} bytes")
        return stream.read(length) if length else b""
    raw = stream.read(limit + 1)
    if len(raw) > limit:
        raise HttpRefusal(413, "BodyTooLarge", "body", f"must be at most {limit} bytes")
    return raw


def _check_auth(environ: Mapping[str, Any], config: EndpointConfig) -> None:
    """Bearer or basic credentials, compared in constant time; nothing to check when neither is set."""
    if config.bearer_token is None and config.basic_auth is None:
        return
    presented = (_header(environ, "Authorization") or "").strip()
    scheme, _, credentials = presented.partition(" ")
    ok = False
    if config.bearer_token is not None and scheme.lower() == "bearer":
        ok = hmac.compare_digest(credentials.strip().encode(), config.bearer_token.encode())
    elif config.basic_auth is not None and scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True)
        except (binascii.Error, ValueError):
            decoded = b""
        expected = f"{config.basic_auth[0]}:{config.basic_auth[1]}".encode()
        ok = hmac.compare_digest(decoded, expected)
    if not ok:
        challenge = 'Bearer realm="crhelper"' if config.bearer_token is not None else 'Basic realm="crhelper"'
        raise HttpRefusal(401, "Unauthorized", "Authorization", "missing or wrong credentials", [("WWW-Authenticate", challenge)])


def signed_urls(environ: Mapping[str, Any], config: EndpointConfig) -> list[str]:
    """The ServiceToken URLs this request may have been signed for: the configured public URL + path.

    Never the Host header: the client chooses it, so a request signed for another endpoint sharing
    the SignKey (or a captured one) would pass by naming that endpoint's host."""
    if not config.public_url:
        raise HttpRefusal(
            500, "EndpointMisconfigured", "public_url",
            "a SignKey is configured but no public URL: set EndpointConfig.public_url (crhelper serve --public-url) "
            "to the ServiceToken URL prefix, since the Host header cannot be trusted",
        )
    base = config.public_url.rstrip("/")
    path = _request_path(environ)
    query = environ.get("QUERY_STRING") or ""
    urls = [f"{base}{path}" + (f"?{query}" if query else "")]
    if path in ("", "/") and not query:
        urls.append(base)  # `web:https://abc.com` is requested as path "/"
    return urls


def _check_signature(
    environ: Mapping[str, Any], event: Mapping[str, Any], media_type: str, key: str, config: EndpointConfig
) -> str:
    """Verify `Signature` (401 otherwise) and return its Value for the replay check."""
    headers = {}
    for name in config.signed_headers:
        value = _header(environ, name)
        if value is None:
            raise HttpRefusal(401, "SignatureMismatch", f"header {name}", "required: it is part of the signed request")
        headers[name] = value
    try:
        verified = verify(
            event,
            key=key,
            urls=signed_urls(environ, config),
            content_type=media_type,
            headers=headers,
            max_skew=config.max_skew,
            variant=config.signature_variant,
        )
    except SignatureError as exc:
        raise HttpRefusal(401, "SignatureMismatch", exc.field, exc.rule) from None
    return verified.value


# the worker pool ---------------------------------------------------------------------------------------
@dataclass(eq=False)  # identity: two deliveries of one request are two jobs
class _Job:
    event: dict[str, Any]
    run: Callable[[], None]
    started: bool = False
    size: int = 0
    queued_at: float = 0.0
    #: Answers the request FAILED instead of running it (it waited past its time budget); None: run it.
    expire: Callable[[str], None] | None = None


class _WorkerPool:
    """`workers` handler threads and a FIFO of accepted requests waiting for one.

    The queue is bounded by memory (`backlog` requests and `queue_bytes` of request bodies; beyond,
    submit says no and the caller answers the overload status) and by time: a request that waited
    more than `start_within` seconds for a worker is expired (answered FAILED by its job) instead of
    run, so that what is accepted is answered while ROS still waits for it. Nothing is refused on a
    guess of how long the queue will take (a burst drains faster than the rate during the burst).

    Daemon threads (not a ThreadPoolExecutor, whose threads the interpreter joins at exit): a handler
    that never returns must not keep a stopping server alive. Whatever a job raises, even a
    BaseException, the thread lives on, so the pool keeps its size."""

    def __init__(self, workers: int, backlog: int, queue_bytes: int = 64 * 1024 * 1024,
                 start_within: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._workers = workers
        self._backlog = backlog
        self._queue_bytes = queue_bytes
        self._start_within = start_within
        self._clock = clock
        self._waiting: "collections.deque[_Job]" = collections.deque()
        self._waiting_bytes = 0
        self._running = 0
        self._lock = threading.Condition()
        self._pending: set[_Job] = set()  # accepted and not finished: waiting or running
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"crhelper-http-{index}", daemon=True) for index in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, job: Callable[[], None], event: dict[str, Any], *, size: int = 0,
               expire: Callable[[str], None] | None = None) -> bool:
        """Queue a job; False when stopping or beyond the memory bound. `expire(reason)` answers it
        instead of `job` if it waits longer than `start_within`."""
        with self._lock:
            if self._closed or len(self._pending) >= self._workers + self._backlog \
                    or (self._waiting and self._waiting_bytes + size > self._queue_bytes):
                return False
            entry = _Job(event, job, size=size, queued_at=self._clock(), expire=expire)
            self._pending.add(entry)
            self._waiting.append(entry)
            self._waiting_bytes += size
            self._lock.notify()
        return True

    def _next(self) -> _Job | None:
        with self._lock:
            while not self._waiting:
                if self._closed:
                    return None
                self._lock.wait()
            entry = self._waiting.popleft()
            self._waiting_bytes -= entry.size
            entry.started = True
            self._running += 1
            return entry

    def _work(self) -> None:
        while True:
            entry = self._next()
            if entry is None:
                return
            began = self._clock()
            waited = began - entry.queued_at
            try:
                if self._start_within is not None and waited > self._start_within and entry.expire is not None:
                    entry.expire(f"the endpoint was overloaded: the request waited {waited:.1f} s for a worker, "
                                 f"more than its {self._start_within:g} s budget, and was not started; "
                                 "retry the stack operation")
                else:
                    entry.run()
            except BaseException:  # noqa: BLE001 - the job answers its own failures; the thread must live on
                _log.exception("async job raised")
            finally:
                with self._lock:
                    self._running -= 1
                    self._pending.discard(entry)
                    self._lock.notify_all()

    def busy(self) -> int:
        with self._lock:
            return len(self._pending)

    def refuse(self) -> None:
        """Accept no new jobs (submit says no); accepted ones go on."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def close(self, wait: bool, grace: float | None = None) -> list[_Job]:
        """Refuse new jobs; with `wait`, wait for accepted ones (at most `grace` seconds when given).
        Returns the jobs abandoned: still running or never started when the wait ended."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            if wait:
                self._lock.wait_for(lambda: not self._pending, timeout=grace)
            abandoned = list(self._pending)
            self._pending.clear()
            self._waiting.clear()
            self._waiting_bytes = 0
            self._lock.notify_all()
        return abandoned


# the application ------------------------------------------------------------------------------------------
def _json_reply(status: int, payload: Mapping[str, Any], headers: Iterable[tuple[str, str]] = ()) -> Reply:
    return Reply(status, json.dumps(payload, separators=(",", ":")).encode("utf-8"), tuple(headers))


class HttpApp:
    """The WSGI callable. `close()` stops accepting async work and (by default) waits for running handlers."""

    def __init__(
        self,
        provider: HostedProvider,
        config: EndpointConfig,
        *,
        handle: Handle | None = None,
        respond: Respond | None = None,
    ) -> None:
        self.config = config
        self._provider = provider
        self._handle: Handle = handle or provider.handle
        # With the provider's own handling, a request is stored before it is acknowledged, so one
        # waiting in the pool when the server is killed is run by recovery after a restart.
        self._accept = provider.accept if handle is None else None
        self._respond: Respond = respond or (lambda event, within: provider.respond(event, within=within))
        self._pool = None if config.inline else _WorkerPool(config.workers, config.backlog, config.queue_bytes,
                                                            config.start_within)
        self._replays = (
            ReplayCache(2 * config.max_skew, config.replay_cache_size)
            if config.sign_key is not None and config.reject_replays
            else None
        )
        #: Malformed requests answered FAILED at their ResponseURL: a repeated POST is not answered twice.
        self._refused_answered = ReplayCache(24 * 3600.0, config.replay_cache_size)
        #: MNS push signatures accepted within the push Date window (mns_push.verify's replay guard).
        self._push_replays = (
            ReplayCache(2 * MNS_PUSH_MAX_AGE, config.replay_cache_size) if config.reject_replays and config.mns_suffix else None
        )

    # WSGI ------------------------------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        received = time.monotonic()
        path = _request_path(environ)
        try:
            reply = self._serve(environ, path, received)
        except HttpRefusal as refusal:
            _log.warning(
                "request refused",
                extra={"fields": {"status": refusal.status, "error": refusal.error, "field": refusal.field, "path": path}},
            )
            payload = {"Error": refusal.error, "Field": refusal.field, "Message": refusal.rule}
            reply = _json_reply(refusal.status, payload, refusal.headers)
        except Exception:  # a bug of ours: 500 so ROS may retry, details only in our log
            _log.exception("internal error in the HTTP transport", extra={"fields": {"path": path}})
            reply = _json_reply(500, {"Error": "InternalError", "Field": "-", "Message": "internal error; see the server log"})
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(reply.body))),
            ("Cache-Control", "no-store"),
            *reply.headers,
        ]
        start_response(f"{reply.status} {_REASONS.get(reply.status, 'Status')}", headers)
        return [reply.body]

    def _serve(self, environ: Mapping[str, Any], path: str, received: float) -> Reply:
        config = self.config
        if environ.get("REQUEST_METHOD", "GET").upper() != "POST":
            raise HttpRefusal(405, "MethodNotAllowed", "method", "ROS sends requests with POST", [("Allow", "POST")])
        if config.mns_suffix and path.rstrip("/").endswith(config.mns_suffix):
            return self._accept_mns_push(environ, _read_body(environ, config.max_body))
        media_type, params = _media_type(_header(environ, "Content-Type") or "application/json")
        if media_type not in JSON_TYPES and media_type != FORM_TYPE:
            raise HttpRefusal(415, "UnsupportedMediaType", "Content-Type", f"must be application/json or {FORM_TYPE}")
        if params.get("charset", "utf-8") not in ("utf-8", "utf8", "us-ascii"):
            raise HttpRefusal(415, "UnsupportedMediaType", "Content-Type", "charset must be utf-8")
        raw = _read_body(environ, config.max_body)
        _check_auth(environ, config)
        sync = path.rstrip("/").endswith(config.sync_suffix) or config.mode == "sync"
        try:
            event = decode_body(raw, media_type)
            check_ros_request(event, need_url=not sync)
        except HttpRefusal as refusal:
            if not sync:
                self._answer_refused(raw, media_type, refusal)
            raise
        replay_key: tuple[str, ...] | None = None
        if config.sign_key is not None:
            value = _check_signature(environ, event, media_type, config.sign_key, config)
            if self._replays is not None:
                replay_key = (event["StackId"], event["RequestId"], event["LogicalResourceId"], value.lower())
                if not self._replays.claim(replay_key):
                    raise HttpRefusal(409, "Replayed", "Signature.Value", "this signed request was already accepted")
        event.pop("Signature", None)
        with request_context({name: event[name] for name in IDENTITY_FIELDS}):
            try:
                if sync:
                    return self._answer_sync(event, received)
                return self._accept_async(event, len(raw))
            except BaseException:
                if replay_key is not None and self._replays is not None:
                    self._replays.release(replay_key)
                raise

    def _answer_refused(self, raw: bytes, media_type: str, refusal: HttpRefusal) -> None:
        """A malformed async request still carrying a readable ResponseURL is answered FAILED there
        too (ROS would otherwise wait for the Timeout: a 400 tells it nothing). Not when a SignKey is
        configured: an unsigned body must not make this server call out to a URL it names."""
        if self.config.sign_key is not None or media_type not in JSON_TYPES:
            return
        from ..request import load_json

        try:
            salvaged = load_json(raw.decode("utf-8"), salvage=True)
        except Exception:  # noqa: BLE001 - not even its URL can be read: the 400 and the log are all
            return
        if not isinstance(salvaged, dict) or response_urls_of(salvaged) == (None, None):
            return
        identity = tuple(str(salvaged.get(name) or "") for name in ("StackId", "RequestId", "LogicalResourceId"))
        if not self._refused_answered.claim(identity):
            return  # answered already (a repeated POST of the same malformed request)
        reason = f"invalid request: {refusal.field}: {refusal.rule}"

        def answer() -> None:
            try:
                settings = self._provider.settings()
            except ConfigError:
                settings = Settings()
            send_failed(salvaged, reason, settings)

        threading.Thread(target=answer, name="crhelper-refused", daemon=True).start()

    def _answer_sync(self, event: dict[str, Any], received: float) -> Reply:
        if response_urls_of(event) == (None, None):
            event["ResponseURL"] = SYNC_REPLY_URL
        within = max(0.1, self.config.sync_within - (time.monotonic() - received))
        try:
            body = self._respond(event, within)
        except BaseException as exc:  # noqa: BLE001 - the reply is the result: a crash (SystemExit from a
            # handler included, which would otherwise leave ROS without any reply) must still be a FAILED body
            _log.exception("sync handler path failed")
            body = failed_body_from_raw(event, f"internal error in crhelper: {type(exc).__name__}")
        if body is None:
            body = failed_body_from_raw(event, "request could not be answered")
        _log.info("sync request answered", extra={"fields": {"Status": body.get("Status")}})
        return Reply(200, encode(body))

    def _accept_async(self, event: dict[str, Any], size: int = 0) -> Reply:
        """Acknowledge and queue (a plain `web:` Create is never retried by ROS: a 5xx would lose it). A
        request that then waits past `start_within` for a worker is answered FAILED at its ResponseURL,
        once, instead of run; only the memory bound (`backlog`, `queue_bytes`) refuses, with the
        overload status."""
        ack = {"Accepted": True, "RequestId": event["RequestId"], "LogicalResourceId": event["LogicalResourceId"]}
        if self._pool is None:
            self._run(event)
            return _json_reply(self.config.ack_status, ack)
        accepted = self._accept(event) if callable(self._accept) else None
        if not self._pool.submit(functools.partial(self._run, event, accepted), event, size=size,
                                 expire=functools.partial(self._expire, event)):
            if accepted is not None:
                self._provider.discard(accepted)
            raise HttpRefusal(self.config.overload_status, "Overloaded", "-",
                              "all workers are busy and the queue is full; retry later", [("Retry-After", "5")])
        _log.info("async request accepted", extra={"fields": {"url": redact_url(response_urls_of(event)[0])}})
        return _json_reply(self.config.ack_status, ack)

    def _expire(self, event: dict[str, Any], reason: str) -> None:
        """Answer FAILED, once, for a request that waited too long to be answered in time (never started)."""
        try:
            abandon(self._provider, event, reason)
        except Exception:  # noqa: BLE001 - logged; nothing else can answer it
            _log.exception("could not answer an expired request FAILED", extra={"fields": {"RequestId": event.get("RequestId")}})

    def _accept_mns_push(self, environ: Mapping[str, Any], raw: bytes) -> Reply:
        """An MNS topic push: verify MNS's signature, acknowledge within MNS's 5 s, handle each message.

        Undecodable messages are acknowledged too (and logged): a non-2xx makes MNS retry a message
        that can never succeed. Forged or unsigned pushes get 403.
        """
        from ..envelopes import unwrap_event
        from ..mns_push import PushVerificationError, verify_wsgi

        try:
            verdict = verify_wsgi(
                environ, raw, allowed_hosts=self.config.mns_cert_hosts, require_https=self.config.mns_require_https,
                replays=self._push_replays,
            )
        except PushVerificationError as exc:
            if exc.reason.startswith("replayed push"):
                raise HttpRefusal(409, "Replayed", "Authorization", f"MNS push refused: {exc.reason}") from None
            raise HttpRefusal(403, "InvalidSignature", "Authorization", f"MNS push signature not verified: {exc.reason}") from None
        accepted = 0
        try:
            envelopes = unwrap_event(raw)
        except RecursionError:  # absurdly nested JSON: acknowledged (a retry cannot fix it) and logged
            envelopes = []
            _log.error("MNS push message cannot be decoded", extra={"fields": {
                "MessageId": verdict.message_id, "error": "JSON nested too deeply"}})
        for envelope in envelopes:
            if not envelope.ok or not isinstance(envelope.body, dict):
                _log.error("MNS push message cannot be decoded", extra={"fields": {
                    "MessageId": verdict.message_id, "error": envelope.error}})
                continue
            event = envelope.body
            if self._pool is None:
                self._run(event)
            elif not self._pool.submit(functools.partial(self._run, event), event):
                if self._push_replays is not None:  # MNS may retry this very push; the store absorbs repeats
                    self._push_replays.release(verdict.replay_key)
                raise HttpRefusal(self.config.overload_status, "Overloaded", "-", "all workers are busy; MNS will retry")
            accepted += 1
        return _json_reply(self.config.ack_status, {"Accepted": accepted, "MessageId": verdict.message_id})

    def _run(self, event: dict[str, Any], accepted: str | None = None) -> None:
        try:
            if accepted is not None:
                self._provider.process(event, accepted=accepted)
            else:
                self._handle(event)
        except Exception:  # provider.handle answers its own failures; this is a last resort for the log
            _log.exception("async handler raised", extra={"fields": {"RequestId": event.get("RequestId")}})
        except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt, CancelledError, SystemExit from a
            # handler skip the provider's own answer: answer FAILED here, or ROS waits for the whole Timeout
            _log.exception("async handler raised a BaseException", extra={"fields": {"RequestId": event.get("RequestId")}})
            abandon(self._provider, event, f"the handler was interrupted ({type(exc).__name__}); retry the stack operation")

    def set_public_url(self, url: str) -> None:
        """Fix the URL signatures are checked against (a server that knows its own bound address)."""
        self.config = replace(self.config, public_url=url)

    def busy(self) -> int:
        """Async requests accepted and not yet answered."""
        return self._pool.busy() if self._pool is not None else 0

    def stop_accepting(self) -> None:
        """A stopping server: new async requests get the overload status (ROS may retry them against a
        server that stays up) instead of being accepted and then cut short."""
        if self._pool is not None:
            self._pool.refuse()

    def close(self, wait: bool = True, grace: float | None = None) -> int:
        """Refuse new async requests (the overload status) and, with `wait`, let accepted ones finish
        answering: forever, or for `grace` seconds, after which each still running or waiting is
        answered FAILED (SHUTDOWN_REASON) so that ROS does not wait for the whole Timeout. Returns how
        many were answered so."""
        if self._pool is None:
            return 0
        abandoned = self._pool.close(wait, grace)
        answered = 0
        for job in abandoned:
            if wait and abandon(self._provider, job.event, SHUTDOWN_REASON):
                answered += 1
        if abandoned and wait:
            _log.warning("grace period over: async requests still running were answered FAILED",
                         extra={"fields": {"abandoned": len(abandoned), "answered": answered, "grace": grace}})
        return answered


def abandon(provider: HostedProvider, event: Mapping[str, Any], reason: str) -> bool:
    """Answer FAILED for a request whose handler cannot finish (interrupted, or the server stops),
    once: through the provider's `give_up` (recorded first, so nothing answers it again); a
    long-running operation is left to recovery. Returns whether a FAILED was sent."""
    outcome = provider.give_up(dict(event), reason)
    return outcome.body is not None and outcome.delivered


def wsgi_app(
    provider: HostedProvider,
    *,
    config: EndpointConfig | None = None,
    handle: Handle | None = None,
    respond: Respond | None = None,
) -> HttpApp:
    """The WSGI application for `provider`. `handle`/`respond` replace `provider.handle`/`provider.respond`
    (e.g. wrapped with the idempotency store); the config defaults to async mode without auth."""
    return HttpApp(provider, config or EndpointConfig(), handle=handle, respond=respond)
