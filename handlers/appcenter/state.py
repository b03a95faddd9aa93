"""The AppCluster provider's own state, which never expires (unlike the idempotency records): each
cluster as deployed (package, values, the rendered cluster, its nodes) and its lifecycle run in
progress, checkpointed after every step, so a worker killed mid-lifecycle is resumed by the next
step from where it was (no service command run twice).

`SqliteClusterStore` keeps it in `$CRHELPER_HOME/appcenter/state.sqlite` (WAL, a busy timeout, one
`BEGIN IMMEDIATE` per write, so the CLI, FC workers and tests of one home share it; a removed
cluster leaves a tombstone row);
`store_for.open_cluster_store` reads `CRHELPER_APPCENTER_STORE`.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ContextManager, Iterator, Mapping, Protocol

from crhelper.paths import state_dir
from crhelper.sqlite_files import immediate, opened, use_wal

STATE_DIR = "appcenter"
STORE_ENV = "CRHELPER_APPCENTER_STORE"
DB_NAME = "state.sqlite"
BUSY_SECONDS = 30.0
#: Lifecycle entries kept per cluster (the newest).
MAX_JOURNAL = 500

CREATING, ACTIVE, DELETING = "Creating", "Active", "Deleting"

SCHEMA = """
CREATE TABLE IF NOT EXISTS clusters (
    cluster_id TEXT PRIMARY KEY,
    doc TEXT NOT NULL,
    updated REAL NOT NULL,
    removed INTEGER NOT NULL DEFAULT 0
);
"""


@dataclasses.dataclass
class ClusterRecord:
    """One deployed cluster. `nodes` are dicts (node_id, role, sid, gid, gsid, instance_id, ip,
    cpu, memory, volume_size, instance_class) in role order; `run` is the lifecycle in progress or
    the last one (`executor.Run` as JSON); `journal` what ran, newest last. `inputs` are the
    resource's Inputs as given, secrets masked; `values` every item's value as deployed (what
    the nodes get, secrets included)."""

    cluster_id: str
    stack_id: str = ""
    logical_id: str = ""
    request_id: str = ""
    backend: str = "local"
    package: str = ""
    template_dir: str = ""
    version: str = ""
    language: str | None = None
    zone: str | None = None
    resource_group: str | None = None
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    rendered: Any = None
    nodes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    desired_state: str = "Running"
    run_token: str | None = None
    force: bool = False
    status: str = CREATING
    adding: list[str] = dataclasses.field(default_factory=list)
    deleting: list[str] = dataclasses.field(default_factory=list)
    vertical_roles: list[str] = dataclasses.field(default_factory=list)
    custom_metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: An upgrade made while Stopped: its ``upgrade`` services run with the next start.
    pending_upgrade: bool = False
    #: The paths of the package's secret items (``password``, ``accesskey``): masked in `inputs`,
    #: scrubbed from command output kept here and from FAILED Reasons.
    secret_paths: list[str] = dataclasses.field(default_factory=list)
    run: dict[str, Any] | None = None
    journal: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    created: float = dataclasses.field(default_factory=time.time)
    updated: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The fields as they are (JSON values already; `dataclasses.asdict` would deep-copy the
        rendered cluster and the run at every checkpoint)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "ClusterRecord":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in doc.items() if key in known})

    def node(self, node_id: str) -> dict[str, Any] | None:
        return next((node for node in self.nodes if node["node_id"] == node_id), None)

    def topology(self) -> dict[str, tuple[str, ...]]:
        """Role -> node ids, in sid order (the plans' topology)."""
        found: dict[str, list[str]] = {}
        for node in sorted(self.nodes, key=lambda n: (n["role"], int(n["sid"]))):
            found.setdefault(str(node["role"]), []).append(str(node["node_id"]))
        return {role: tuple(members) for role, members in found.items()}


def default_path(env: Mapping[str, str] | None = None) -> Path:
    return state_dir(STATE_DIR, env, create=True) / DB_NAME


class SqliteClusterStore:
    """Clusters in one SQLite file; a connection per call, so any thread or process may use it."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._read() as conn:
            use_wal(conn)
            conn.executescript(SCHEMA)

    def _read(self) -> ContextManager[sqlite3.Connection]:
        return opened(self.path, busy_seconds=BUSY_SECONDS)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._read() as conn, immediate(conn):
            yield conn

    def get(self, cluster_id: str) -> ClusterRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT doc FROM clusters WHERE cluster_id = ? AND removed = 0", (cluster_id,)).fetchone()
        return ClusterRecord.from_json(json.loads(row[0])) if row else None

    def save(self, record: ClusterRecord) -> None:
        record.updated = time.time()
        del record.journal[:-MAX_JOURNAL]
        with self._tx() as conn:
            conn.execute("INSERT INTO clusters (cluster_id, doc, updated) VALUES (?, ?, ?) ON CONFLICT (cluster_id) "
                         "DO UPDATE SET doc = excluded.doc, updated = excluded.updated WHERE removed = 0",
                         (record.cluster_id, json.dumps(record.to_json(), ensure_ascii=False), record.updated))

    def remove(self, cluster_id: str) -> None:
        """Keep a tombstone: a late checkpoint of the operation that removed it cannot bring it back."""
        with self._tx() as conn:
            conn.execute("INSERT INTO clusters (cluster_id, doc, updated, removed) VALUES (?, '{}', ?, 1) "
                         "ON CONFLICT (cluster_id) DO UPDATE SET doc = '{}', updated = excluded.updated, removed = 1",
                         (cluster_id, time.time()))

    def list(self) -> list[ClusterRecord]:
        with self._read() as conn:
            rows = conn.execute("SELECT doc FROM clusters WHERE removed = 0 ORDER BY cluster_id").fetchall()
        return [ClusterRecord.from_json(json.loads(row[0])) for row in rows]


class ClusterStore(Protocol):
    """What the provider and the CLI need of a store (SQLite here, OSS in `state_s3`)."""

    path: Any

    def get(self, cluster_id: str) -> ClusterRecord | None: ...

    def save(self, record: ClusterRecord) -> None: ...

    def remove(self, cluster_id: str) -> None: ...

    def list(self) -> list[ClusterRecord]: ...
