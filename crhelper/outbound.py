"""All outbound HTTP for responses: URL choice, allowlist, TLS, timeouts, bounded retries.

Stdlib http.client only: this runs on every cold start, and `requests` alone costs ~100 ms of import.
Timeouts, budgets, back-off and which answers are retried are the shared outbound policy
(`crhelper.cloud.http.OutboundPolicy`, built from `DeliverySettings` by `delivery_policy`); what is
particular to responses (two URLs, the allowlist, a watchdog per socket) stays here.
"""

from __future__ import annotations

import fnmatch
import functools
import heapq
import http.client
import os
import random
import re
import socket
import threading
import time
from email.utils import formatdate
from typing import TYPE_CHECKING, Callable
from urllib.parse import quote, urlsplit

from .config import DeliverySettings, ReadOnly
from .logs import get_logger, redact_url

if TYPE_CHECKING:
    from .cloud.http import OutboundPolicy

USER_AGENT = "ros-crhelper/0.1"
_log = get_logger("outbound")


class DeliveryReport(ReadOnly):
    """What happened to one response: delivered or not, after how many attempts, and why.

    `final` is True when sending again cannot help (a 4xx other than 429, an invalid or refused URL,
    an untrusted TLS certificate, no URL at all); a queue worker need not keep the message for it.
    """

    __slots__ = ("delivered", "attempts", "status", "url_kind", "error", "final")
    delivered: bool
    attempts: int
    status: int | None
    url_kind: str | None
    error: str | None
    final: bool

    def __init__(self, delivered: bool, attempts: int, status: int | None = None, url_kind: str | None = None,
                 error: str | None = None, final: bool = False) -> None:
        self._init(delivered=delivered, attempts=attempts, status=status, url_kind=url_kind, error=error, final=final)


