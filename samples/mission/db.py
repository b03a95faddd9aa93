"""The mission's database tier: a real SQLite database behind a tiny HTTP server.

`POST /query {"sql": "...", "params": [...]}` runs one statement and answers `{"columns", "rows",
"changes", "last_row_id"}`; `GET /health` answers the SQLite version and the file. The file is
`$MISSION_DB`, else `$CRHELPER_HOME/mission/<instance id>.sqlite`: it outlives the instance, as a
database's disk does. It listens on the instance's address only (loopback)."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

from tier import TierHandler, instance, serve


def database_path() -> Path:
    if os.environ.get("MISSION_DB"):
        return Path(os.environ["MISSION_DB"])
    home = Path(os.environ.get("CRHELPER_HOME") or Path.home() / ".crhelper")
    return home / "mission" / f"{instance()[0]}.sqlite"


DATABASE = database_path()


def connect() -> sqlite3.Connection:
    connection = sqlite3.connect(DATABASE, timeout=5, isolation_level=None)  # autocommit: one statement a request
    connection.execute("PRAGMA journal_mode=WAL")
    return connection


class Database(TierHandler):
    tier = "db"

    def do_GET(self) -> None:
        if self.path != "/health":
            return self.reply_json(404, {"error": "GET /health or POST /query"})
        self.reply_json(200, {"tier": self.tier, "instance": instance()[0], "sqlite": sqlite3.sqlite_version,
                              "file": str(DATABASE)})

    def do_POST(self) -> None:
        if self.path != "/query":
            return self.reply_json(404, {"error": "POST /query"})
        try:
            request = self.read_json()
            sql, params = request["sql"], request.get("params", [])
            if not isinstance(sql, str) or not isinstance(params, list):
                raise ValueError("sql must be a string and params a list")
        except (ValueError, KeyError, TypeError) as exc:
            return self.reply_json(400, {"error": f"body must be {{'sql': str, 'params': list}}: {exc}"})
        with closing(connect()) as connection:
            try:
                cursor = connection.execute(sql, params)
                rows = cursor.fetchall()
            except sqlite3.Error as exc:
                return self.reply_json(400, {"error": f"{type(exc).__name__}: {exc}"})
            columns = [d[0] for d in cursor.description or ()]
            self.reply_json(200, {"columns": columns, "rows": rows, "changes": connection.total_changes,
                                  "last_row_id": cursor.lastrowid})


if __name__ == "__main__":
    DATABASE.parent.mkdir(parents=True, exist_ok=True)
    serve(Database)
