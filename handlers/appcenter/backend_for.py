"""The node backend a cluster names ("local" or "ecs"), built from the environment: apart from
`backends` (the Protocol), so importing the Protocol never reaches a backend module, and each
backend module is imported only when it is chosen (the ECS SDK is heavy)."""

from __future__ import annotations

from typing import Any

from .backends import BACKENDS, BackendError, NodeBackend


def backend_for(name: str, settings: Any = None) -> NodeBackend:
    """The backend called `name` ("local" or "ecs"), built from the environment (or `settings`),
    importing its module only now (the ECS SDK is heavy)."""
    if name == "local":
        from .backend_local import LocalNodeBackend
        return LocalNodeBackend.from_env(settings)
    if name == "ecs":
        from .backend_ecs import EcsNodeBackend
        backend: NodeBackend = EcsNodeBackend.from_env(settings)
        return backend
    raise BackendError(f"Backend: one of {', '.join(BACKENDS)}, got {name!r}")
