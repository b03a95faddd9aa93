"""The HAProxy engine's pure half: from routes and backends to HAProxy's configuration, maps and
runtime-API commands (the I/O is in ``engine_haproxy``).

How Flynn's matching (spec §9) maps onto HAProxy:

- ``hosts.map`` (``map_str``, exact) holds the exact domains and the catch-all ``*`` that have a
  ``/`` route, ``wild.map`` the wildcards ``*.<suffix>`` keyed by their suffix. The frontend looks
  up the lower-cased Host without its port in ``hosts.map``, then the host with 0..4 leading labels
  cut in ``wild.map`` (Go's ``SplitN(host, ".", 5)``: most specific wildcard first), then ``*``.
- ``paths.map`` (``map_beg``: HAProxy's prefix tree gives the longest match) maps
  ``<domain><path>`` to the route's backend; the request path has its slashes merged and a ``/``
  appended, so ``/api`` and ``/api/x`` find ``/api/`` but ``/apix`` does not (segment prefixes).
- Backends cannot be added to a running HAProxy, so routes occupy pre-declared backend *slots*,
  one per route, of four kinds (sticky or not, keep-alive or not); each slot has server slots
  filled through ``set server ... addr`` / ``state``. Running out of either grows them by a
  seamless reload. Sticky slots use HAProxy's dynamic cookie ``_backend`` (a hash of the server
  address under a key derived from the router's cookie key), not Flynn's sealed cookie.
- TCP routes are a frontend and backend per port: a new or removed port is a reload.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from .matching import Backend, candidates
from .model import HTTP, TCP, Route
from .sticky import COOKIE_NAME

#: Flynn: 4 attempts in all, each on another backend (``option redispatch 1``), 1 s dials,
#: ten minutes for a response.
RETRIES = 3
DIAL_TIMEOUT = "1s"
RESPONSE_TIMEOUT = "10m"
#: Backend slot kinds: (sticky, keep-alive to the backends).
KINDS: dict[str, tuple[bool, bool]] = {"p": (False, True), "s": (True, True), "c": (False, False), "x": (True, False)}
#: What a domain in a map may hold: a host name, a wildcard, an IPv6 literal. Anything else
#: (Flynn accepts ``http://example.com``) can never equal a Host header and is left out.
HOST_RE = re.compile(r"^[a-z0-9*_.:\[\]-]+$")
#: A map key is one word; paths with whitespace or control characters cannot be one.
PATH_RE = re.compile(r"^/[^\s\x00-\x1f]*$")
NOT_FOUND = "no_route"  # the backend that answers 404 (route slots are r<kind><n>, TCP ones t<port>)
PLACEHOLDER = ("127.0.0.1", 1)  # what an empty server slot points at (it stays in maintenance)
Addr = tuple[str, int]  # a resolved backend address: (ip, port)


def kind_of(route: Route) -> str:
    return next(k for k, v in KINDS.items() if v == (route.sticky, not route.disable_keep_alives))


def slot_name(kind: str, index: int) -> str:
    return f"r{kind}{index}"


def tcp_backend(port: int) -> str:
    return f"t{port}"


def server_slots(backend: str, count: int) -> list[str]:
    return [f"{backend}/s{i}" for i in range(count)]


def dynamic_cookie_key(cookie_key: bytes) -> str:
    """The key HAProxy hashes server addresses with: derived, so the router's key is not in the file."""
    return hmac.new(cookie_key, b"crhelper haproxy dynamic cookie", hashlib.sha256).hexdigest()


