"""The local service registry: service name -> backend addresses, kept in one JSON file.

It stands in for Flynn's discoverd. Other providers call :func:`register` / :func:`unregister`
when they start or stop an instance; the router re-reads the file when its mtime changes.
File shape: ``{"<service>": ["127.0.0.1:8001", {"addr": "127.0.0.1:8002", "leader": true}]}``.
The leader is the entry flagged ``leader``, else the first entry.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .matching import Backend
from .repository import router_dir

SERVICES_ENV = "CRHELPER_ROUTER_SERVICES"


def default_registry_path() -> Path:
    """``$CRHELPER_ROUTER_SERVICES`` or ``$CRHELPER_HOME/router/services.json``."""
    override = os.environ.get(SERVICES_ENV)
    return Path(override) if override else router_dir() / "services.json"


def _parse_entry(service: str, entry: Any) -> Backend:
    if isinstance(entry, str):
        return Backend(entry)
    if isinstance(entry, dict) and isinstance(entry.get("addr"), str):
        return Backend(entry["addr"], bool(entry.get("leader", False)))
    raise ValueError(f"services[{service!r}]: each entry must be 'host:port' or {{'addr': 'host:port', 'leader': bool}}")


def parse_registry(raw: Any) -> dict[str, list[Backend]]:
    """Validate the file contents; errors name the service and the rule."""
    if not isinstance(raw, dict):
        raise ValueError("services file: top level must be an object of service name -> list")
    out: dict[str, list[Backend]] = {}
    for service, entries in raw.items():
        if not isinstance(entries, list):
            raise ValueError(f"services[{service!r}]: must be a list of backends")
        out[service] = [_parse_entry(service, e) for e in entries]
    return out


def check_addr(service: str, addr: str) -> None:
    """A backend is dialled as ``host:port``; refuse anything else before the router meets it."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"services[{service!r}]: backend address must be host:port with a port 1-65535")


class ServiceRegistry:
    """Read and edit the registry file; writes are locked and atomic so readers never see halves."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_registry_path()
        self._stamp: tuple[int, int, int] | None = None
        self._cache: dict[str, list[Backend]] = {}

    def _read_raw(self) -> dict[str, Any]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        return json.loads(text) if text.strip() else {}

    def load(self) -> dict[str, list[Backend]]:
        """All services, re-read only when the file changed."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._cache = None, {}
            return {}
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            self._cache = parse_registry(self._read_raw())
            self._stamp = stamp
        return self._cache

    def backends(self, service: str) -> list[Backend]:
        return list(self.load().get(service, []))

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_suffix(self.path.suffix + ".lock")
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            raw = self._read_raw()
            yield raw
            parse_registry(raw)
            tmp = self.path.with_suffix(self.path.suffix + ".tmp")
            tmp.write_text(json.dumps(raw, indent=2, sort_keys=True))
            os.replace(tmp, self.path)

    def register(self, service: str, addr: str, *, leader: bool = False) -> None:
        """Add (or re-flag) one instance; a new leader clears the flag on the others."""
        check_addr(service, addr)
        with self._locked() as raw:
            entries = [_parse_entry(service, e) for e in raw.get(service, [])]
            entries = [b for b in entries if b.addr != addr]
            if leader:
                entries = [Backend(b.addr) for b in entries]
            entries.append(Backend(addr, leader))
            raw[service] = [{"addr": b.addr, "leader": b.leader} if b.leader else b.addr for b in entries]

    def unregister(self, service: str, addr: str) -> None:
        with self._locked() as raw:
            entries = [_parse_entry(service, e) for e in raw.get(service, [])]
            kept = [b for b in entries if b.addr != addr]
            if kept:
                raw[service] = [{"addr": b.addr, "leader": b.leader} if b.leader else b.addr for b in kept]
            else:
                raw.pop(service, None)


def register(service: str, addr: str, *, leader: bool = False, path: Path | str | None = None) -> None:
    """Register a backend of ``service`` for the local router (used by other providers)."""
    ServiceRegistry(path).register(service, addr, leader=leader)


def unregister(service: str, addr: str, *, path: Path | str | None = None) -> None:
    """Remove a backend of ``service`` from the local router."""
    ServiceRegistry(path).unregister(service, addr)
