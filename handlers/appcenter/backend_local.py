"""The `local` node backend: each node is a working directory and a process environment on this
host, its service commands real subprocesses under the per-home supervisor daemon (so a command
outlives the worker that started it, and a restarted executor polls the same run).

A node's files live in `$CRHELPER_HOME/appcenter/clusters/<cluster>/nodes/<node>/`: `node.json`
(its spec, instance id, loopback address and power state), `metadata.json` (its `/self` tree), and
`logs/` (one log per command). Each node has its own loopback address (127.x.y.z, from a hash),
where a metad-style endpoint answers `GET /self/...` (`metadata.serve`, a supervised process of
the node); commands also get the tree as `METADATA_FILE` and as `APPCENTER_*` variables. The
backend adds to each published tree what only it knows of its instances (MAC address, machine)
and keeps the command a node runs (`cmd.json`, answered as `/self/cmd`). Each operation on several
nodes is one supervisor request (`start_many`, `stop_many`): the metad endpoints of a new cluster,
a command on every node of a step, the processes of finished commands forgotten together.

A service that must keep running after its command returns (a `start` launching a server) runs it
through `$APPCTL start NAME -- argv...` (this module's `main`), the node's equivalent of systemctl:
it becomes a supervised process of the node, stopped by `$APPCTL stop NAME` or when the node is
stopped or released. A command past its timeout is stopped when a poll sees it overdue.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from crhelper.local.processes import python_env
from crhelper.local.supervisor import (
    LIVE, NOT_FOUND, ProcessSpec, ProcessStatus, SupervisorClient, SupervisorError, port_open, tail_lines, wait_port,
)
from crhelper.local.supervisor import RUNNING as PROCESS_RUNNING
from crhelper.paths import home as crhelper_home, state_dir, write_atomically

from . import health, metadata
from .backends import MISSING, RUNNING, STOPPED, BackendError, CommandResult, NodeInfo, NodeSpec

STATE_DIR = "appcenter"
#: What a node's command is told about where it runs (besides the metadata variables).
ENV_NODE_DIR, ENV_OWNER, ENV_PREFIX, ENV_APPCTL, ENV_PACKAGE = (
    metadata.ENV_NODE_DIR, "APPCENTER_NODE_OWNER", "APPCENTER_SERVICE_PREFIX", "APPCTL", "APPCENTER_PACKAGE_DIR")
#: The placement key naming the folder a node "boots" (the package's folder: its scripts are the image).
PACKAGE_DIR = "package_dir"
#: The placement key with the supervisor owner label of the cluster's processes.
OWNER = "owner"
OUTPUT_LINES, OUTPUT_BYTES = 40, 4096
#: Seconds a command waits at most for its node's metad endpoint to listen (a Python interpreter's boot).
METAD_WAIT = 10.0
_SUPERVISOR_LINE = "--- crhelper supervisor:"


def _digest(*parts: str, size: int = 16) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:size]


def node_address(home: str, cluster_id: str, node_id: str) -> str:
    """A loopback address of the node's own (127.1-254.0-255.1-254), stable for the node."""
    raw = bytes.fromhex(_digest(home, cluster_id, node_id, size=8))
    return f"127.{1 + raw[0] % 254}.{raw[1]}.{1 + raw[2] % 254}"


def node_mac(home: str, cluster_id: str, node_id: str) -> str:
    """A MAC address of the node's own, stable for the node: locally administered, unicast (02:...)."""
    raw = bytes.fromhex(_digest(home, cluster_id, node_id, "mac", size=10))
    return ":".join(f"{byte:02x}" for byte in (0x02, *raw))


def _text_number(value: Any) -> str:
    number = float(value)
    return str(int(number)) if number.is_integer() else f"{number:g}"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def _write_json(path: Path, doc: Any) -> None:
    """Owner-only: a node's files hold the cluster's secrets (password and access-key items)."""
    write_atomically(path, json.dumps(doc, ensure_ascii=False, sort_keys=True).encode("utf-8"))


#: How a node's command runs: its shell command, then its exit status written to a file, so a poll
#: sees it at once (the supervisor daemon sees the exit only at its next look, up to
#: CRHELPER_SUPERVISOR_POLL later).
_WRAPPER = 'sh -c "$1"; code=$?; echo "$code" > "$2.partial" && mv "$2.partial" "$2"; exit "$code"'


