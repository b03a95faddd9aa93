"""The mission's application tier: the JSON API under `/api/`, keeping its data in the database
tier (`DB_URL`, the db instance's address) over HTTP.

`GET /api/` records the visit and answers the visit count, with what the database said about
itself; `GET /api/notes` lists notes, `POST /api/notes {"text": "..."}` adds one."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from tier import TierHandler, instance, serve

DB_URL = os.environ.get("DB_URL", "http://127.0.0.1:15432")
SCHEMA = ("CREATE TABLE IF NOT EXISTS visits (id INTEGER PRIMARY KEY, path TEXT, at TEXT DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))",
          "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")


def db(sql: str, *params: Any) -> dict[str, Any]:
    """One statement on the database tier."""
    body = json.dumps({"sql": sql, "params": list(params)}).encode()
    request = urllib.request.Request(DB_URL + "/query", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.loads(answer.read())


def db_health() -> dict[str, Any]:
    with urllib.request.urlopen(DB_URL + "/health", timeout=5) as answer:
        return json.loads(answer.read())


class Application(TierHandler):
    tier = "app"

    def answer(self, work: Any) -> None:
        try:
            self.reply_json(200, work())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.reply_json(502, {"tier": self.tier, "error": f"database tier at {DB_URL}: {exc}"})

    def do_GET(self) -> None:
        if self.path in ("/api", "/api/"):
            def visit() -> dict[str, Any]:
                db("INSERT INTO visits (path) VALUES (?)", self.path)
                count = db("SELECT count(*) FROM visits")["rows"][0][0]
                health = db_health()
                return {"tier": self.tier, "instance": instance()[0], "visits": count,
                        "database": {"url": DB_URL, "instance": health["instance"], "sqlite": health["sqlite"]}}
            return self.answer(visit)
        if self.path == "/api/notes":
            return self.answer(lambda: {"notes": [row[0] for row in db("SELECT text FROM notes ORDER BY id")["rows"]]})
        self.reply_json(404, {"tier": self.tier, "error": "GET /api/, GET or POST /api/notes"})

    def do_POST(self) -> None:
        if self.path != "/api/notes":
            return self.reply_json(404, {"tier": self.tier, "error": "POST /api/notes"})
        text = self.read_json().get("text")
        if not isinstance(text, str) or not text:
            return self.reply_json(400, {"tier": self.tier, "error": "body must be {'text': non-empty string}"})
        self.answer(lambda: {"id": db("INSERT INTO notes (text) VALUES (?)", text)["last_row_id"]})


if __name__ == "__main__":
    for statement in SCHEMA:  # the database tier listens: the boot group started this tier after it
        db(statement)
    serve(Application)
