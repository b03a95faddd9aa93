"""Which backend a boot group runs on: `Backend` in its properties, else
`CRHELPER_BOOTGROUP_BACKEND`, else `local`. Each cloud backend lives in its own module
(`backend_ecs`, `backend_cloudstack`) exposing `make_backend(env) -> BootBackend`, imported only
when a group uses it, so the local path never loads a cloud SDK."""

from __future__ import annotations

import importlib
from typing import Mapping

from .backends import BootBackend
from .state import GroupStore

#: Backend name -> the module that builds it.
MODULES = {"ecs": "backend_ecs", "cloudstack": "backend_cloudstack"}


class BackendUnavailable(Exception):
    """The backend cannot be built here; the message says which and why."""


def make_backend(name: str, store: GroupStore, env: Mapping[str, str]) -> BootBackend:
    if name == "local":
        from .backend_local import LocalBackend

        return LocalBackend(store)
    module_name = MODULES.get(name)
    if module_name is None:
        raise BackendUnavailable(f"Backend: {name!r} is not a boot-group backend (local, ecs or cloudstack)")
    qualified = f"{__package__}.{module_name}"
    try:
        module = importlib.import_module(qualified)
    except ModuleNotFoundError as exc:
        if exc.name == qualified:
            raise BackendUnavailable(f"Backend: the {name} backend is not built in this version "
                                     f"({qualified} is missing); use Backend: local") from None
        raise BackendUnavailable(f"Backend: the {name} backend needs {exc.name}, which is not installed "
                                 f"(pip install 'ros-crhelper[{name}]')") from None
    factory = getattr(module, "make_backend", None)
    if not callable(factory):
        raise BackendUnavailable(f"Backend: {qualified} has no make_backend(env); the {name} backend is not usable")
    backend: BootBackend = factory(env)
    return backend