@dataclass
class SlotAllocator:
    """Stable route -> backend-slot assignment: a route keeps its slot while its kind is the same,
    so a change of its backends is a server update, never a map change."""

    per_kind: int = 16
    assigned: dict[str, tuple[str, int]] = field(default_factory=dict)

    def assign(self, routes: Sequence[Route]) -> dict[str, str]:
        """``{route formatted id: backend name}``; ``per_kind`` doubles when a kind runs out."""
        wanted = {r.formatted_id: kind_of(r) for r in routes}
        self.assigned = {rid: slot for rid, slot in self.assigned.items() if wanted.get(rid) == slot[0]}
        for rid, kind in sorted(wanted.items()):
            if rid in self.assigned:
                continue
            used = {i for k, i in self.assigned.values() if k == kind}
            index = next(i for i in range(len(used) + 1) if i not in used)
            while index >= self.per_kind:
                self.per_kind *= 2
            self.assigned[rid] = (kind, index)
        return {rid: slot_name(*slot) for rid, slot in self.assigned.items()}


@dataclass(frozen=True)
class Certificate:
    id: str
    pem: str  # certificate then key, the single file HAProxy's ``crt`` loads
    domains: tuple[str, ...]


@dataclass
class Desired:
    """Everything the running HAProxy should hold after a sync."""

    hosts: dict[str, str] = field(default_factory=dict)
    wildcards: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    #: backend name -> the server address ``(ip, port)`` of each server slot in order (None: unused)
    servers: dict[str, list[Addr | None]] = field(default_factory=dict)
    tcp_ports: tuple[int, ...] = ()
    certificates: tuple[Certificate, ...] = ()
    per_kind: int = 16
    per_backend: int = 8

    def shape(self) -> tuple[tuple[int, ...], tuple[str, ...], int, int]:
        """What only a reload can change: listeners, certificates and the slot counts."""
        return self.tcp_ports, tuple(c.id for c in self.certificates), self.per_kind, self.per_backend


Resolved = Mapping[str, Sequence[tuple[Backend, Addr]]]


def plan(routes: Iterable[Route], services: Resolved, slots: SlotAllocator, *, per_backend: int = 8,
         tcp_ports: Iterable[int] | None = None, previous: Desired | None = None) -> Desired:
    """The desired state. ``services`` maps each service to its backends with their resolved
    ``(ip, port)``; ``tcp_ports`` (default: all) are the TCP route ports that can be listened on;
    ``previous`` (the state applied last) keeps addresses in the server slots they had."""
    routes = list(routes)
    http = [r for r in routes if r.type == HTTP]
    roots = {r.domain.lower() for r in http if r.path == "/" and HOST_RE.match(r.domain.lower())}
    # Flynn adds a path route only under a domain with a ``/`` route (spec §9).
    served = [r for r in http if r.domain.lower() in roots and (r.path == "/" or PATH_RE.match(r.path))]
    names = slots.assign(served)  # growth shows in ``per_kind``, part of the shape (a reload)
    desired = Desired(per_kind=slots.per_kind)
    desired.hosts = {d: d for d in sorted(roots) if not d.startswith("*.")}
    desired.wildcards = {d[2:]: d for d in sorted(roots) if d.startswith("*.")}
    desired.paths = {r.domain.lower() + r.path: names[r.formatted_id] for r in served}

    before = previous.servers if previous is not None else {}

    def addresses(route: Route, backend: str) -> list[Addr | None]:
        pairs = list(services.get(route.service, ()))
        chosen = candidates([b for b, _ in pairs], route.leader)
        by_backend = {b.addr: resolved for b, resolved in pairs}
        return place(before.get(backend, ()), list(dict.fromkeys(by_backend[b.addr] for b in chosen)))

    for r in served:
        desired.servers[names[r.formatted_id]] = addresses(r, names[r.formatted_id])
    tcp = {r.port: r for r in routes if r.type == TCP and r.port > 0}
    allowed = set(tcp) if tcp_ports is None else set(tcp_ports) & set(tcp)
    desired.tcp_ports = tuple(sorted(allowed))
    for port in desired.tcp_ports:
        desired.servers[tcp_backend(port)] = addresses(tcp[port], tcp_backend(port))
    needed = max((len(s) for s in desired.servers.values()), default=0)
    desired.per_backend = per_backend
    while desired.per_backend < needed:
        desired.per_backend *= 2
    certs: dict[str, Certificate] = {}
    for r in served:
        if r.certificate is not None and r.certificate.id and r.path == "/":
            prior = certs.get(r.certificate.id)
            domains = (prior.domains if prior else ()) + (r.domain.lower(),)
            certs[r.certificate.id] = Certificate(r.certificate.id, r.certificate.cert.strip() + "\n"
                                                  + r.certificate.key.strip() + "\n", domains)
    desired.certificates = tuple(certs[k] for k in sorted(certs))
    return desired


