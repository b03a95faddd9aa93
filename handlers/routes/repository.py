"""SQLite storage of apps, routes, certificates and events under ``$CRHELPER_HOME/router``.

Every write runs in one ``BEGIN IMMEDIATE`` transaction: the live routes are read, the pure
validation runs, and the row is written before any other writer can interleave, which is what
Flynn gets from its Postgres triggers and unique indexes. A change counter lets the router notice
writes from other processes without a restart.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ContextManager, Iterator, Sequence

from crhelper.logs import get_logger
from crhelper.paths import state_dir
from crhelper.sqlite_files import immediate, opened, use_wal

from . import errors as E
from . import validation as V
from .model import HTTP, PARENT_REF_PREFIX, App, Certificate, Event, Route, now_rfc3339

log = get_logger("routes.repository")

UUID_RE = re.compile(r"^[a-f0-9]{8}-?([a-f0-9]{4}-?){3}[a-f0-9]{12}$")

SCHEMA = """
CREATE TABLE IF NOT EXISTS apps (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, meta TEXT NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, deleted_at TEXT);
CREATE TABLE IF NOT EXISTS certificates (
    id TEXT PRIMARY KEY, sha256 TEXT NOT NULL UNIQUE, cert TEXT NOT NULL, key TEXT NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS routes (
    id TEXT PRIMARY KEY, type TEXT NOT NULL, app_id TEXT NOT NULL, port INTEGER NOT NULL,
    body TEXT NOT NULL, cert_id TEXT, created_at TEXT NOT NULL, deleted_at TEXT);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, app TEXT NOT NULL, object_type TEXT NOT NULL,
    object_id TEXT NOT NULL, data TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (name, value) VALUES ('version', 0);
"""


#: Columns added after the first release; stores made before get them on open.
APP_COLUMNS = {"strategy": "TEXT NOT NULL DEFAULT ''", "deploy_timeout": "INTEGER NOT NULL DEFAULT 0"}


def _add_missing_columns(conn: sqlite3.Connection, table: str, columns: dict[str, str]) -> None:
    have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    for name, decl in columns.items():
        if name not in have:
            try:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
            except sqlite3.OperationalError as exc:  # another process added it first
                if "duplicate column" not in str(exc):
                    raise


#: The routing provider's folder under ``$CRHELPER_HOME``: routes.db, services.json, cookie.key.
STATE_DIR = "router"


def router_dir() -> Path:
    """``$CRHELPER_HOME/router`` (default ``~/.crhelper/router``); not created here."""
    return state_dir(STATE_DIR)


def default_db_path() -> Path:
    return router_dir() / "routes.db"


class RouteRepository:
    """The local backend's store; methods raise :class:`errors.FlynnError` like the controller."""

    def __init__(self, path: Path | str | None = None, *, default_domain: str | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.default_domain = default_domain
        with self._read() as conn:
            use_wal(conn)
            conn.executescript(SCHEMA)
            _add_missing_columns(conn, "apps", APP_COLUMNS)

    # --- plumbing ----------------------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._read() as conn, immediate(conn):
            yield conn
            conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'version'")

    def _read(self) -> ContextManager[sqlite3.Connection]:
        return opened(self.path, rows=True)

    def version(self) -> int:
        """Bumped by every committed write; the router polls it to reload."""
        with self._read() as conn:
            return int(conn.execute("SELECT value FROM counters WHERE name='version'").fetchone()[0])

    @staticmethod
    def _event(conn: sqlite3.Connection, app: str, object_type: str, object_id: str, data: dict[str, Any]) -> None:
        conn.execute(
            "INSERT INTO events (app, object_type, object_id, data, created_at) VALUES (?,?,?,?,?)",
            (app, object_type, object_id, json.dumps(data), now_rfc3339()),
        )

    # --- apps --------------------------------------------------------------------------------

    @staticmethod
    def _app_row(row: sqlite3.Row) -> App:
        return App(row["id"], row["name"], json.loads(row["meta"]), row["created_at"], row["updated_at"],
                   strategy=row["strategy"], deploy_timeout=row["deploy_timeout"])

    def _find_app(self, conn: sqlite3.Connection, ref: str) -> App:
        if UUID_RE.match(ref):
            row = conn.execute(
                "SELECT * FROM apps WHERE deleted_at IS NULL AND (id = ? OR name = ?)", (ref, ref)
            ).fetchone()
        else:
            row = conn.execute("SELECT * FROM apps WHERE deleted_at IS NULL AND name = ?", (ref,)).fetchone()
        if row is None:
            raise E.not_found(f"App: no app named or with id {ref}")
        return self._app_row(row)

    def get_app(self, ref: str) -> App:
        with self._read() as conn:
            return self._find_app(conn, ref)

    def list_apps(self) -> list[App]:
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM apps WHERE deleted_at IS NULL ORDER BY created_at DESC").fetchall()
        return [self._app_row(r) for r in rows]

    def create_app(self, name: str | None, meta: Any = None, *, app_id: str = "", strategy: str = "",
                   deploy_timeout: int = 0) -> App:
        """Create an app (generated name when empty; a client-chosen UUID kept) with Flynn's defaults,
        and its default route when configured."""
        name = name or f"app-{uuid.uuid4().hex[:12]}"
        V.validate_app_name(name)
        if strategy:
            V.validate_strategy(strategy)
        app = V.fill_app_defaults(App(V.app_id(app_id) if app_id else str(uuid.uuid4()), name, V.validate_meta(meta),
                                      strategy=strategy, deploy_timeout=deploy_timeout))
        with self._tx() as conn:
            existing = conn.execute("SELECT * FROM apps WHERE deleted_at IS NULL AND name = ?", (name,)).fetchall()
            V.check_app_unique(name, [self._app_row(r) for r in existing])
            if conn.execute("SELECT 1 FROM apps WHERE id = ?", (app.id,)).fetchone() is not None:
                raise E.FlynnError("object_exists", f'application id "{app.id}" already exists')
            app.created_at = app.updated_at = now_rfc3339()
            conn.execute(
                "INSERT INTO apps (id, name, meta, created_at, updated_at, strategy, deploy_timeout)"
                " VALUES (?,?,?,?,?,?,?)",
                (app.id, app.name, json.dumps(app.meta), app.created_at, app.updated_at, app.strategy,
                 app.deploy_timeout),
            )
            self._event(conn, app.id, "app", app.id, app.to_json())
            if self.default_domain:
                self._add_default_route(conn, app)
        return app

    def _add_default_route(self, conn: sqlite3.Connection, app: App) -> None:
        route = Route(type=HTTP, domain=f"{app.name}.{self.default_domain}", service=f"{app.name}-web",
                      drain_backends=True)
        conn.execute("SAVEPOINT default_route")
        try:
            self._insert_route(conn, app, route)
        except E.FlynnError as exc:
            conn.execute("ROLLBACK TO default_route")
            log.warning("default route for app %s not created: %s", app.name, exc.reason())
        conn.execute("RELEASE default_route")

    def update_app_meta(self, ref: str, meta: Any) -> App:
        """Flynn's app update: ``meta: null`` leaves meta unchanged."""
        return self.update_app(ref, {} if meta is None else {"meta": V.validate_meta(meta)})

    def update_app(self, ref: str, changes: dict[str, Any]) -> App:
        """Apply checked changes (:func:`validation.app_update`): meta, strategy, deploy_timeout."""
        with self._tx() as conn:
            app = self._find_app(conn, ref)
            app.meta = changes.get("meta", app.meta)
            app.strategy = changes.get("strategy", app.strategy)
            app.deploy_timeout = changes.get("deploy_timeout", app.deploy_timeout)
            app.updated_at = now_rfc3339()
            conn.execute("UPDATE apps SET meta = ?, strategy = ?, deploy_timeout = ?, updated_at = ? WHERE id = ?",
                         (json.dumps(app.meta), app.strategy, app.deploy_timeout, app.updated_at, app.id))
            self._event(conn, app.id, "app", app.id, app.to_json())
        return app

    def delete_app(self, ref: str) -> App:
        """Remove an app's routes (sub-paths before ``/``) and then the app, with their events.

        The ``/`` guard still holds for other apps' sub-paths on the same domain: the app stays."""
        with self._tx() as conn:
            app = self._find_app(conn, ref)
            routes = self._live_routes(conn, app_id=app.id)
            foreign = [r for r in self._live_routes(conn) if r.app_id != app.id]
            for route in routes:
                V.check_delete(route, foreign)
            for route in sorted(routes, key=lambda r: r.path == "/"):
                self._soft_delete(conn, route)
            conn.execute("UPDATE apps SET deleted_at = ? WHERE id = ?", (now_rfc3339(), app.id))
            self._event(conn, app.id, "app_deletion", app.id, {"app": app.to_json()})
        return app

    # --- routes ------------------------------------------------------------------------------

    def _row_route(self, conn: sqlite3.Connection, row: sqlite3.Row) -> Route:
        route = Route.from_json(json.loads(row["body"]))
        if row["cert_id"]:
            cert = conn.execute("SELECT * FROM certificates WHERE id = ?", (row["cert_id"],)).fetchone()
            route.certificate = Certificate(cert=cert["cert"], key=cert["key"], id=cert["id"],
                                            created_at=cert["created_at"], updated_at=cert["updated_at"])
        return route

    def _live_routes(self, conn: sqlite3.Connection, app_id: str | None = None) -> list[Route]:
        sql = "SELECT * FROM routes WHERE deleted_at IS NULL"
        args: tuple[Any, ...] = ()
        if app_id is not None:
            sql += " AND app_id = ?"
            args = (app_id,)
        rows = conn.execute(sql + " ORDER BY created_at DESC, rowid DESC", args).fetchall()
        return [self._row_route(conn, r) for r in rows]

    def _store_certificate(self, conn: sqlite3.Connection, cert: Certificate) -> Certificate:
        """Certificates are deduplicated by the SHA-256 of the trimmed PEM (same cert, same id)."""
        digest = hashlib.sha256(cert.cert.encode()).hexdigest()
        row = conn.execute("SELECT * FROM certificates WHERE sha256 = ?", (digest,)).fetchone()
        stamp = now_rfc3339()
        if row is None:
            cert_id = str(uuid.uuid4())
            conn.execute("INSERT INTO certificates VALUES (?,?,?,?,?,?)",
                         (cert_id, digest, cert.cert, cert.key, stamp, stamp))
            return Certificate(cert=cert.cert, key=cert.key, id=cert_id, created_at=stamp, updated_at=stamp)
        conn.execute("UPDATE certificates SET key = ?, updated_at = ? WHERE id = ?", (cert.key, stamp, row["id"]))
        return Certificate(cert=cert.cert, key=cert.key, id=row["id"], created_at=row["created_at"], updated_at=stamp)

    def _write_route(self, conn: sqlite3.Connection, route: Route, *, insert: bool) -> Route:
        cert_id = None
        if route.certificate is not None:
            route.certificate = self._store_certificate(conn, route.certificate)
            cert_id = route.certificate.id
        body = route.copy(certificate=None).to_json()
        if insert:
            conn.execute(
                "INSERT INTO routes (id, type, app_id, port, body, cert_id, created_at) VALUES (?,?,?,?,?,?,?)",
                (route.id, route.type, route.app_id, route.port, json.dumps(body), cert_id, route.created_at),
            )
        else:
            conn.execute("UPDATE routes SET port = ?, body = ?, cert_id = ? WHERE id = ?",
                         (route.port, json.dumps(body), cert_id, route.id))
        self._event(conn, route.app_id, "route", route.id, route.to_json(include_key=False))
        return route

    def _used_tcp_ports(self, conn: sqlite3.Connection) -> set[int]:
        return {int(r[0]) for r in conn.execute("SELECT port FROM routes WHERE type = 'tcp'")}

    def _insert_route(self, conn: sqlite3.Connection, app: App, route: Route) -> Route:
        route = route.copy(parent_ref=PARENT_REF_PREFIX + app.id)
        valid = V.validate_route(route, self._live_routes(conn), self._used_tcp_ports(conn))
        stamp = now_rfc3339()
        valid = valid.copy(id=str(uuid.uuid4()), created_at=stamp, updated_at=stamp)
        return self._write_route(conn, valid, insert=True)

    def create_route(self, app_ref: str, route: Route) -> Route:
        """Flynn's create pipeline (steps 3-11) inside one transaction."""
        with self._tx() as conn:
            return self._insert_route(conn, self._find_app(conn, app_ref), route)

    def _owned(self, conn: sqlite3.Connection, app: App, route_type: str, route_id: str) -> Route:
        row = conn.execute(
            "SELECT * FROM routes WHERE id = ? AND type = ? AND app_id = ? AND deleted_at IS NULL",
            (route_id, route_type, app.id),
        ).fetchone()
        if row is None:
            raise E.not_found(f"Route: no {route_type} route {route_id} in app {app.name}")
        return self._row_route(conn, row)

    def get_route(self, app_ref: str, route_type: str, route_id: str) -> Route:
        with self._read() as conn:
            return self._owned(conn, self._find_app(conn, app_ref), route_type, route_id)

    def list_routes(self, app_ref: str | None = None) -> list[Route]:
        """Live routes, newest first; every app's when ``app_ref`` is None."""
        with self._read() as conn:
            app_id = self._find_app(conn, app_ref).id if app_ref is not None else None
            return self._live_routes(conn, app_id)

    def update_route(self, app_ref: str, route_type: str, route_id: str, body: Route) -> Route:
        """Update with the create checks (spec §10); the domain and drain_backends cannot change."""
        with self._tx() as conn:
            app = self._find_app(conn, app_ref)
            stored = self._owned(conn, app, route_type, route_id)
            if stored.type == HTTP and not V.same_domain(body.domain, stored.domain):
                raise E.not_found("Domain: the domain of an HTTP route cannot change")
            merged = V.merge_update(stored, body)
            others = [r for r in self._live_routes(conn) if r.id != stored.id]
            used = self._used_tcp_ports(conn) - {stored.port}
            valid = V.validate_route(merged, others, used)
            valid = valid.copy(updated_at=now_rfc3339())
            return self._write_route(conn, valid, insert=False)

    def _soft_delete(self, conn: sqlite3.Connection, route: Route) -> None:
        conn.execute("UPDATE routes SET deleted_at = ? WHERE id = ?", (now_rfc3339(), route.id))
        self._event(conn, route.app_id, "route_deletion", route.id, route.to_json(include_key=False))

    def delete_route(self, app_ref: str, route_type: str, route_id: str) -> Route:
        with self._tx() as conn:
            app = self._find_app(conn, app_ref)
            route = self._owned(conn, app, route_type, route_id)
            V.check_delete(route, self._live_routes(conn))
            self._soft_delete(conn, route)
            return route

    # --- events ------------------------------------------------------------------------------

    def get_event(self, event_id: int) -> Event:
        """One event by id; a bare 404 when there is none."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM events WHERE id = ?", (event_id,)).fetchone()
        if row is None:
            raise E.not_found(f"Event: no event {event_id}")
        return self._event_row(row)

    @staticmethod
    def _event_row(r: sqlite3.Row) -> Event:
        return Event(r["id"], r["app"], r["object_type"], r["object_id"], json.loads(r["data"]), r["created_at"])

    def list_events(
        self,
        *,
        app_id: str | None = None,
        object_types: Sequence[str] = (),
        object_id: str | None = None,
        before_id: int | None = None,
        since_id: int | None = None,
        count: int | None = None,
        ascending: bool = False,
    ) -> list[Event]:
        """Flynn's ``/events`` filters; newest first unless ``ascending`` (stream replay)."""
        sql = "SELECT * FROM events WHERE 1=1"
        args: list[str | int] = []
        if app_id:
            sql += " AND app = ?"
            args.append(app_id)
        if object_types:
            sql += f" AND object_type IN ({','.join('?' * len(object_types))})"
            args.extend(object_types)
        if object_id:
            sql += " AND object_id = ?"
            args.append(object_id)
        if before_id is not None:
            sql += " AND id < ?"
            args.append(before_id)
        if since_id is not None:
            sql += " AND id > ?"
            args.append(since_id)
        sql += " ORDER BY id " + ("ASC" if ascending else "DESC")
        if count:
            sql += " LIMIT ?"
            args.append(count)
        with self._read() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [self._event_row(r) for r in rows]
