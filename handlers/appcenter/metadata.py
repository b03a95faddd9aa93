"""The metadata a node sees (spec §8), built once by the executor and exposed by the backends.

`self_tree` builds one node's `/self` tree (nested dicts, string leaves) from the cluster's nodes,
its env and the temporary keys of a scale (``adding-hosts``, ``deleting-hosts``,
``vertical-scaling-roles``). `lookup` answers a metad path against a tree, `environment` flattens
the parts a service script reads most (host, cluster, env) into variables, and `serve` is a small
metad-style HTTP endpoint answering ``GET /self/...`` from a node's JSON file, re-read on every
request so a published change is seen at once (``python -m handlers.appcenter.metadata serve``).
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Mapping, Sequence

#: The fields of one host under /self/hosts/<role>/<instance_id>/ (those we know locally).
HOST_FIELDS = ("ip", "node_id", "instance_id", "sid", "gid", "gsid", "role", "cpu", "memory", "volume_size",
               "instance_class")
ENV_FILE, ENV_URL = "METADATA_FILE", "METAD_URL"
#: A node's own folder, told to every command on every backend.
ENV_NODE_DIR = "APPCENTER_NODE_DIR"
ENV_PREFIX = "APPCENTER_"
METAD_PORT = 9611


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def host_entry(node: Mapping[str, Any]) -> dict[str, str]:
    """A node's fields as metad shows them (strings; absent sizes empty), with what its
    `custom_metadata` command printed (``node["custom"]``)."""
    entry = {name: _text(node.get(name)) for name in HOST_FIELDS}
    entry.update({str(key): _text(value) for key, value in (node.get("custom") or {}).items()})
    return entry


def hosts_tree(nodes: Sequence[Mapping[str, Any]], roles: bool = True) -> dict[str, Any]:
    """/hosts: by role, then instance id (a single role without a name sits directly under hosts)."""
    tree: dict[str, Any] = {}
    for node in nodes:
        entry = host_entry(node)
        if roles:
            tree.setdefault(str(node["role"]), {})[entry["instance_id"]] = entry
        else:
            tree[entry["instance_id"]] = entry
    return tree


def self_tree(node: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], cluster: Mapping[str, Any],
              env: Mapping[str, Any], *, adding: Sequence[Mapping[str, Any]] = (),
              deleting: Sequence[Mapping[str, Any]] = (), vertical_roles: Sequence[str] = (),
              role_env: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """One node's /self tree. `nodes` are every node of the cluster (dicts with HOST_FIELDS),
    `cluster` the /self/cluster keys, `env` the cluster's env, `role_env` each role's own env
    (the node's overlays the cluster's under /self/env)."""
    merged = {**{key: _text(value) for key, value in env.items()},
              **{key: _text(value) for key, value in (role_env or {}).get(str(node["role"]), {}).items()}}
    tree: dict[str, Any] = {
        "hosts": hosts_tree(nodes),
        "host": host_entry(node),
        "cluster": json.loads(json.dumps(cluster, default=_text)),
        "env": merged,
    }
    if adding:
        tree["adding-hosts"] = hosts_tree(adding)
    if deleting:
        tree["deleting-hosts"] = hosts_tree(deleting)
    if vertical_roles:
        tree["vertical-scaling-roles"] = ",".join(vertical_roles)
    return tree


def lookup(tree: Mapping[str, Any], path: str) -> Any:
    """The subtree or leaf at a metad path (``/self/host/ip``; leading ``/self`` optional); KeyError."""
    parts = [part for part in path.split("/") if part]
    if parts and parts[0] == "self":
        parts = parts[1:]
    found: Any = tree
    for part in parts:
        if not isinstance(found, Mapping) or part not in found:
            raise KeyError(path)
        found = found[part]
    return found


_NOT_NAME = re.compile(r"[^A-Za-z0-9]+")


def _variable(*parts: str) -> str:
    return ENV_PREFIX + "_".join(_NOT_NAME.sub("_", part).strip("_").upper() for part in parts)


def environment(tree: Mapping[str, Any]) -> dict[str, str]:
    """The tree's host, cluster and env leaves as variables: ``APPCENTER_HOST_IP``,
    ``APPCENTER_CLUSTER_CLUSTER_ID``, ``APPCENTER_ENV_<KEY>`` (a key's other characters become ``_``)."""
    out: dict[str, str] = {}
    for section in ("host", "cluster", "env"):
        for key, value in (tree.get(section) or {}).items():
            if not isinstance(value, Mapping):
                out[_variable(section, key)] = str(value)
    return out


def write_tree(path: Path, tree: Mapping[str, Any]) -> None:
    """Replace the node's metadata file at once (a reader never sees half a tree)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(tree, ensure_ascii=False, sort_keys=True, indent=1))
    partial.replace(path)


# --- the metad-style endpoint ---------------------------------------------------------------------

def _handler_for(file: Path) -> type[BaseHTTPRequestHandler]:
    class Metad(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            return

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = self.path.split("?", 1)[0]
            try:
                tree = json.loads(file.read_text())
                found = lookup(tree, path) if path.startswith("/self") or path == "/" else None
                if found is None:
                    raise KeyError(path)
            except (KeyError, OSError, ValueError):
                self._answer(404, "text/plain", f"no metadata at {path}\n")
                return
            if isinstance(found, Mapping):
                self._answer(200, "application/json", json.dumps(found, ensure_ascii=False, sort_keys=True))
            else:
                self._answer(200, "text/plain", str(found))

        def _answer(self, status: int, kind: str, text: str) -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Metad


def serve(file: Path, host: str, port: int) -> None:
    """Answer GET /self/... from `file` on host:port until killed."""
    from crhelper.servers import LocalHTTPServer

    server = LocalHTTPServer((host, port), _handler_for(file))
    server.serve_forever(poll_interval=0.2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m handlers.appcenter.metadata")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="a metad-style endpoint for one node")
    run.add_argument("--file", required=True, type=Path)
    run.add_argument("--host", required=True)
    run.add_argument("--port", type=int, default=METAD_PORT)
    args = parser.parse_args(argv)
    serve(args.file, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
