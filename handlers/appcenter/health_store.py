"""Where the `ecs` backend keeps each cluster's health checks, next to the cluster in the provider's
own store: the plan `watch` hands over (health.NodeChecks as JSON), whether it is watched, when each
node is next due, and what the checks saw (health.NodeHealth as JSON, the local agent's shape).

A deployed provider has no lasting disk and no agent between two time-trigger invocations, so this
document is the whole memory of the checks. It lives apart from the ClusterRecord on purpose: a
timer round writing health never races a lifecycle checkpoint of the same cluster.

* SQLite store: a `cluster_health` table in the same file (`BEGIN IMMEDIATE` read-modify-write).
* OSS store: a create-only object log `<prefix>appcenter/health/<id>/<seq>.json` (the cluster log's
  primitives, `crhelper.store.s3.S3Store`): an update is the create of the next number, retried on
  the new head when another writer won.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from crhelper.sqlite_files import immediate, opened, use_wal

from .state import BUSY_SECONDS, ClusterStore

HEALTH_ROOT = "appcenter/health"
SCHEMA = "CREATE TABLE IF NOT EXISTS cluster_health (cluster_id TEXT PRIMARY KEY, doc TEXT NOT NULL, updated REAL NOT NULL)"
MAX_RACE_ROUNDS = 50

#: Changes a health document in place (a fresh {} when there is none); returning False writes nothing.
Change = Callable[[dict[str, Any]], "bool | None"]


class HealthBook(Protocol):
    """Read and change one cluster's health document."""

    def get(self, cluster_id: str) -> dict[str, Any] | None: ...

    def update(self, cluster_id: str, change: Change) -> dict[str, Any]: ...


class SqliteHealthBook:
    """A table in the cluster store's SQLite file; a connection per call (any thread or process)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with opened(self.path, busy_seconds=BUSY_SECONDS) as conn:
            use_wal(conn)
            conn.execute(SCHEMA)

    def get(self, cluster_id: str) -> dict[str, Any] | None:
        with opened(self.path, busy_seconds=BUSY_SECONDS) as conn:
            row = conn.execute("SELECT doc FROM cluster_health WHERE cluster_id = ?", (cluster_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def update(self, cluster_id: str, change: Change) -> dict[str, Any]:
        with opened(self.path, busy_seconds=BUSY_SECONDS) as conn, immediate(conn):
            row = conn.execute("SELECT doc FROM cluster_health WHERE cluster_id = ?", (cluster_id,)).fetchone()
            doc: dict[str, Any] = json.loads(row[0]) if row else {}
            if change(doc) is False:
                return doc
            conn.execute("INSERT INTO cluster_health (cluster_id, doc, updated) VALUES (?, ?, ?) ON CONFLICT "
                         "(cluster_id) DO UPDATE SET doc = excluded.doc, updated = excluded.updated",
                         (cluster_id, json.dumps(doc, ensure_ascii=False, sort_keys=True), time.time()))
        return doc


class S3HealthBook:
    """An object log per cluster beside the clusters' logs (the same bucket and prefix)."""

    def __init__(self, objects: Any) -> None:
        self.objects = objects

    def _dir(self, cluster_id: str) -> str:
        return str(self.objects.log_dir(HEALTH_ROOT, cluster_id))

    def get(self, cluster_id: str) -> dict[str, Any] | None:
        doc = self.objects.head(self._dir(cluster_id)).doc
        if not isinstance(doc, dict) or not isinstance(doc.get("health"), dict):
            return None
        return dict(doc["health"])

    def update(self, cluster_id: str, change: Change) -> dict[str, Any]:
        from crhelper.store.base import StoreError

        for _ in range(MAX_RACE_ROUNDS):
            head = self.objects.head(self._dir(cluster_id))
            doc: dict[str, Any] = dict((head.doc or {}).get("health") or {})
            if change(doc) is False:
                return doc
            if self.objects.advance_log(self._dir(cluster_id), head.seq + 1, {"health": doc}):
                return doc
        raise StoreError(f"the health of cluster {cluster_id} kept changing while it was written")


def health_book(store: ClusterStore) -> HealthBook:
    """The book beside `store` (a SqliteClusterStore's file, an S3ClusterStore's bucket prefix)."""
    objects = getattr(store, "objects", None)
    if objects is not None:
        return S3HealthBook(objects)
    return SqliteHealthBook(store.path)


def open_health_book(env: Mapping[str, str] | None = None) -> HealthBook:
    """The book beside the cluster store `CRHELPER_APPCENTER_STORE` names (default: the SQLite file
    under the home)."""
    import os

    from .state import STORE_ENV
    from .store_for import open_cluster_store

    env = os.environ if env is None else env
    return health_book(open_cluster_store(env.get(STORE_ENV) or None, env))


def status_of(doc: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The health as the local agent's health.json has it ({"updated", "nodes"}), None before the
    first round."""
    if not doc or not doc.get("nodes"):
        return None
    return {"updated": doc.get("updated"), "nodes": dict(doc["nodes"])}
