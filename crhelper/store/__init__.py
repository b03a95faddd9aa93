"""State stores for idempotent delivery and long-running handlers, chosen by one URL.

``open_store()`` reads ``CRHELPER_STORE``; unset, it uses ``sqlite:///$CRHELPER_HOME/state.sqlite``
(``CRHELPER_HOME`` defaults to ``~/.crhelper``). ``sqlite://:memory:`` gives a private store for
tests; ``memory://`` a private store without SQLite (a Function Compute instance's own default);
``s3://bucket/prefix?endpoint=...`` the shared OSS store for Function Compute.
Backends are imported only when chosen, so boto3 stays off the cold-start path of sqlite users.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Mapping

from .base import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_TTL_SECONDS,
    ClaimResult,
    ClaimStatus,
    Continuation,
    IdempotencyKey,
    IdempotencyRecord,
    RecordState,
    Store,
    StoreConflict,
    StoreError,
    new_continuation_id,
)
from .url import SETTING, MemorySettings, SqliteSettings, StoreConfigError, default_url, parse_store_url

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_TTL_SECONDS",
    "SETTING",
    "ClaimResult",
    "ClaimStatus",
    "Continuation",
    "IdempotencyKey",
    "IdempotencyRecord",
    "RecordState",
    "Store",
    "StoreConfigError",
    "StoreConflict",
    "StoreError",
    "new_continuation_id",
    "open_store",
]


def open_store(
    url: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
) -> Store:
    """Open the store named by `url`, else by CRHELPER_STORE, else the per-user SQLite file."""
    env = os.environ if env is None else env
    if url is None:
        url = env.get(SETTING) or default_url(env)
    settings = parse_store_url(url)
    if isinstance(settings, SqliteSettings):
        from .sqlite import SqliteStore

        return SqliteStore(settings.path, clock=clock)
    if isinstance(settings, MemorySettings):
        from .memory import MemoryStore

        return MemoryStore(clock=clock)
    from .s3 import S3Store
    from .s3_client import make_client

    return S3Store(make_client(settings, env), settings.bucket, settings.prefix, clock=clock)
