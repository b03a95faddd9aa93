"""The metadata a node sees (spec §8), built once by the executor and exposed by the backends.

`self_tree` builds one node's `/self` tree (nested dicts, string leaves) from the cluster's nodes,
its env and the temporary keys of a scale (``adding-hosts``, ``deleting-hosts``,
``vertical-scaling-roles``); given the typed cluster (`definition`) it also lays the hosts out as
the package does (a package whose only node omits ``role`` has its hosts directly under
``/hosts/<instance_id>/``, where real confd templates read ``/hosts/*/ip``) and adds what the
definition says: reserved IPs (the cluster's under ``/cluster/endpoints/reserved_ips``, a role's
under each host), ``cluster_tag`` (``need_tag``), ``/links/<name>``, the role's gpu and volume
class, ``resource_limits`` (the classes §2.5 lists) and an empty ``api_server`` (no QingCloud API
answers here: a backend with one fills it through the cluster keys). `lookup` answers a metad path against a tree, `environment` flattens the parts a service
script reads most (host, cluster, env) into variables, and `serve` is a small metad-style HTTP
endpoint answering ``GET /self/...`` (and ``/<cluster_id>/...``, the same tree) from a node's JSON
file and the command it runs now (`CMD_FILE`, as ``/self/cmd``), both re-read on every request so a
published change is seen at once (``python -m
handlers.appcenter.metadata serve``): like metad, a directory is JSON for ``Accept:
application/json`` and ``path<TAB>value`` lines for ``Accept: text/plain``; a leaf is its text.
Standard library only (each node's endpoint process imports this module).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from crhelper.paths import write_atomically

if TYPE_CHECKING:
    from .cluster import Cluster

#: The fields of one host under /self/hosts/[<role>/]<instance_id>/ (spec §8; ``reserved_ips`` is a
#: folder, added where the role reserves any). What a backend knows that the executor does not
#: (`PLATFORM_FIELDS`) is filled by the backend; the rest stays empty where there is nothing
#: (``eip``: no public IP bound; ``pub_key``: no ``passphraseless``).
HOST_FIELDS = ("ip", "eip", "mac", "sid", "gid", "gsid", "node_id", "instance_id", "cpu", "gpu", "memory",
               "volume_size", "instance_class", "gpu_class", "volume_class", "physical_machine", "role", "pub_key",
               "token")
PLATFORM_FIELDS = ("mac", "physical_machine")
ENV_FILE, ENV_URL = "METADATA_FILE", "METAD_URL"
#: A node's own folder, told to every command on every backend.
ENV_NODE_DIR = "APPCENTER_NODE_DIR"
ENV_PREFIX = "APPCENTER_"
METAD_PORT = 9611
#: Next to a node's metadata file: the command it runs now (id, cmd, timeout), which its endpoint
#: answers under /self/cmd (not in the file, which the command itself reads).
CMD_FILE = "cmd.json"
#: The host sections of a tree (each laid out like /hosts).
HOST_SECTIONS = ("hosts", "adding-hosts", "deleting-hosts")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def reserved_ip(cluster_id: str, name: str, node_id: str = "") -> str:
    """The address reserved for `name` (the platform fills a package's empty ``value``): locally a
    loopback address of its own, stable for the cluster (and node), which routes like any 127/8."""
    raw = hashlib.sha256("\0".join(("reserved", cluster_id, node_id, name)).encode()).digest()
    return f"127.{1 + raw[0] % 254}.{raw[1]}.{1 + raw[2] % 254}"


def _reserved(section: Mapping[str, Any] | None, cluster_id: str, node_id: str = "") -> dict[str, dict[str, str]]:
    found = {}
    for name, entry in (section or {}).items():
        value = getattr(entry, "value", None) if not isinstance(entry, Mapping) else entry.get("value")
        found[str(name)] = {"value": str(value) if value else reserved_ip(cluster_id, str(name), node_id)}
    return found


def host_entry(node: Mapping[str, Any]) -> dict[str, Any]:
    """A node's fields as metad shows them (strings; absent sizes empty), with what its
    `custom_metadata` command printed (``node["custom"]``: its ``token`` among them) and its
    ``reserved_ips`` (``node["reserved_ips"]``: name -> address)."""
    entry: dict[str, Any] = {name: _text(node.get(name)) for name in HOST_FIELDS}
    entry.update({str(key): _text(value) for key, value in (node.get("custom") or {}).items()})
    reserved = node.get("reserved_ips")
    if reserved:
        entry["reserved_ips"] = {str(name): {"value": _text(address)} for name, address in reserved.items()}
    return entry


def hosts_tree(nodes: Sequence[Mapping[str, Any]], roles: bool = True) -> dict[str, Any]:
    """/hosts: by role, then instance id; with `roles` False (a package whose one node omits
    ``role``) by instance id directly under hosts."""
    tree: dict[str, Any] = {}
    for node in nodes:
        entry = host_entry(node)
        if roles:
            tree.setdefault(str(node["role"]), {})[entry["instance_id"]] = entry
        else:
            tree[entry["instance_id"]] = entry
    return tree


def _with_definition(node: Mapping[str, Any], definition: "Cluster", cluster_id: str) -> dict[str, Any]:
    """A host with what its role's definition adds: gpu, gpu_class, volume_class, reserved_ips."""
    role = str(node.get("role") or "")
    base = role[: -len("-replica")] if role.endswith("-replica") else role
    known = definition.roles.get(base)
    if known is None:
        return dict(node)
    extra: dict[str, Any] = {"gpu": known.gpu, "gpu_class": known.gpu_class,
                             "volume_class": known.volume.volume_class if known.volume is not None else None}
    if known.reserved_ips:
        extra["reserved_ips"] = {name: address["value"] for name, address in
                                 _reserved(known.reserved_ips, cluster_id, str(node.get("node_id", ""))).items()}
    return {**node, **{key: value for key, value in extra.items() if value is not None and node.get(key) is None}}


def _cluster_section(cluster: Mapping[str, Any], definition: "Cluster | None") -> dict[str, Any]:
    section: dict[str, Any] = json.loads(json.dumps(cluster, default=_text))
    if definition is None:
        return section
    cluster_id = str(section.get("cluster_id", ""))
    section.setdefault("cluster_tag", f"tag-{hashlib.sha256(cluster_id.encode()).hexdigest()[:8]}"
                       if definition.need_tag else "")
    if definition.reserved_ips:
        endpoints = section.setdefault("endpoints", {})
        endpoints["reserved_ips"] = _reserved(definition.reserved_ips, cluster_id)
    from .values import ROLE_VALUE_SETS  # the executor's process has it loaded; an endpoint never comes here

    section.setdefault("resource_limits", {
        "valid_volume_classes": ",".join(map(str, ROLE_VALUE_SETS["volume_class"])),
        "valid_instance_classes": ",".join(map(str, ROLE_VALUE_SETS["instance_class"]))})
    section.setdefault("api_server", {"host": "", "port": "", "protocol": ""})  # no QingCloud API here
    return section


def self_tree(node: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], cluster: Mapping[str, Any],
              env: Mapping[str, Any], *, adding: Sequence[Mapping[str, Any]] = (),
              deleting: Sequence[Mapping[str, Any]] = (), vertical_roles: Sequence[str] = (),
              role_env: Mapping[str, Mapping[str, Any]] | None = None,
              definition: "Cluster | None" = None) -> dict[str, Any]:
    """One node's /self tree. `nodes` are every node of the cluster (dicts with HOST_FIELDS),
    `cluster` the /self/cluster keys, `env` the cluster's env, `role_env` each role's own env
    (the node's overlays the cluster's under /self/env), `definition` the typed cluster (the
    hosts' layout and what the package adds; see the module doc)."""
    merged = {**{key: _text(value) for key, value in env.items()},
              **{key: _text(value) for key, value in (role_env or {}).get(str(node["role"]), {}).items()}}
    roles = definition.hosts_by_role if definition is not None else True
    if definition is not None:
        cluster_id = str(cluster.get("cluster_id", ""))
        node, nodes, adding, deleting = (
            _with_definition(node, definition, cluster_id),
            *([_with_definition(each, definition, cluster_id) for each in group] for group in (nodes, adding, deleting)))
    tree: dict[str, Any] = {
        "hosts": hosts_tree(nodes, roles),
        "host": host_entry(node),
        "cluster": _cluster_section(cluster, definition),
        "env": merged,
    }
    if definition is not None and definition.links:
        tree["links"] = {str(name): _text(value) for name, value in definition.links.items()}
    if adding:
        tree["adding-hosts"] = hosts_tree(adding, roles)
    if deleting:
        tree["deleting-hosts"] = hosts_tree(deleting, roles)
    if vertical_roles:
        tree["vertical-scaling-roles"] = ",".join(vertical_roles)
    return tree