class _Retryable(Exception):
    """An attempt that may succeed if repeated (connection trouble, 429, 5xx)."""

    def __init__(self, message: str, retry_after: float | None = None, connection: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.connection = connection


class _Final(Exception):
    """An attempt whose answer will not change (other 4xx, a refused URL)."""


class _BadUrl(_Final):
    """This URL can never work (invalid, untrusted): drop it, but the other URL may still be tried."""


def host_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    """True when no allowlist is set, or the URL's host matches one of its patterns (`*.aliyuncs.com`)."""
    if not allowed:
        return True
    host = (urlsplit(url).hostname or "").lower()
    return any(fnmatch.fnmatchcase(host, pattern) for pattern in allowed)


def ordered_urls(public: str | None, intranet: str | None, mode: str, on_function_compute: bool) -> list[tuple[str, str]]:
    """(kind, url) in the order to try: the preferred one first, the other as a fallback."""
    prefer_intranet = mode == "intranet" or (mode == "auto" and on_function_compute)
    candidates = [("intranet", intranet), ("public", public)] if prefer_intranet else [("public", public), ("intranet", intranet)]
    return [(kind, url) for kind, url in candidates if url]


@functools.lru_cache(maxsize=8)
def _ssl_context(ca_bundle: str | None, verify: bool):  # type: ignore[no-untyped-def]
    import ssl  # only when a URL is https

    if not verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if ca_bundle and os.path.isdir(ca_bundle):
        return ssl.create_default_context(capath=ca_bundle)
    if ca_bundle or os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(cafile=ca_bundle)
    # The system bundle file makes OpenSSL parse every CA (~50 ms of a cold start); the hashed
    # certificate directory next to it is read lazily, one CA per handshake.
    directory = ssl.get_default_verify_paths().capath
    if directory and _has_hashed_certificates(directory):
        return ssl.create_default_context(capath=directory)
    return ssl.create_default_context()


def _has_hashed_certificates(directory: str) -> bool:
    """OpenSSL's capath lookup needs `<hash>.0` links; a plain folder of PEM files does not work."""
    try:
        with os.scandir(directory) as entries:
            return any(_is_hash_name(entry.name) for entry in entries)
    except OSError:
        return False


_HEX = frozenset("0123456789abcdef")


def _is_hash_name(name: str) -> bool:
    """`<8 hex digits>.<digit>`, OpenSSL's name for a hashed CA link (no regex: compiling one, and
    matching every file of a 300-file folder with it, is a cold start's ~0.5 ms)."""
    return len(name) == 10 and name[8] == "." and name[9] in "0123456789" and _HEX.issuperset(name[:8])


#: Bytes that can never appear in a URL sent on a request line (space, controls; CR/LF would inject headers).
_FORBIDDEN_IN_URL = re.compile(r"[\x00-\x20\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
#: Everything printable in ASCII stays as it is in the request target; only non-ASCII is percent-encoded.
_TARGET_SAFE = "".join(chr(code) for code in range(0x21, 0x7F))
#: Slack kept before a deadline, so that the report is back before it.
_DEADLINE_MARGIN = 0.05


class _Target(ReadOnly):
    __slots__ = ("scheme", "host", "port", "path")
    scheme: str
    host: str
    port: int | None
    path: str  # request target: path and query, ASCII only

    def __init__(self, scheme: str, host: str, port: int | None, path: str) -> None:
        self._init(scheme=scheme, host=host, port=port, path=path)


def _char_name(char: str) -> str:
    return {" ": "a space", "\r": "a CR", "\n": "an LF", "\t": "a tab"}.get(char, f"control character U+{ord(char):04X}")


def _host_problem(host: str) -> str | None:
    """Why a host name cannot be resolved, decided locally (DNS would only fail, slowly and retryably)."""
    if ":" in host:  # an IPv6 literal; urlsplit has checked its brackets and syntax
        return None
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError as exc:
        return f"host is not a valid internationalised domain name ({exc.__cause__ or exc})"
    if len(ascii_host.rstrip(".")) > 253:
        return f"host name is {len(ascii_host)} characters; DNS allows at most 253"
    for label in ascii_host.rstrip(".").split("."):
        if label[:4].lower() == "xn--":
            try:
                label.encode("ascii").decode("idna")
            except UnicodeError:
                return f"host label {label[:70]!r} is not valid punycode (IDNA)"
    return None


def _target(url: str) -> _Target:
    """Parse and check a response URL once, before any network I/O; raise _BadUrl saying precisely why not."""
    checked = _checked_target(url) if isinstance(url, str) else None
    if isinstance(checked, _Target):
        return checked
    if isinstance(checked, str):
        raise _BadUrl(checked)
    return _parse_target(url)


@functools.lru_cache(maxsize=256)
def _checked_target(url: str) -> "_Target | str":
    """`_parse_target` remembered: a request's URLs are checked several times on its way out."""
    try:
        return _parse_target(url)
    except _BadUrl as exc:
        return str(exc)


def _parse_target(url: str) -> _Target:
    if not isinstance(url, str):
        raise _BadUrl(f"response URL must be a string, got {type(url).__name__}")
    bad = _FORBIDDEN_IN_URL.search(url)
    if bad:
        raise _BadUrl(f"response URL contains {_char_name(bad.group())} at position {bad.start()}: {redact_url(url)}")
    surrogate = _SURROGATE.search(url)
    if surrogate:
        raise _BadUrl(f"response URL contains a lone surrogate U+{ord(surrogate.group()):04X}, not valid Unicode")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _BadUrl(f"response URL cannot be parsed ({exc}): {redact_url(url)}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _BadUrl(f"response URL must be http(s) with a host, got {redact_url(url)}")
    try:
        port = parts.port
    except ValueError as exc:  # "Port out of range 0-65535", "Port could not be cast to integer value as 'abc'"
        raise _BadUrl(f"response URL has an invalid port ({exc}): {redact_url(url)}") from None
    if port == 0:
        raise _BadUrl(f"response URL has an invalid port (0): {redact_url(url)}")
    problem = _host_problem(parts.hostname)
    if problem:
        raise _BadUrl(f"response URL {problem}: {redact_url(url)}")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    # A non-ASCII path cannot go on an HTTP/1.1 request line as it is; browsers send it as UTF-8 escapes.
    return _Target(parts.scheme, parts.hostname, port, quote(target, safe=_TARGET_SAFE))


class _Deadlines:
    """One daemon thread that fires every pending watchdog at its deadline (a heap of them), and the
    runtime's other short timed calls (`call_at`: a step's first lease check), so that a cold start
    pays for one timer thread, not one per purpose.

    A `threading.Timer` per attempt costs a thread start and join on every delivery (about half
    of an attempt's CPU in a busy worker); one thread sleeping until the earliest deadline does not.
    Stopped watchdogs stay in the heap until their time or a compaction, whichever is first.
    """

    def __init__(self) -> None:
        self._wake = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, "_Watchdog | _Call"]] = []
        self._sequence = 0
        self._stopped = 0
        self._thread: threading.Thread | None = None

    def add(self, watchdog: "_Watchdog | _Call") -> None:
        with self._wake:
            self._sequence += 1
            heapq.heappush(self._heap, (watchdog.ends, self._sequence, watchdog))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="crhelper-outbound-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is watchdog:
                self._wake.notify()  # an earlier deadline than the one the thread sleeps for

    def stopped(self) -> None:
        """A watchdog was stopped before its time: drop the dead entries once they are most of the heap."""
        with self._wake:
            self._stopped += 1
            if self._stopped > 64 and self._stopped * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].done]
                heapq.heapify(self._heap)
                self._stopped = 0

    def _run(self) -> None:
        while True:
            with self._wake:
                while True:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        due = heapq.heappop(self._heap)[2]
                        if due.done:
                            self._stopped = max(0, self._stopped - 1)
                        break
                    self._wake.wait(self._heap[0][0] - now if self._heap else None)
            due.fire()  # outside the heap's lock: the watchdog takes its own


