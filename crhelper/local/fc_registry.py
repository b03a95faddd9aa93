"""Registered functions: (service, function) -> handler spec and runtime settings.

FC 3.0 has no services: its functions are held under the service name "" (`FC3_SERVICE`). A function
created through FC 2.0 is also reachable through FC 3.0 as `service$function` (FC 3.0's name for
the 2.0 functions it shows: deploy.md §3.5), `COMPAT_SEPARATOR` here."""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from crhelper.local.fc_protocol import FcApiError

MAX_TIMEOUT_SECONDS = 86400
#: The service name of FC 3.0 functions (which belong to no service).
FC3_SERVICE = ""
#: FC 3.0's name for an FC 2.0 function: "<service>$<function>".
COMPAT_SEPARATOR = "$"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,127}$")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def split_handler(spec: str) -> tuple[str, str]:
    """Split 'package.module:attr' or FC's 'module.attr' (e.g. 'index.handler') into parts."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
    else:
        module, _, attr = spec.rpartition(".")
    if not module or not _DOTTED.match(module) or not _DOTTED.match(attr) or "." in attr:
        raise ValueError(f"handler {spec!r} must look like 'package.module:attr' or 'module.attr'")
    return module, attr


@dataclass(frozen=True)
class FunctionSpec:
    """One function as FC would hold it; `initializer` runs once per instance (here: per process)."""

    service: str
    function: str
    handler: str
    timeout: float = 60
    memory: int = 128
    env: Mapping[str, str] = field(default_factory=dict)
    initializer: str | None = None
    #: The function's own unpacked, read-only code directory (a deployed zip); None: the endpoint's
    #: code paths (a provider registered in process or on the command line).
    code_dir: str | None = None
    #: FC's runtime name (e.g. "python3.10"); None: the host's interpreter.
    runtime: str | None = None

    def __post_init__(self) -> None:
        for label, name in (("service", self.service), ("function", self.function)):
            if label == "service" and name == FC3_SERVICE:
                continue
            if not _NAME.match(name):
                raise ValueError(f"{label} name {name!r} must start with a letter or '_' and "
                                 "contain only letters, digits, '_' and '-' (max 128)")
        split_handler(self.handler)
        if self.initializer is not None:
            split_handler(self.initializer)
        if not 0 < self.timeout <= MAX_TIMEOUT_SECONDS:
            raise ValueError(f"timeout must be in (0, {MAX_TIMEOUT_SECONDS}] seconds")
        if self.memory <= 0:
            raise ValueError("memory must be a positive number of MB")
        for key, value in self.env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"env entry {key!r} must map a str name to a str value")
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))


def compat_target(name: str) -> tuple[str, str]:
    """(service, function) an FC 3.0 name "service$function" stands for (an FC 2.0 function)."""
    service, _, function = name.partition(COMPAT_SEPARATOR)
    return service, function


class FunctionRegistry:
    """Thread-safe lookup that answers misses with FC's 404 codes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._functions: dict[tuple[str, str], FunctionSpec] = {}
        self._services: set[str] = set()  # created through the management API, maybe still empty

    def add_service(self, service: str) -> None:
        with self._lock:
            self._services.add(service)

    def remove_service(self, service: str) -> None:
        with self._lock:
            self._services.discard(service)

    def add(self, spec: FunctionSpec) -> None:
        with self._lock:
            self._functions[(spec.service, spec.function)] = spec

    def remove(self, service: str, function: str) -> None:
        with self._lock:
            self._functions.pop((service, function), None)

    def lookup(self, service: str, function: str) -> FunctionSpec:
        with self._lock:
            spec = self._functions.get((service, function))
            if spec is None and service == FC3_SERVICE and COMPAT_SEPARATOR in function:
                spec = self._functions.get(compat_target(function))
            known_service = (spec is not None or service in self._services
                             or any(s == service for s, _ in self._functions))
        if spec is not None:
            return spec
        if service == FC3_SERVICE:
            raise FcApiError(404, "FunctionNotFound", f"function '{function}' does not exist")
        if not known_service:
            raise FcApiError(404, "ServiceNotFound", f"service '{service}' does not exist")
        raise FcApiError(404, "FunctionNotFound",
                         f"function '{function}' does not exist in service '{service}'")

    def all(self) -> list[FunctionSpec]:
        with self._lock:
            return list(self._functions.values())
