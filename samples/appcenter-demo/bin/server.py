"""The demo's node server: answers GET / with what this node's metadata says now (read from the
metad endpoint on every request), so an env change or a scale shows at once. Standard library only."""

import json
import os
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def metad(path):
    with urllib.request.urlopen(os.environ["METAD_URL"] + path, timeout=2) as answer:
        body = answer.read().decode()
    return json.loads(body) if answer.headers.get_content_type() == "application/json" else body


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        return

    def do_GET(self):
        with open("requests.log", "a") as counted:  # the node's folder: what its monitor command counts
            counted.write(self.path + "\n")
        host = metad("/self/host")
        hosts = metad("/self/hosts")
        doc = {"role": host["role"], "sid": host["sid"], "ip": host["ip"], "greeting": metad("/self/env/greeting"),
               "nodes": sum(len(members) for members in hosts.values())}
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    with open("server.pid", "w") as pid:  # the node's folder: what its health check looks at
        pid.write(str(os.getpid()))
    ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