_deadlines = _Deadlines()


class _Call:
    """A call made once by the deadline thread at `ends` (see `call_at`)."""

    __slots__ = ("ends", "done", "fire")

    def __init__(self, ends: float, fire: Callable[[], None]) -> None:
        self.ends = ends
        self.done = False
        self.fire = fire


def call_at(when: float, fire: Callable[[], None]) -> None:
    """Have the shared timer thread call `fire()` at `when` (time.monotonic()). `fire` must return at
    once (it holds up the watchdogs): start a thread for anything slow. An exception it raises is logged."""

    def guarded() -> None:
        try:
            fire()
        except Exception:  # the timer thread must survive whatever a call does
            _log.exception("a timed call failed")

    _deadlines.add(_Call(when, guarded))


def _reset_after_fork() -> None:
    """A forked child has no deadline thread; its copy of the heap belongs to the parent's attempts. Its
    copies of the kept connections are the parent's too: closed here (the parent's stay open), never used."""
    global _deadlines, _pool
    _deadlines = _Deadlines()
    inherited, _pool = _pool, _ConnectionPool()
    try:
        connections = inherited.detach()  # not under its lock: a parent's thread may have held it at the fork
    except RuntimeError:  # that thread was changing it at the fork: left to the collector
        return
    for connection in connections:
        connection.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