def _host_entries(tree: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every host entry of a tree (/host and those of the host sections, with or without roles)."""
    if isinstance(tree.get("host"), dict):
        yield tree["host"]
    for section in HOST_SECTIONS:
        for key, value in (tree.get(section) or {}).items():
            if not isinstance(value, dict):
                continue
            if "instance_id" in value and not isinstance(value.get("instance_id"), dict):
                yield value
            else:
                yield from (entry for entry in value.values() if isinstance(entry, dict))


def with_platform_fields(tree: Mapping[str, Any], machines: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """A copy of `tree` whose hosts have the `PLATFORM_FIELDS` a backend knows of its instances
    (`machines`: instance id -> field -> value), where the executor left them empty."""
    copy: dict[str, Any] = json.loads(json.dumps(tree))
    for entry in _host_entries(copy):
        known = machines.get(str(entry.get("instance_id", "")))
        for name, value in (known or {}).items():
            if name in PLATFORM_FIELDS and not entry.get(name):
                entry[name] = value
    return copy


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


def flatten(subtree: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """A directory as metad's text form lists it: (``/path/below``, value) for every leaf, sorted."""
    found: list[tuple[str, str]] = []
    for key, value in subtree.items():
        path = f"{prefix}/{key}"
        if isinstance(value, Mapping):
            found += flatten(value, path)
        else:
            found.append((path, _text(value)))
    return sorted(found)


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
    """Replace the node's metadata file at once (a reader never sees half a tree), owner-only:
    it holds the cluster's secrets."""
    write_atomically(path, json.dumps(tree, ensure_ascii=False, sort_keys=True, indent=1).encode("utf-8"))


# --- the metad-style endpoint ---------------------------------------------------------------------

def _wants(accept: str) -> str:
    """"json", "text" or "" (no preference: a directory is JSON, a leaf text) from an Accept header."""
    kinds = [part.split(";", 1)[0].strip().lower() for part in accept.split(",") if part.strip()]
    for kind in kinds:
        if "json" in kind:
            return "json"
        if kind == "text/plain":
            return "text"
    return ""


def answer_for(tree: Mapping[str, Any], path: str, accept: str = "") -> tuple[int, str, str]:
    """(status, content type, body) of a metad GET of `path` on a node whose tree is `tree`:
    ``/self/...`` and ``/<its cluster_id>/...`` (the same tree: a node sees no other cluster)."""
    parts = [part for part in path.split("/") if part]
    cluster_id = str((tree.get("cluster") or {}).get("cluster_id", "")) if isinstance(tree.get("cluster"), Mapping) else ""
    wants = _wants(accept)
    try:
        if parts and parts[0] not in ("self",) and not (cluster_id and parts[0] == cluster_id):
            raise KeyError(path)
        found = lookup(tree, "/".join(parts[1:]))
    except KeyError:
        if wants == "json":
            return 404, "application/json", json.dumps({"code": 404, "message": "Not found", "type": "ERROR"})
        return 404, "text/plain", "Not found\n"
    if wants == "json" or (isinstance(found, Mapping) and wants == ""):
        return 200, "application/json", json.dumps(found, ensure_ascii=False, sort_keys=True)
    if isinstance(found, Mapping):
        return 200, "text/plain", "".join(f"{key}\t{value}\n" for key, value in flatten(found))
    return 200, "text/plain", _text(found)


def _handler_for(file: Path) -> type[BaseHTTPRequestHandler]:
    class Metad(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            return

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = self.path.split("?", 1)[0]
            try:
                tree = json.loads(file.read_text())
            except (OSError, ValueError):
                tree = {}
            try:
                cmd = json.loads(file.with_name(CMD_FILE).read_text())
            except (OSError, ValueError):
                cmd = None
            if isinstance(tree, dict) and tree and isinstance(cmd, dict):
                tree["cmd"] = cmd
            if not path.startswith("/") or not isinstance(tree, Mapping) or not tree:
                self._answer(404, "text/plain", "Not found\n")
                return
            self._answer(*answer_for(tree, path if path != "/" else "/self", self.headers.get("Accept", "")))

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
