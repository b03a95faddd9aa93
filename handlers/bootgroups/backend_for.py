"""Which backend a boot group runs on, built with what it needs, and who owns the group.

`Backend` in its properties, else `CRHELPER_BOOTGROUP_BACKEND`, else `local`. Each cloud backend
lives in its own module (`backend_ecs`, `backend_cloudstack`) exposing `make_backend(env, ...)`,
imported only when a group uses it, so the local path never loads a cloud SDK. What a backend is
built from (`Wiring`): the FC context (`crhelper.invocation.fc_context()`: its STS credentials,
else the `ALIBABA_CLOUD_*` environment FC also sets for the role), the region (the template's
`Ecs.Region`, else the request's RegionId), the boots the provider recorded (so the ECS backend
does not mistake the group's own start for one outside it), and the template's connection settings
(`CloudStack: {...}` / `Ecs: {...}`).

The owner (names are unique and claims held per owner): locally the `$CRHELPER_HOME`; on ECS the
account (the request's ResourceOwnerId, else the FC context's account id); on CloudStack the
endpoint and a hash of the API key (see `owner_of`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
from typing import Mapping

from crhelper.errors import Failure

from .backends import BootBackend
from .state import GroupStore, local_owner

#: Backend name -> the module that builds it.
MODULES = {"ecs": "backend_ecs", "cloudstack": "backend_cloudstack"}


class BackendUnavailable(Exception):
    """The backend cannot be built here; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class Wiring:
    """What a cloud backend is built from, besides the environment."""

    #: The FC context of the invocation (STS credentials, account id); None outside FC.
    context: object | None = None
    #: The region to call (ecs): the template's Ecs.Region, else the request's RegionId.
    region: str | None = None
    #: vm -> its last boot as the provider recorded it (GroupRecord.power_changes).
    known_boots: Mapping[str, float] | None = None
    #: The template's CloudStack/Ecs settings (keys as written there; a Secret in plain text).
    connection: Mapping[str, str] | None = None


def make_backend(name: str, store: GroupStore, env: Mapping[str, str], wiring: Wiring | None = None) -> BootBackend:
    wiring = wiring or Wiring()
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
    if name == "ecs":
        backend: BootBackend = factory(env, context=wiring.context, region=wiring.region,
                                       known_boots=wiring.known_boots, given=wiring.connection)
    else:
        backend = factory(env, given=wiring.connection)
    return backend


def owner_of(name: str, env: Mapping[str, str], *, account: str = "", context: object | None = None,
             backend: BootBackend | None = None) -> str:
    """Who a group belongs to: the scope of its Name and of its claims on instances.

    * local: the `$CRHELPER_HOME` path (each home is its own set of instances).
    * ecs: `ecs:<account id>`, the request's ResourceOwnerId (`account`), else the FC context's
      `account_id`: the account whose instances these are, whichever key or STS session calls.
    * cloudstack: `cloudstack:<endpoint>#<sha256(api key)[:16]>`. The key pair belongs to one user
      of one account on that endpoint, so this is stable and costs no call; `listAccounts` would
      name the account itself, but needs another signed call on every step and a role allowed to
      make it. The limit: two keys of one account are two owners (the key never shows, only its hash).
    """
    if name == "local":
        return local_owner(env)
    if name == "ecs":
        found = account or str(getattr(context, "account_id", "") or "")
        if not found:
            raise Failure("the ecs backend cannot tell the account that owns the group: the request has no "
                          "ResourceOwnerId and there is no Function Compute context")
        return f"ecs:{found}"
    config = getattr(backend, "config", None)
    endpoint, key = getattr(config, "endpoint", ""), getattr(config, "key", "")
    if not endpoint or not key:
        raise Failure(f"the {name} backend cannot tell the account that owns the group (no endpoint and API key)")
    return f"cloudstack:{endpoint}#{hashlib.sha256(key.encode()).hexdigest()[:16]}"