class _Watchdog:
    """Shuts the attempt's socket down when its wall-clock budget ends.

    Socket timeouts restart on every byte, so a peer that trickles one byte a second would hold a
    blocking read (or the TLS handshake, or a send) forever; a shut-down socket ends it at once.
    The lock keeps the deadline thread from touching a descriptor that was already closed (and
    maybe reused).
    """

    def __init__(self, ends: float) -> None:
        self.ends = ends  # time.monotonic()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._registered = False
        self.done = False
        self.fired = False

    def watch(self, sock: socket.socket) -> None:
        """Guard this socket (the TLS one replaces the plain one); the clock started with the attempt."""
        with self._lock:
            self._sock = sock
            register = not self._registered and not self.done
            self._registered = True
        if register:
            _deadlines.add(self)

    def fire(self) -> None:
        with self._lock:
            if self.done or self._sock is None:
                return
            self.fired = True
            try:
                # The plain socket method also for an SSLSocket: its own shutdown() tears down
                # the TLS state another thread is using.
                socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        with self._lock:
            already = self.done
            self.done = True
            self._sock = None  # the heap may hold this watchdog until its deadline: not the socket
            registered = self._registered
        if registered and not already:
            _deadlines.stopped()


@functools.lru_cache(maxsize=16)
def delivery_policy(settings: DeliverySettings) -> "OutboundPolicy":
    """The outbound policy these delivery settings describe."""
    # Deferred, like every cloud/ module: `import crhelper` must load none of them.
    from .cloud.http import OutboundPolicy

    return OutboundPolicy(
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        max_attempts=settings.max_attempts,
        backoff_base=settings.backoff_base,
        backoff_cap=settings.backoff_cap,
    )


def attempt_budget(settings: DeliverySettings) -> float:
    """The longest one attempt may take, connect to the last byte read: a slow peer cannot stretch it."""
    return delivery_policy(settings).attempt_budget


def delivery_budget(settings: DeliverySettings) -> float:
    """The longest a whole delivery may take when the caller gives no deadline."""
    return delivery_policy(settings).total_budget


#: Idle response connections kept at most, per peer and in all (each is a descriptor, and on a local
#: ResponseURL server a handler thread): enough for a 32-thread queue worker answering one ROS endpoint.
_IDLE_PER_PEER = 64
_IDLE_IN_ALL = 128
#: A reply body longer than this is not read to its end: its connection is closed instead of kept.
_REUSABLE_REPLY_BYTES = 64 * 1024
#: A peer, as far as reusing a connection to it goes: scheme, host, port and the trust that verified it.
_PeerKey = tuple[str, str, int, "str | None", bool]


class _StaleConnection(Exception):
    """A kept connection the peer had closed: nothing of the answer was read, so it goes on a new one."""


def _idle_and_open(sock: "socket.socket | None") -> bool:
    """True when a kept connection can carry the next request: the peer has sent nothing since the last
    reply (readable while idle means it closed the connection, or sent bytes no request asked for)."""
    import select  # only once a connection was kept: a cold start makes one delivery

    if sock is None or sock.fileno() < 0:
        return False
    pending = getattr(sock, "pending", None)  # TLS bytes already decrypted and buffered
    if pending is not None and pending():
        return False
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    try:
        return not select.select([sock], [], [], 0)[0]
    except (OSError, ValueError):
        return False