def map_text(entries: Mapping[str, str]) -> str:
    return "".join(f"{key} {value}\n" for key, value in sorted(entries.items()))


def error_response(status: int, reason: str, body: str) -> str:
    """An errorfile: a whole HTTP response, the body as the built-in engine sends it."""
    data = body.encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\nCache-Control: no-cache\r\n\r\n{body}")


@dataclass(frozen=True)
class Listen:
    """Where the engine listens and its files live (the runtime directory, private to this run)."""

    dir: str
    host: str
    http_port: int
    https_port: int | None
    tcp_host: str
    cookie_key: str  # already derived (:func:`dynamic_cookie_key`)


def _server_lines(servers: Sequence[Addr | None], count: int) -> list[str]:
    lines = []
    for i in range(count):
        addr = servers[i] if i < len(servers) else None
        if addr is not None:
            lines.append(f"    server s{i} {_addr(addr[0])}:{addr[1]}")
        else:
            lines.append(f"    server s{i} {PLACEHOLDER[0]}:{PLACEHOLDER[1]} disabled")
    return lines


def _addr(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def render(desired: Desired, listen: Listen) -> str:
    """The whole configuration for the desired state (loaded at start and on every reload)."""
    d = listen.dir
    lines = [
        "# Written by crhelper router serve --engine haproxy; regenerated on every change.",
        "global",
        "    master-worker",
        f"    stats socket {d}/admin.sock mode 600 level admin",
        "    stats timeout 30s",
        "    log stderr format raw local0 err",
        "",
        "defaults",
        "    mode http",  # no per-request logs (``log global`` would build a line per request)
        f"    timeout connect {DIAL_TIMEOUT}",
        "    timeout client 10m",
        f"    timeout server {RESPONSE_TIMEOUT}",
        "    timeout http-request 30s",
        "    timeout tunnel 1h",
        f"    retries {RETRIES}",
        "    option redispatch 1",
        "    balance random(2)",
        # Backend connections stay open and are shared between clients (Flynn's Go transport pools
        # them the same way), so a request seldom pays for a connect.
        "    option http-keep-alive",
        "    http-reuse always",
        f"    errorfile 404 {d}/404.http",
        f"    errorfile 503 {d}/503.http",
        "",
        "frontend http",
        f"    bind {_addr(listen.host)}:{listen.http_port}",
    ]
    if listen.https_port is not None and desired.certificates:
        lines.append(f"    bind {_addr(listen.host)}:{listen.https_port} ssl crt-list {d}/certs.list strict-sni")
    lines += [
        "    option forwardfor",
        # the Host lower-cased without its port; an IPv6 literal keeps its brackets (a regex only there)
        "    http-request set-var(txn.host) req.hdr(host),lower,field(1,:) unless { req.hdr(host) -m beg [ }",
        "    http-request set-var(txn.host) req.hdr(host),lower,regsub(':[0-9]+$','') if { req.hdr(host) -m beg [ }",
        f"    http-request set-var(txn.domain) var(txn.host),map_str({d}/hosts.map)",
    ]
    for cut in range(5):  # *.a.b.c.d.e.f, *.b.c.d.e.f, ..., *.e.f (Go's SplitN(host, ".", 5))
        suffix = "var(txn.host)" if cut == 0 else f"var(txn.host),field({cut + 1},.,0)"
        lines.append(f"    http-request set-var(txn.domain) {suffix},map_str({d}/wild.map)"
                     " unless { var(txn.domain) -m found }")
    lines += [
        f"    http-request set-var(txn.domain) str(*),map_str({d}/hosts.map) unless {{ var(txn.domain) -m found }}",
        # matched on the decoded path (Go's URL.Path), empty segments not counting (``//a`` is ``/a``):
        # decoded and merged only when the path has a ``%`` or a ``//``
        "    http-request set-var-fmt(txn.key) '%[var(txn.domain)]%[path]/' if { var(txn.domain) -m found }",
        "    http-request set-var-fmt(txn.key) '%[var(txn.domain)]%[path,url_dec,regsub(/+,/,g)]/'"
        " if { var(txn.domain) -m found } { path -m sub // % }",
        "    http-request add-header X-Forwarded-Proto %[ssl_fc,iif(https,http)]",
        "    http-request add-header X-Forwarded-Port %[dst_port]",
        "    http-request set-header X-Request-Start %[date(0,ms)]",
        "    http-request set-header X-Request-Id %[uuid()]"
        " unless { req.hdr(x-request-id) -m reg ^[a-zA-Z0-9+/=-]{20,200}$ }",
        # no route (no key, or no prefix in the map): the 404 backend
        f"    use_backend %[var(txn.key),map_beg({d}/paths.map,{NOT_FOUND})]",
        f"    default_backend {NOT_FOUND}",
        "",
        f"backend {NOT_FOUND}",
        "    http-request deny deny_status 404",
        "",
    ]
    for kind, (sticky, keep_alive) in KINDS.items():
        for index in range(desired.per_kind):
            name = slot_name(kind, index)
            lines.append(f"backend {name}")
            if sticky:
                lines += [f"    cookie {COOKIE_NAME} insert indirect nocache dynamic",
                          f"    dynamic-cookie-key {listen.cookie_key}"]
            if not keep_alive:
                lines.append("    option http-server-close")
            lines += _server_lines(desired.servers.get(name, []), desired.per_backend)
            lines.append("")
    for port in desired.tcp_ports:
        name = tcp_backend(port)
        lines += [f"frontend tcp{port}", "    mode tcp", f"    bind {_addr(listen.tcp_host)}:{port}",
                  f"    default_backend {name}", "", f"backend {name}", "    mode tcp"]
        lines += _server_lines(desired.servers.get(name, []), desired.per_backend)
        lines.append("")
    return "\n".join(lines) + "\n"


def crt_list(desired: Desired, cert_dir: str) -> str:
    """One line per certificate: its file and the SNI names it answers (its routes' domains)."""
    return "".join(f"{cert_dir}/{c.id}.pem {' '.join(c.domains)}\n" for c in desired.certificates)


def place(before: Sequence[Addr | None], wanted: Sequence[Addr]) -> list[Addr | None]:
    """Server slots for ``wanted``: an address keeps the slot it had, new ones fill the free slots,
    so a change touches only the servers that changed (and dynamic cookies stay put)."""
    kept = [a if a in wanted else None for a in before]
    new = [a for a in wanted if a not in kept]
    for i, a in enumerate(kept):
        if a is None and new:
            kept[i] = new.pop(0)
    kept += new
    while kept and kept[-1] is None:
        kept.pop()
    return kept


def server_commands(backend: str, before: Sequence[Addr | None], after: Sequence[Addr | None],
                    count: int) -> list[str]:
    """Runtime-API commands taking one backend's server slots from ``before`` to ``after``: a
    changed slot gets its address and leaves maintenance, a slot no longer used enters it (its
    established connections finish)."""
    commands = []
    for i in range(count):
        old = before[i] if i < len(before) else None
        new = after[i] if i < len(after) else None
        if new == old:
            continue
        server = f"{backend}/s{i}"
        if new is None:
            commands.append(f"set server {server} state maint")
        else:
            if old is not None:
                commands.append(f"set server {server} state maint")
            commands += [f"set server {server} addr {new[0]} port {new[1]}", f"set server {server} state ready"]
    return commands