def _exit_code(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _output_of(log_path: str) -> str:
    try:
        text = tail_lines(log_path, OUTPUT_LINES)
    except FileNotFoundError:
        return ""
    kept = "\n".join(line for line in text.splitlines() if not line.startswith(_SUPERVISOR_LINE))
    return kept[-OUTPUT_BYTES:]


class LocalNodeBackend:
    """NodeBackend over working directories and supervised processes of one `$CRHELPER_HOME`."""

    name = "local"
    #: Seconds between looks at running commands within one handler call (a look is a few stat calls).
    check_interval = 0.05

    def __init__(self, root: Path, supervisor: SupervisorClient | None = None, *, home: str | None = None) -> None:
        self.root = root
        self.supervisor = supervisor or SupervisorClient()
        self.home = home or str(crhelper_home())
        #: (cluster, node) whose metad this process started or saw listening: a backend in another
        #: process (a resumed executor) checks each node's endpoint once before a command runs there.
        self._metads_up: set[tuple[str, str]] = set()

    @classmethod
    def from_env(cls, settings: Any = None, env: Mapping[str, str] | None = None) -> "LocalNodeBackend":
        env = os.environ if env is None else env
        return cls(state_dir(STATE_DIR, env, create=True) / "clusters", SupervisorClient(env=env),
                   home=str(crhelper_home(env)))

    def close(self) -> None:
        return None

    # --- files ------------------------------------------------------------------------------------
    def cluster_dir(self, cluster_id: str) -> Path:
        return self.root / cluster_id

    def node_dir(self, cluster_id: str, node_id: str) -> Path:
        return self.cluster_dir(cluster_id) / "nodes" / node_id

    def node_record(self, cluster_id: str, node_id: str) -> dict[str, Any] | None:
        """The node's node.json (None: no such node)."""
        found = _read_json(self.node_dir(cluster_id, node_id) / "node.json")
        return found if isinstance(found, dict) else None

    def _save_node(self, cluster_id: str, doc: Mapping[str, Any]) -> None:
        _write_json(self.node_dir(cluster_id, str(doc["node_id"])) / "node.json", doc)

    def _known(self, cluster_id: str, node_id: str) -> dict[str, Any]:
        doc = self.node_record(cluster_id, node_id)
        if doc is None:
            raise BackendError(f"node {node_id} of cluster {cluster_id} does not exist on the local backend")
        return doc

    @staticmethod
    def _info(doc: Mapping[str, Any]) -> NodeInfo:
        return NodeInfo(node_id=str(doc["node_id"]), instance_id=str(doc["instance_id"]), ip=str(doc["ip"]),
                        state=str(doc.get("state", RUNNING)))

    # --- nodes ------------------------------------------------------------------------------------
    def create_nodes(self, cluster_id: str, nodes: Sequence[NodeSpec]) -> dict[str, NodeInfo]:
        out: dict[str, NodeInfo] = {}
        running: list[Mapping[str, Any]] = []
        for spec in nodes:
            doc = self.node_record(cluster_id, spec.node_id)
            if doc is None:
                folder = self.node_dir(cluster_id, spec.node_id)
                (folder / "logs").mkdir(parents=True, exist_ok=True)
                doc = {"node_id": spec.node_id, "instance_id": "i-" + _digest(self.home, cluster_id, spec.node_id, size=8),
                       "ip": node_address(self.home, cluster_id, spec.node_id), "state": RUNNING,
                       "owner": f"{spec.placement.get(OWNER) or 'appcenter/' + cluster_id}/{spec.node_id}",
                       "spec": spec.to_json()}
                self._save_node(cluster_id, doc)
            if doc.get("state") == RUNNING:
                running.append(doc)
            out[spec.node_id] = self._info(doc)
        self._start_metads(cluster_id, running)
        return out

    def describe_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> dict[str, NodeInfo]:
        out = {}
        for node_id in node_ids:
            doc = self.node_record(cluster_id, node_id)
            out[node_id] = self._info(doc) if doc is not None else NodeInfo(node_id, "", "", MISSING)
        return out

    def _stop_processes(self, cluster_id: str, docs: Sequence[Mapping[str, Any]], forget: bool) -> None:
        """Every process of these nodes (their metad, commands and services), in one request."""
        self._metads_up.difference_update((cluster_id, str(doc["node_id"])) for doc in docs)
        self.supervisor.stop_many(owners=sorted({str(doc["owner"]) for doc in docs}), forget=forget)

    def delete_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        docs = [doc for doc in (self.node_record(cluster_id, node_id) for node_id in node_ids) if doc is not None]
        self._stop_processes(cluster_id, docs, forget=True)
        for doc in docs:
            shutil.rmtree(self.node_dir(cluster_id, str(doc["node_id"])), ignore_errors=True)
        nodes = self.cluster_dir(cluster_id) / "nodes"
        if nodes.is_dir() and not any(nodes.iterdir()):
            self.unwatch(cluster_id)
            shutil.rmtree(self.cluster_dir(cluster_id), ignore_errors=True)

    def start_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        docs = []
        for node_id in node_ids:
            doc = self._known(cluster_id, node_id)
            if doc.get("state") != RUNNING:
                doc["state"] = RUNNING
                self._save_node(cluster_id, doc)
            docs.append(doc)
        self._start_metads(cluster_id, docs)

    def stop_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        docs = [self._known(cluster_id, node_id) for node_id in node_ids]
        self._stop_processes(cluster_id, docs, forget=False)
        for doc in docs:
            if doc.get("state") != STOPPED:
                doc["state"] = STOPPED
                self._save_node(cluster_id, doc)

    def resize_nodes(self, cluster_id: str, nodes: Sequence[NodeSpec]) -> None:
        for spec in nodes:
            doc = self._known(cluster_id, spec.node_id)
            doc["spec"] = spec.to_json()
            self._save_node(cluster_id, doc)

    def publish_metadata(self, cluster_id: str, node_id: str, tree: Mapping[str, Any]) -> None:
        self.publish_metadata_many(cluster_id, {node_id: tree})

    def publish_metadata_many(self, cluster_id: str, trees: Mapping[str, Mapping[str, Any]]) -> None:
        """Each node's new /self tree, with what only this platform knows of its instances (their
        MAC addresses and the machine they run on)."""
        for node_id in trees:
            self._known(cluster_id, node_id)
        machines = self._machines(cluster_id)
        for node_id, tree in trees.items():
            metadata.write_tree(self.node_dir(cluster_id, node_id) / "metadata.json",
                                metadata.with_platform_fields(tree, machines))

    def _machines(self, cluster_id: str) -> dict[str, dict[str, str]]:
        """instance id -> the host fields this backend fills (`metadata.PLATFORM_FIELDS`)."""
        machine = socket.gethostname()
        found: dict[str, dict[str, str]] = {}
        nodes = self.cluster_dir(cluster_id) / "nodes"
        for folder in nodes.iterdir() if nodes.is_dir() else ():
            doc = _read_json(folder / "node.json")
            if isinstance(doc, dict) and doc.get("instance_id"):
                found[str(doc["instance_id"])] = {"mac": node_mac(self.home, cluster_id, str(doc["node_id"])),
                                                  "physical_machine": machine}
        return found

    def _metad_specs(self, cluster_id: str, docs: Sequence[Mapping[str, Any]]) -> list[ProcessSpec]:
        specs = []
        for doc in docs:
            folder = self.node_dir(cluster_id, str(doc["node_id"]))
            specs.append(self.supervisor.spec(
                f"acmd-{_digest(self.home, cluster_id, str(doc['node_id']))}",
                [sys.executable, "-m", "handlers.appcenter.metadata", "serve", "--file", str(folder / "metadata.json"),
                 "--host", str(doc["ip"]), "--port", str(metadata.METAD_PORT)],
                owner=str(doc["owner"]), cwd=str(folder), env=python_env({"PYTHONUNBUFFERED": "1"}),
                log_path=folder / "logs" / "metad.log"))
        return specs

    def _start_metads(self, cluster_id: str, docs: Sequence[Mapping[str, Any]]) -> None:
        """The nodes' metad endpoints, started in one supervisor request (they boot while the
        executor publishes the metadata)."""
        self.supervisor.start_many(self._metad_specs(cluster_id, docs))
        self._metads_up.update((cluster_id, str(doc["node_id"])) for doc in docs)

    def _metads_answer(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        """Before a command runs on running nodes whose metad this process has not started (a
        resumed executor): start what is missing (idempotent: one request), then wait until each
        endpoint listens (`METAD_WAIT` at most; a command needing it then fails naming the URL)."""
        docs = [doc for doc in (self.node_record(cluster_id, node_id) for node_id in node_ids)
                if doc is not None and doc.get("state") == RUNNING
                and (cluster_id, str(doc["node_id"])) not in self._metads_up]
        if not docs:
            return
        specs = self._metads_missing(self._metad_specs(cluster_id, docs))
        if specs:
            self.supervisor.start_many(specs)
        for doc in docs:
            if wait_port(str(doc["ip"]), metadata.METAD_PORT, METAD_WAIT):
                self._metads_up.add((cluster_id, str(doc["node_id"])))

    def _metads_missing(self, specs: Sequence[ProcessSpec]) -> list[ProcessSpec]:
        """The specs whose metad is not running: one that runs is answered as it is, even when its
        spec differs in PYTHONPATH only (a function started it from another instance's code folder)."""
        live = {status.name for status in self.supervisor.list() if status.state in LIVE}
        return [spec for spec in specs if spec.name not in live]

    # --- health checks and monitor (HealthWatch) ---------------------------------------------------
    def _agent(self, cluster_id: str) -> str:
        return f"acha-{_digest(self.home, cluster_id)}"

    def watch(self, cluster_id: str, checks: Sequence[Mapping[str, Any]], owner: str) -> None:
        """Run `checks` (health.NodeChecks as JSON) from now on: the cluster's agent re-reads them."""
        folder = self.cluster_dir(cluster_id)
        _write_json(folder / health.PLAN_FILE, list(checks))
        if not checks:
            self.unwatch(cluster_id)
            return
        self.supervisor.start(self._agent(cluster_id), [sys.executable, "-m", "handlers.appcenter.health_agent",
                                                        "--cluster-dir", str(folder)],
                              owner=f"{owner}/health", cwd=str(folder), env=python_env({"CRHELPER_HOME": self.home}),
                              log_path=folder / "health.log")

    def unwatch(self, cluster_id: str) -> None:
        try:
            self.supervisor.stop(self._agent(cluster_id), forget=True)
        except SupervisorError as exc:
            if exc.code != NOT_FOUND:
                raise

    def health(self, cluster_id: str) -> dict[str, Any] | None:
        """What the agent saw last (health.json), None before its first round."""
        return health.read_status(self.cluster_dir(cluster_id))

    # --- commands ---------------------------------------------------------------------------------
    def node_env(self, cluster_id: str, doc: Mapping[str, Any]) -> dict[str, str]:
        """What every command of the node sees: its folder, its metadata (file, endpoint, variables),
        `$APPCTL` and the package folder it boots."""
        folder = self.node_dir(cluster_id, str(doc["node_id"]))
        tree = _read_json(folder / "metadata.json") or {}
        spec = doc.get("spec") or {}
        env = metadata.environment(tree)
        env.update({
            ENV_NODE_DIR: str(folder), ENV_OWNER: str(doc["owner"]),
            ENV_PREFIX: f"acs-{_digest(self.home, cluster_id, str(doc['node_id']), size=12)}",
            ENV_APPCTL: f"{shlex.quote(sys.executable)} -m handlers.appcenter.backend_local",
            ENV_PACKAGE: str((spec.get("placement") or {}).get(PACKAGE_DIR, "")),
            metadata.ENV_FILE: str(folder / "metadata.json"),
            metadata.ENV_URL: f"http://{doc['ip']}:{metadata.METAD_PORT}",
            "APPCENTER_PYTHON": sys.executable, "CRHELPER_HOME": self.home, "PYTHONUNBUFFERED": "1",
        })
        return python_env(env)

    def _invocation_path(self, cluster_id: str, invocation: str) -> Path:
        return self.cluster_dir(cluster_id) / "invocations" / f"{invocation}.json"

    def _process_name(self, cluster_id: str, node_id: str, invocation: str) -> str:
        return f"acx-{_digest(self.home, cluster_id, node_id, invocation, size=24)}"

    def start_command(self, cluster_id: str, invocation: str, node_ids: Sequence[str], cmd: str, *,
                      timeout: float, env: Mapping[str, str]) -> None:
        path = self._invocation_path(cluster_id, invocation)
        record = _read_json(path)
        statuses: Mapping[str, ProcessStatus] | None = None
        if record is None:  # the intent first: a restarted executor finds it and starts what is missing
            record = {"nodes": list(node_ids), "cmd": cmd, "timeout": timeout, "env": dict(env), "started": time.time(),
                      "results": {}}
            _write_json(path, record)
            statuses = {}  # nothing of a new invocation can run yet: no need to ask the supervisor
        self._launch_missing(cluster_id, invocation, record, statuses)

    def _launch_missing(self, cluster_id: str, invocation: str, record: dict[str, Any],
                        statuses: Mapping[str, ProcessStatus] | None = None) -> None:
        """Start the invocation's command on every node where it neither ran nor runs, in one
        supervisor request; each node's /self/cmd says what it runs first."""
        if statuses is None:
            statuses = {status.name: status for status in self.supervisor.list()}
        specs, launching = [], []
        for node_id in record["nodes"]:
            name = self._process_name(cluster_id, node_id, invocation)
            if node_id in record["results"] or name in statuses or self._exit_file(cluster_id, node_id, invocation).exists():
                continue  # done, running, or ended (its exit status written) and forgotten
            doc = self._known(cluster_id, node_id)
            folder = self.node_dir(cluster_id, node_id)
            exit_file = self._exit_file(cluster_id, node_id, invocation)
            exit_file.unlink(missing_ok=True)
            self._show_cmd(folder, {"id": invocation, "cmd": record["cmd"], "timeout": _text_number(record["timeout"])})
            specs.append(self.supervisor.spec(name, ["/bin/sh", "-c", _WRAPPER, "sh", record["cmd"], str(exit_file)],
                                              owner=str(doc["owner"]), cwd=str(folder),
                                              env={**self.node_env(cluster_id, doc), **record["env"]},
                                              log_path=folder / "logs" / f"{invocation}.log"))
            launching.append(node_id)
        self._metads_answer(cluster_id, launching)
        self.supervisor.start_many(specs)

    @staticmethod
    def _show_cmd(folder: Path, cmd: Mapping[str, str]) -> None:
        """The node's current command, which its metad endpoint answers under /self/cmd."""
        _write_json(folder / metadata.CMD_FILE, dict(cmd))

    def _exit_file(self, cluster_id: str, node_id: str, invocation: str) -> Path:
        return self.node_dir(cluster_id, node_id) / "logs" / f"{invocation}.exit"

    def command_results(self, cluster_id: str, invocation: str) -> dict[str, CommandResult | None]:
        path = self._invocation_path(cluster_id, invocation)
        record = _read_json(path)
        if record is None:
            raise BackendError(f"no command invocation {invocation} in cluster {cluster_id}")
        written_codes = {node_id: _exit_code(self._exit_file(cluster_id, node_id, invocation))
                         for node_id in record["nodes"] if node_id not in record["results"]}
        statuses: Mapping[str, ProcessStatus] = {}
        if any(code is None for code in written_codes.values()):  # else every command ended: no need to ask
            statuses = {status.name: status for status in self.supervisor.list()}
            self._launch_missing(cluster_id, invocation, record, statuses)
        out: dict[str, CommandResult | None] = {}
        ended: list[str] = []
        changed = False
        overdue = time.time() - float(record["started"]) > float(record["timeout"])
        for node_id in record["nodes"]:
            if node_id in record["results"]:
                out[node_id] = CommandResult.from_json(record["results"][node_id])
                continue
            name = self._process_name(cluster_id, node_id, invocation)
            status = statuses.get(name)
            written = written_codes[node_id]
            log_path = str(self.node_dir(cluster_id, node_id) / "logs" / f"{invocation}.log")
            timed_out = False
            if written is None:
                if status is None or (status.state in LIVE and not overdue):
                    out[node_id] = None  # launched just now, or running within its time
                    continue
                if status.state in LIVE:
                    status = self.supervisor.stop(name)
                    timed_out = True
            code = written if written is not None else status.exit_code if status and status.exit_code is not None else -1
            result = CommandResult(code, _output_of(log_path), timed_out)
            record["results"][node_id] = result.to_json()
            out[node_id], changed = result, True
            ended.append(name)  # forgotten below (a name the supervisor no longer has is skipped)
        if changed:
            _write_json(path, record)  # the results first: only then may the supervisor forget the processes
            self.supervisor.stop_many(ended, forget=True)
        return out


# --- $APPCTL: a node's long-running services ---------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """`$APPCTL start NAME [--ready HOST:PORT] [--wait S] -- argv...` runs a service of this node
    under the supervisor (returning once it listens, with --ready); `$APPCTL stop NAME` ends it;
    `$APPCTL status NAME` exits 0 while it runs (a health check's `check_cmd`)."""
    parser = argparse.ArgumentParser(prog="$APPCTL", description="the node's long-running services")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start")
    start.add_argument("name")
    start.add_argument("--ready", default="", help="HOST:PORT that accepts once the service is up")
    start.add_argument("--wait", type=float, default=30.0)
    stop = sub.add_parser("stop")
    stop.add_argument("name")
    status = sub.add_parser("status", help="exit 0 while the service runs, 3 otherwise")
    status.add_argument("name")
    given = list(sys.argv[1:] if argv is None else argv)
    command = given[given.index("--") + 1:] if "--" in given else []
    args = parser.parse_args(given[:given.index("--")] if "--" in given else given)
    owner, prefix, folder = (os.environ.get(ENV_OWNER), os.environ.get(ENV_PREFIX), os.environ.get(ENV_NODE_DIR))
    if not owner or not prefix or not folder:
        print("$APPCTL runs inside a node's command (APPCENTER_NODE_OWNER etc. are not set)", file=sys.stderr)
        return 2
    client = SupervisorClient()
    name = f"{prefix}.{args.name}"
    if args.command == "status":
        try:
            found = client.status(name)
        except SupervisorError:
            print(f"{args.name}: not started")
            return 3
        print(f"{args.name}: {found.state}")
        return 0 if found.state == PROCESS_RUNNING else 3
    if args.command == "stop":
        try:
            client.stop(name, forget=True)
        except SupervisorError as exc:
            if exc.code != NOT_FOUND:
                print(f"$APPCTL stop {args.name}: {exc}", file=sys.stderr)
                return 1
        return 0
    if not command:
        print("$APPCTL start NAME -- PROGRAM [ARGS...]: the program is missing", file=sys.stderr)
        return 2
    ready = None
    if args.ready:
        host, _, port = args.ready.rpartition(":")
        ready = (host, int(port))
    keep = {key: value for key, value in os.environ.items() if key.startswith(("APPCENTER_", "METAD", "CRHELPER_"))
            or key in (ENV_APPCTL, "PYTHONPATH", "PYTHONUNBUFFERED", metadata.ENV_FILE)}
    try:
        started = client.start(name, command, owner=owner, cwd=folder, env=keep,
                               log_path=Path(folder) / "logs" / f"{args.name}.log")
        if ready is not None and not _listening(client, name, ready, args.wait):
            print(f"$APPCTL start {args.name}: not listening on {ready[0]}:{ready[1]} within {args.wait:g} s; "
                  f"see its log: {started.log_path}", file=sys.stderr)
            return 1
    except SupervisorError as exc:
        print(f"$APPCTL start {args.name}: {exc}", file=sys.stderr)
        return 1
    return 0


def _listening(client: SupervisorClient, name: str, ready: tuple[str, int], wait: float) -> bool:
    """Connect to `ready` every 20 ms (the daemon's own readiness look runs at its poll interval)
    until it accepts, the service ends, or `wait` passes."""
    deadline = time.monotonic() + wait
    checked = 0.0
    while time.monotonic() < deadline:
        if port_open(*ready, timeout=0.2):
            return True
        if time.monotonic() - checked > 0.5:  # an ended service will not listen: say so now
            checked = time.monotonic()
            if not client.status(name).running:
                return False
        time.sleep(0.02)
    return False


if __name__ == "__main__":
    sys.exit(main())