class _ConnectionPool:
    """Connections the peer keeps alive, for the next answer to the same peer (scheme, host, port and
    the trust that verified it): a busy worker answering one ROS endpoint skips a TCP and TLS handshake
    per response. A connection is taken by one attempt at a time; one idle longer than `keep_alive`
    seconds, or found closed by the peer, is closed instead."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Per peer, its idle connections and since when each is idle, oldest first; never an empty list.
        self._idle: dict[_PeerKey, list[tuple[http.client.HTTPConnection, float]]] = {}

    def take(self, key: _PeerKey, keep_alive: float) -> http.client.HTTPConnection | None:
        now = time.monotonic()
        with self._lock:
            kept = self._idle.get(key)
            if not kept:
                return None
            found, since = kept.pop()  # the most recently used: the likeliest still open
            stale = []
            if now - since >= keep_alive:  # and every older one is past its time too
                stale = [found] + [connection for connection, _ in kept]
                kept.clear()
            if not kept:
                del self._idle[key]
        if stale:
            for connection in stale:
                connection.close()
            return None
        if not _idle_and_open(found.sock):
            found.close()
            return None
        return found

    def give(self, key: _PeerKey, connection: http.client.HTTPConnection) -> None:
        evicted: list[http.client.HTTPConnection] = []
        with self._lock:
            self._idle.setdefault(key, []).append((connection, time.monotonic()))
            if len(self._idle[key]) > _IDLE_PER_PEER:
                evicted.append(self._idle[key].pop(0)[0])
            while sum(len(kept) for kept in self._idle.values()) > _IDLE_IN_ALL:
                oldest = min(self._idle, key=lambda peer: self._idle[peer][0][1])  # idle longest
                evicted.append(self._idle[oldest].pop(0)[0])
                if not self._idle[oldest]:
                    del self._idle[oldest]
        for old in evicted:
            old.close()

    def detach(self) -> list[http.client.HTTPConnection]:
        """Every idle connection, now the caller's to close; the pool is left empty."""
        connections = [connection for kept in self._idle.values() for connection, _ in kept]
        self._idle = {}
        return connections

    def close_all(self) -> None:
        with self._lock:
            connections = self.detach()
        for connection in connections:
            connection.close()


_pool = _ConnectionPool()


def close_idle_connections() -> None:
    """Close every kept response connection (a test or a process about to exit)."""
    _pool.close_all()


def _attempt(url: str, body: bytes, settings: DeliverySettings, timeout: float) -> int:
    """One POST within `timeout` seconds of wall-clock time, whatever the peer does: on a connection
    the peer kept alive after an earlier answer when there is one, else on a new one."""
    where = _target(url)
    ends = time.monotonic() + timeout
    # An explicit port always: http.client would read the last group of an IPv6 literal as one.
    port = where.port or (443 if where.scheme == "https" else 80)
    key = (where.scheme, where.host, port, settings.ca_bundle, settings.verify_tls)
    headers = {
        "Content-Type": "application/json",
        "Date": formatdate(usegmt=True),
        "Content-Length": str(len(body)),
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }
    if settings.keep_alive > 0:
        kept = _pool.take(key, settings.keep_alive)
        if kept is not None:
            try:
                return _exchange(kept, key, url, where.path, body, headers, settings, timeout, ends, reused=True)
            except _StaleConnection:
                pass  # the peer closed it while idle and read nothing of this answer: a new connection
    connection: http.client.HTTPConnection
    try:
        if where.scheme == "https":
            context = _ssl_context(settings.ca_bundle, settings.verify_tls)
            connection = http.client.HTTPSConnection(where.host, port, timeout=timeout, context=context)
        else:
            connection = http.client.HTTPConnection(where.host, port, timeout=timeout)
    except (http.client.HTTPException, ValueError) as exc:  # their messages may quote the URL
        raise _BadUrl(f"response URL rejected by http.client ({exc.__class__.__name__}): {redact_url(url)}") from None
    watchdog = _Watchdog(ends)
    try:
        sock = socket.create_connection((where.host, port), timeout=min(settings.connect_timeout, timeout))
        watchdog.watch(sock)
        # As http.client's own connect does: headers and body are two writes, and on a kept connection
        # Nagle's algorithm would hold the body until the peer's delayed ACK of the headers (~40 ms).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if where.scheme == "https":
            sock = context.wrap_socket(sock, server_hostname=where.host)  # the handshake runs under the watchdog
            watchdog.watch(sock)
        connection.sock = sock
    except (OSError, http.client.HTTPException, ValueError) as exc:
        watchdog.stop()
        connection.close()
        if type(exc).__name__ == "SSLCertVerificationError":
            raise _BadUrl(f"TLS certificate of {where.host} not trusted: {exc}; set CRHELPER_CA_BUNDLE to its CA") from None
        if watchdog.fired:
            raise _out_of_time(url, timeout) from None
        raise _Retryable(f"cannot connect: {exc.__class__.__name__}: {exc}", connection=True) from None
    return _exchange(connection, key, url, where.path, body, headers, settings, timeout, ends, reused=False,
                     watchdog=watchdog)


