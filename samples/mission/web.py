"""The mission's web tier: the page at `/` (every other path not under `/api/` too). Its script
asks `/api/`, which the router sends to the application tier."""

from __future__ import annotations

import html

from tier import TierHandler, instance, serve

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>mission</title></head>
<body>
<h1>mission: served by the web tier ({instance})</h1>
<p id="api">asking /api/ ...</p>
<script>
fetch("/api/").then(r => r.json()).then(d => {{
  document.getElementById("api").textContent = "visit " + d.visits + ", answered by the app tier " + d.instance +
    " from SQLite " + d.database.sqlite + " on the db tier " + d.database.instance;
}});
</script>
</body></html>
"""


class Web(TierHandler):
    tier = "web"

    def do_GET(self) -> None:
        self.reply(200, PAGE.format(instance=html.escape(instance()[0])).encode(), "text/html; charset=utf-8")


if __name__ == "__main__":
    serve(Web)