def _out_of_time(url: str, timeout: float) -> _Retryable:
    return _Retryable(
        f"no complete answer within the attempt's budget of {timeout:.1f} s (the peer at {redact_url(url)} is too slow)",
        connection=True,
    )


def _exchange(
    connection: http.client.HTTPConnection,
    key: _PeerKey,
    url: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    settings: DeliverySettings,
    timeout: float,
    ends: float,
    *,
    reused: bool,
    watchdog: _Watchdog | None = None,
) -> int:
    """Send the answer on a connected `connection` and read the reply, under one watchdog for the whole
    attempt; the connection goes back to the pool when the reply was read whole and the peer keeps it
    open. On a kept connection, a failure before any reply byte raises _StaleConnection."""
    sock = connection.sock
    if watchdog is None:
        watchdog = _Watchdog(ends)
        watchdog.watch(sock)
    keep = False
    reply: http.client.HTTPResponse | None = None
    try:
        sock.settimeout(max(0.001, min(settings.read_timeout, ends - time.monotonic())))
        try:
            connection.request(settings.method, path, body=body, headers=headers)
            reply = connection.getresponse()
            length = reply.length
            keep = (settings.keep_alive > 0 and not reply.will_close and length is not None
                    and length <= _REUSABLE_REPLY_BYTES)
            reply_bytes = reply.read() if keep else reply.read(512)
            reply_text = reply_bytes[:512].decode("utf-8", errors="replace")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            keep = False
            if watchdog.fired:
                raise _out_of_time(url, timeout) from None
            if reused and reply is None and isinstance(exc, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
                # Sending failed, or the peer closed (RemoteDisconnected) or reset the connection before
                # a status line: the race of a kept connection the peer had just closed.
                raise _StaleConnection() from None
            if isinstance(exc, (http.client.InvalidURL, ValueError)):  # its message would quote the URL
                raise _BadUrl(f"response URL rejected by http.client ({exc.__class__.__name__}): {redact_url(url)}") from None
            raise _Retryable(f"{exc.__class__.__name__}: {exc}") from None
        if watchdog.fired:  # cut short mid-reply: the status line alone is not an answer we can trust
            raise _out_of_time(url, timeout)
    finally:
        watchdog.stop()
        if keep and not watchdog.fired:
            _pool.give(key, connection)
        else:
            connection.close()
    assert reply is not None  # every path that leaves it None raised
    status = reply.status
    if 200 <= status < 300:
        return status
    detail = f"HTTP {status}: {' '.join(reply_text.split())[:200]}"
    policy = delivery_policy(settings)
    if policy.retryable_status(status):
        raise _Retryable(detail, retry_after=policy.retry_after(reply.getheader("Retry-After")))
    refused = policy.refused_redirect(status, reply.getheader("Location"), url)
    raise _Final(f"{refused}: {' '.join(reply_text.split())[:200]}" if refused else detail)


def backoff_delay(attempt: int, settings: DeliverySettings, rand: Callable[[float, float], float] = random.uniform) -> float:
    """Exponential back-off with full jitter; attempt counts from 1."""
    return delivery_policy(settings).backoff(attempt, rand)


def deliver(
    body: bytes,
    public_url: str | None,
    intranet_url: str | None,
    settings: DeliverySettings,
    *,
    on_function_compute: bool = False,
    deadline: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> DeliveryReport:
    """Send one response body. Retries only what can succeed, never past `deadline` (time.monotonic()),
    else never past `delivery_budget(settings)`; a slow peer cannot stretch either. Never raises."""
    started = time.monotonic()
    ends = deadline if deadline is not None else started + delivery_budget(settings) + _DEADLINE_MARGIN
    try:
        return _deliver(body, public_url, intranet_url, settings, on_function_compute, ends, deadline is not None, sleep)
    except Exception as exc:  # a bug of ours must not turn into a handler crash with nothing sent
        _log.exception("response delivery failed unexpectedly")
        return DeliveryReport(False, 0, error=f"internal error while delivering: {exc.__class__.__name__}")


def _usable_urls(
    urls: list[tuple[str, str]], settings: DeliverySettings, dropped: list[str]
) -> list[tuple[str, str]]:
    """The URLs worth trying; each refused one is logged and its reason added to `dropped`."""
    usable = []
    for kind, url in urls:
        try:
            _target(url)
            if not host_allowed(url, settings.allowed_hosts):
                raise _BadUrl(f"response URL host not in CRHELPER_RESPONSE_HOSTS allowlist: {redact_url(url)}")
        except _BadUrl as exc:
            _log.error("response refused", extra={"fields": {"url": redact_url(url), "via": kind, "error": str(exc)}})
            dropped.append(str(exc))
            continue
        usable.append((kind, url))
    return usable


def _deliver(
    body: bytes,
    public_url: str | None,
    intranet_url: str | None,
    settings: DeliverySettings,
    on_function_compute: bool,
    ends: float,
    has_deadline: bool,
    sleep: Callable[[float], None],
) -> DeliveryReport:
    ordered = ordered_urls(public_url, intranet_url, settings.url_mode, on_function_compute)
    if not ordered:
        return DeliveryReport(False, 0, error="the request has no ResponseURL to answer", final=True)
    dropped: list[str] = []
    urls = _usable_urls(ordered, settings, dropped)
    if not urls:
        return DeliveryReport(False, 0, error="; ".join(dropped), final=True)
    limit = "the deadline" if has_deadline else "the delivery's time budget"
    schedule = delivery_policy(settings).schedule(ends=ends, margin=_DEADLINE_MARGIN, sleep=sleep)
    index, last_error = 0, "not attempted"
    while not schedule.exhausted:
        kind, url = urls[index]
        budget = schedule.begin()
        if budget <= 0:
            last_error = f"gave up: no time left before {limit} ({last_error})"
            break
        attempts = schedule.attempts
        try:
            status = _attempt(url, body, settings, budget)
        except _BadUrl as exc:  # this URL cannot work; the other one still may
            last_error = str(exc)
            dropped.append(last_error)
            _log.error("response URL unusable", extra={"fields": {"url": redact_url(url), "attempt": attempts, "error": last_error}})
            del urls[index]
            if not urls:
                return DeliveryReport(False, attempts, url_kind=kind, error="; ".join(dropped), final=True)
            index %= len(urls)
            continue
        except _Final as exc:
            last_error = str(exc)
            _log.error("response rejected", extra={"fields": {"url": redact_url(url), "attempt": attempts, "error": last_error}})
            return DeliveryReport(False, attempts, url_kind=kind, error=last_error, final=True)
        except _Retryable as exc:
            last_error = str(exc)
            _log.warning("response attempt failed", extra={"fields": {"url": redact_url(url), "attempt": attempts, "error": last_error}})
            if exc.connection and len(urls) > 1:
                index = (index + 1) % len(urls)  # the other network may reach ROS when this one cannot
            if schedule.exhausted:
                break
            if not schedule.wait_for_retry(exc.retry_after):
                last_error = f"gave up: the next attempt would start after {limit} ({last_error})"
                break
            continue
        _log.info("response delivered", extra={"fields": {"url": redact_url(url), "attempt": attempts, "status": status, "via": kind}})
        return DeliveryReport(True, attempts, status=status, url_kind=kind)
    if dropped:
        last_error = f"{last_error}; {'; '.join(dropped)}"
    _log.error("response not delivered", extra={"fields": {"attempts": schedule.attempts, "error": last_error}})
    return DeliveryReport(False, schedule.attempts, error=last_error)
