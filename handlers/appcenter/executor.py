"""The lifecycle executor: walks the plans of `plan.py` (spec §7) on a node backend, checkpointed.

A `Run` is a list of phases (one plan each: an Update may upgrade, resize, scale, reach the env,
stop or start, and run a service, in that order), walked stage by stage. The steps of a stage run
together: every service step's command starts on its nodes at once (one backend invocation per
step), then the stage waits until all of them ended. A non-zero exit fails the stage, unless the
step is a ``destroy`` that ``Force`` may pass (``allow_force``); a failing *blocking* step (the
destroy gate, a ``pre_check``) also runs its plan's `on_abort` stages. The semantics are those of
`plan.walk`, with a stage's steps at once.

Everything the walk learns is put on the cluster record and saved (`checkpoint`) before it can
be lost: a started command once it started (its invocation id derives from the run and the step,
and the backend's start is idempotent by it, so a walk killed in between starts the same id
again, which runs nothing twice), the stage position with the results of its steps once the stage
ended (one write per stage; a stage still running saves what ended so far when it is left). A
worker killed at any point is resumed by the next step from the record: a started command is
polled, not started again, and completed stages are not run again.

Within one handler call the running commands are looked at every `check_interval` seconds (a
setting, 0.05 s by default), so a stage of quick commands moves on at once; the poll interval is
only the delay between calls (InProgress).

Platform actions (``create-resources``, ``register-adding-hosts``...) are calls on the backend and
metadata publications (every node's tree in one `publish_metadata_many` call where the backend
has it; again after ``start-nodes``, so a node that was stopped sees what changed meanwhile). The
reload hook of an env change is the roles' ``reload`` service where a package defines one (confd's
``reload_cmd`` on a metadata change, spec §7). ``custom_metadata`` prints the node's token (the
whole output, stripped: a string, or a string in JSON form), published as
``/hosts/<role>/<id>/token``. After a ``get_nodes_order`` stage, the one-node blocks of the phase
that follow run in the order it printed (node ids as the metadata shows them, comma-separated).

Secrets (the values of the package's ``password`` and ``accesskey`` items) are scrubbed from the
command output the record keeps and from every FAILED Reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from typing import Any, Callable, Mapping, Sequence

from . import metadata, plan as plans
from .backends import RUNNING, NodeBackend, NodeSpec
from .cluster import REPLICA_SUFFIX, Cluster, Node
from .locale import Translator
from .settings import AppCenterSettings
from .state import ClusterRecord

#: Within one call, the seconds between looks at running commands when neither the settings
#: (`check_interval`) nor the backend (its `check_interval` attribute) say; the poll interval is the
#: InProgress delay between calls.
CHECK_INTERVAL = 0.05
#: How a secret's value reads wherever the record or a Reason would show it.
MASK = "******"
GET_NODES_ORDER = "get_nodes_order"
#: The service an env change runs on the roles that define it (see the module doc).
RELOAD = "reload"
#: Placement key for the folder a local node boots (the package).
PACKAGE_DIR = "package_dir"
OWNER = "owner"
_OUTPUT_SHOWN = 300


class StepFailed(Exception):
    """A step that could not be done at all (a backend call raised); the message names it."""


class CheckpointFailed(RuntimeError):
    """The record could not be saved: the walk stops here (never taken for the step's failure)."""


def _step_json(step: plans.Step) -> dict[str, Any]:
    doc = dataclasses.asdict(step)
    doc["nodes"] = list(step.nodes)
    doc["service_params"] = dict(step.service_params) if step.service_params is not None else None
    return doc


def _step_of(doc: Mapping[str, Any]) -> plans.Step:
    values = dict(doc)
    values["nodes"] = tuple(values.get("nodes") or ())
    return plans.Step(**values)


def _stages_json(stages: Sequence[plans.Stage]) -> list[dict[str, Any]]:
    return [{"label": stage.label, "steps": [_step_json(step) for step in stage.steps],
             **({"node": stage.node} if stage.node is not None else {})} for stage in stages]


def phase_of(plan: plans.Plan, force: bool = False, note: str = "") -> dict[str, Any]:
    """A plan as one phase of a run (JSON)."""
    return {"operation": plan.operation, "stages": _stages_json(plan.stages), "on_abort": _stages_json(plan.on_abort),
            "force": force, "note": note}


def new_run(key: str, phases: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A run (JSON, kept on the record) of `phases` for the request `key`."""
    return {"key": key, "phases": list(phases), "phase": 0, "stage": 0, "aborting": False, "steps": {},
            "finished": False, "ok": False, "reason": "", "forced": [], "began": time.time(), "ended": None}


def secret_texts(values: Mapping[str, Any], paths: Sequence[str]) -> list[str]:
    """The texts of the secret values (`paths` of `values`: strings, or the string leaves of an
    accesskey's object), longest first so a secret inside another is masked whole."""
    found: set[str] = set()

    def add(value: Any) -> None:
        if isinstance(value, Mapping):
            for inner in value.values():
                add(inner)
        elif isinstance(value, (list, tuple)):
            for inner in value:
                add(inner)
        elif value is not None and not isinstance(value, bool) and str(value) != "":
            found.add(str(value))

    for path in paths:
        add(values.get(path))
    return sorted(found, key=len, reverse=True)


def scrub(text: str, secrets: Sequence[str]) -> str:
    """`text` with every secret replaced by MASK."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def masked_inputs(inputs: Mapping[str, Any], paths: Sequence[str]) -> dict[str, Any]:
    """The Inputs as the record keeps them: the secret items' values masked (a null stays null)."""
    secret = set(paths)
    return {key: (MASK if key in secret and value is not None else value) for key, value in inputs.items()}


def _node_role(node_id: str) -> tuple[str, int]:
    role, _, sid = node_id.rpartition("-")
    return role, int(sid)


def _digits(*parts: str, size: int = 9) -> str:
    number = int(hashlib.sha256("\0".join(parts).encode()).hexdigest(), 16)
    return str(number)[:size]


def _hex(*parts: str, size: int = 8) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:size]


class Executor:
    """Walks `record.run` for one cluster; `checkpoint()` saves the record (the caller's store)."""

    def __init__(self, record: ClusterRecord, cluster: Cluster, backend: NodeBackend,
                 checkpoint: Callable[[ClusterRecord], None], settings: AppCenterSettings,
                 translator: Translator | None = None, *, placement: Mapping[str, str] | None = None,
                 sleep: Callable[[float], None] = time.sleep, on_stage: Callable[[str], None] | None = None) -> None:
        self.record, self.cluster, self.backend = record, cluster, backend
        self.on_stage = on_stage
        self.secrets = secret_texts(record.values, record.secret_paths)
        self._save, self.settings = checkpoint, settings
        self.translator = translator or Translator({})
        self.placement = dict(placement or {})
        self.sleep = sleep

    # --- the walk ---------------------------------------------------------------------------------
    @property
    def run(self) -> dict[str, Any]:
        assert self.record.run is not None
        return self.record.run

    def checkpoint(self) -> None:
        try:
            self._save(self.record)
        except Exception as exc:
            raise CheckpointFailed(f"the cluster's state could not be saved: {type(exc).__name__}: {exc}") from exc

    def advance(self, left: Callable[[], float]) -> float | None:
        """Walk until the run ends (None) or this call's time is up: the delay before the next call.
        `left()` is the seconds this call may still spend."""
        configured = self.settings.check_interval
        check = configured if configured is not None else getattr(self.backend, "check_interval", CHECK_INTERVAL)
        wait = min(float(check), self.settings.poll_interval)
        while True:
            if self._tick():
                return None
            if left() <= wait:
                return self.settings.poll_interval
            self.sleep(wait)

    def _stages(self) -> list[dict[str, Any]]:
        phase = self.run["phases"][self.run["phase"]]
        return phase["on_abort"] if self.run["aborting"] else phase["stages"]

    def _key(self, index: int) -> str:
        run = self.run
        return f"{'a' if run['aborting'] else 's'}{run['phase']}.{run['stage']}.{index}"

    def _tick(self) -> bool:
        """Do everything that needs no waiting; True once the run has ended."""
        run = self.run
        while not run["finished"]:
            phases = run["phases"]
            if run["phase"] >= len(phases):
                self._finish(True, "")
                break
            stages = self._stages()
            if run["stage"] >= len(stages):
                if run["aborting"]:
                    self._finish(False, run["reason"])
                    break
                run["phase"] += 1
                run["stage"] = 0
                self.checkpoint()
                continue
            stage = stages[run["stage"]]
            self._announce(stage)
            if not self._stage_done(stage):
                return False
            failure = self._stage_failure(stage)
            if failure is None and not run["aborting"]:
                failure = self._follow_nodes_order(stage)
            if failure is not None and not run["aborting"]:
                step, reason = failure
                run["reason"] = reason
                if step.blocking and phases[run["phase"]]["on_abort"]:
                    run["aborting"], run["stage"] = True, 0
                    self.checkpoint()
                    continue
                self._finish(False, reason)
                break
            run["stage"] += 1
            self.checkpoint()
        return True

    def _follow_nodes_order(self, stage: Mapping[str, Any]) -> tuple[plans.Step, str] | None:
        """After a ``get_nodes_order`` stage: the phase's remaining one-node blocks in the order it
        printed; a failure (step, Reason) when it names a node this cluster does not have."""
        steps = [(index, doc) for index, doc in enumerate(stage["steps"]) if doc["name"] == GET_NODES_ORDER]
        if not steps:
            return None
        by_shown = {}
        for node in self.record.nodes:
            for shown in (node.get("cln"), node["node_id"], node.get("instance_id")):
                if shown:
                    by_shown[str(shown)] = str(node["node_id"])
        order: list[str] = list(self.run.get("nodes_order") or [])
        for index, doc in steps:
            results = self.run["steps"][self._key(index)].get("results") or {}
            outputs = (plans.parse_nodes_order(str(result.get("output") or "")) for result in results.values())
            printed = next((ids for ids in outputs if ids), [])  # the first node that printed an order
            unknown = [node for node in printed if node not in by_shown]
            if unknown:
                step = _step_of(doc)
                return step, (f"service {GET_NODES_ORDER} of role {step.role} printed node id(s) "
                              f"{', '.join(unknown[:5])[:_OUTPUT_SHOWN]} that this cluster does not have "
                              f"(it prints the nodes' node_id, comma-separated)")
            order += [by_shown[node] for node in printed if by_shown[node] not in order]
        self.run["nodes_order"] = order
        phase = self.run["phases"][self.run["phase"]]
        at = self.run["stage"] + 1
        phase["stages"] = phase["stages"][:at] + plans.follow_nodes_order(phase["stages"][at:], order)
        return None

    def _announce(self, stage: Mapping[str, Any]) -> None:
        """Tell `on_stage` once per stage what it runs (``scale-out: start, order 1: web-3, web-4``)."""
        run = self.run
        key = self._key(-1)
        if self.on_stage is None or key in run.setdefault("announced", []):
            return
        run["announced"].append(key)
        nodes = sorted({node for step in stage["steps"] for node in step["nodes"]})
        operation = run["phases"][run["phase"]]["operation"]
        self.on_stage(f"{operation}{' (aborting)' if run['aborting'] else ''}: {stage['label']}"
                      + (f": {', '.join(nodes)}" if nodes else ""))

    def _finish(self, ok: bool, reason: str) -> None:
        self.run.update(finished=True, ok=ok, reason=reason, ended=time.time())
        self.checkpoint()

    def _stage_done(self, stage: Mapping[str, Any]) -> bool:
        """Start what has not started, collect what ended; True once every step of the stage ended
        (the caller saves the record then, with the stage's next position)."""
        done, ended = True, False
        for index, doc in enumerate(stage["steps"]):
            key = self._key(index)
            entry = self.run["steps"].setdefault(key, {"done": False})
            if entry["done"]:
                continue
            step = _step_of(doc)
            try:
                finished = self._do_action(step, entry) if step.kind == "action" else self._do_service(step, key, entry)
            except CheckpointFailed:
                raise
            except StepFailed as exc:
                entry.update(done=True, error=str(exc))
                finished = True
            except Exception as exc:  # noqa: BLE001 - a backend call: the step fails naming it
                entry.update(done=True, error=f"{step.name} on {self._nodes_text(step.nodes)}: the {self.backend.name} "
                                              f"backend failed: {type(exc).__name__}: {exc}")
                finished = True
            if finished:
                entry["done"] = ended = True
            done = done and finished
        if ended and not done:
            self.checkpoint()  # what ended so far, while the rest of the stage runs on
        return done

    def _stage_failure(self, stage: Mapping[str, Any]) -> tuple[plans.Step, str] | None:
        """The stage's first failing step and the Reason, after Force has passed what it may."""
        for index, doc in enumerate(stage["steps"]):
            entry = self.run["steps"][self._key(index)]
            step = _step_of(doc)
            if entry.get("error"):
                return step, entry["error"]
            failed = [(node, result) for node, result in (entry.get("results") or {}).items()
                      if result["exit_code"] != 0 or result.get("timed_out")]
            if not failed:
                continue
            if self.run["phases"][self.run["phase"]]["force"] and step.allow_force:
                if self._key(index) not in self.run["forced"]:
                    self.run["forced"].append(self._key(index))
                continue
            return step, self._failure_reason(step, failed)
        return None

    def _failure_reason(self, step: plans.Step, failed: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        node_id, result = failed[0]
        node = self.record.node(node_id) or {}
        where = f"service {step.name}{' pre_check' if step.pre_check else ''} of role {step.role} failed on node {node_id}"
        if node.get("instance_id"):
            where += f" ({node['instance_id']})"
        code = int(result["exit_code"])
        if result.get("timed_out"):
            what = f"timed out after {self._timeout(step):g} s"
        else:
            message = self.translator.error_message(code) if code > 0 else None
            what = f"exit code {code}" + (f": {message}" if message else "")
        output = scrub(result.get("output") or "", self.secrets).strip().splitlines()
        tail = f"; its output ends: {output[-1][:_OUTPUT_SHOWN]}" if output else ""
        others = f" (and {len(failed) - 1} more node(s))" if len(failed) > 1 else ""
        gate = "; the operation was stopped" if step.blocking else ""
        if step.allow_force is not None:  # a destroy
            gate += ("; Force: true passes a failing destroy" if step.allow_force
                     else "; this package does not allow forcing it (allow_force: false)")
        return f"{where}: {what}{others}{tail}{gate}"

    def _nodes_text(self, nodes: Sequence[str]) -> str:
        return ", ".join(nodes) if nodes else "the cluster"

    # --- services ---------------------------------------------------------------------------------
    def _timeout(self, step: plans.Step) -> float:
        return min(float(step.timeout or 600), self.settings.max_service_timeout)

    def _invocation(self, key: str) -> str:
        raw = f"{self.run['key']}"
        return f"r{_hex(self.record.cluster_id, raw)}-{re.sub(r'[^A-Za-z0-9._-]', '-', key)}"[:64]

    def service_env(self, step: plans.Step) -> dict[str, str]:
        env = {"APPCENTER_SERVICE": step.name, "APPCENTER_ROLE": str(step.role or ""),
               "APPCENTER_OPERATION": str(self.run["phases"][self.run["phase"]]["operation"])}
        if step.service_params is not None:
            env["APPCENTER_SERVICE_PARAMS"] = json.dumps(step.service_params, ensure_ascii=False, sort_keys=True)
        return env

    def _do_service(self, step: plans.Step, key: str, entry: dict[str, Any]) -> bool:
        nodes = [node for node in step.nodes if self.record.node(node) is not None]
        if not nodes or not step.cmd:
            entry["results"] = {}
            return True
        if not entry.get("started"):
            # The id derives from the run and the step: a walk killed before the save below starts
            # the same id again, which the backend's idempotent start turns into a poll.
            entry["invocation"] = self._invocation(key)
            self.backend.start_command(self.record.cluster_id, entry["invocation"], nodes, step.cmd,
                                       timeout=self._timeout(step), env=self.service_env(step))
            entry["started"] = True
            self.checkpoint()
        results = self.backend.command_results(self.record.cluster_id, entry["invocation"])
        if any(results.get(node) is None for node in nodes):
            return False
        entry["results"] = {}
        for node in nodes:
            kept = results[node].to_json()  # type: ignore[union-attr]
            kept["output"] = scrub(str(kept.get("output") or ""), self.secrets)
            entry["results"][node] = kept
        operation = self.run["phases"][self.run["phase"]]["operation"]
        for node in nodes:
            result = results[node]
            assert result is not None
            self.record.journal.append({"operation": operation, "service": step.name, "pre_check": step.pre_check,
                                        "role": step.role, "node": node, "exit_code": result.exit_code,
                                        "timed_out": result.timed_out, "at": time.time()})
        if step.name == plans.CUSTOM_METADATA:
            self._keep_custom_metadata(results)
        return True

    def _keep_custom_metadata(self, results: Mapping[str, Any]) -> None:
        """custom_metadata prints the node's token (spec §3.2: "a string, or a string in JSON
        form"): the whole output, stripped, as it was printed, is its ``token``."""
        for node, result in results.items():
            if result is not None:
                self.record.custom_metadata[node] = {"token": (result.output or "").strip()}
        self.publish()

    # --- actions ----------------------------------------------------------------------------------
    def _do_action(self, step: plans.Step, entry: dict[str, Any]) -> bool:
        record, backend, cid = self.record, self.backend, self.record.cluster_id
        name = step.name
        if not entry.get("journaled"):
            record.journal.append({"action": name, "nodes": list(step.nodes), "at": time.time()})
            entry["journaled"] = True
        if name == plans.CREATE_RESOURCES:
            return self._create_resources(step, entry)
        if name in (plans.REGISTER_METADATA, plans.START_CONFD):
            self.publish()
        elif name == plans.COPY_DATA:  # an in-place upgrade: the nodes get the new version's files, not a new image
            backend.resize_nodes(cid, [self.spec_of(record.node(node) or {}) for node in self._existing(step.nodes)])
            self.publish()
        elif name == plans.REGISTER_ADDING_HOSTS:
            record.adding = list(step.nodes)
            self.publish()
        elif name == plans.CLEAR_ADDING_HOSTS:
            record.adding = []
            self.publish()
        elif name == plans.REGISTER_DELETING_HOSTS:
            record.deleting = list(step.nodes)
            self.publish()
        elif name == plans.CLEAR_DELETING_HOSTS:
            record.deleting = []
            self.publish()
        elif name == plans.DELETE_RESOURCES:
            backend.delete_nodes(cid, list(step.nodes))
            record.nodes = [node for node in record.nodes if node["node_id"] not in step.nodes]
            record.adding = [node for node in record.adding if node not in step.nodes]
            for node in step.nodes:
                record.custom_metadata.pop(node, None)
        elif name == plans.DEREGISTER_METADATA:
            self.publish()
        elif name == plans.START_NODES:
            backend.start_nodes(cid, self._existing(step.nodes))
            if not self._running(step, entry):
                return False
            self.publish()  # what changed while they were stopped (an env change, new nodes)
        elif name == plans.STOP_NODES:
            backend.stop_nodes(cid, self._existing(step.nodes))
        elif name == plans.BOOT_NEW_IMAGE:
            backend.resize_nodes(cid, [self.spec_of(record.node(node) or {}) for node in self._existing(step.nodes)])
            self.publish()
        elif name == plans.REGISTER_VERTICAL:
            record.vertical_roles = sorted(set(self._vertical_roles()))
            self.publish()
        elif name == plans.RESIZE:
            resized = [found for found in (record.node(node_id) for node_id in step.nodes) if found is not None]
            for found in resized:
                found.update(self.sizes_of(str(found["role"])))
            backend.resize_nodes(cid, [self.spec_of(found) for found in resized])
        elif name == plans.CLEAR_VERTICAL:
            record.vertical_roles = []
            self.publish()
        else:
            raise StepFailed(f"the executor does not know the platform action {name!r}")
        return True

    def _vertical_roles(self) -> list[str]:
        return [str(step["role"]) for stage in self._stages() for step in stage["steps"]
                if step["name"] == plans.RESIZE and step["role"]]

    def _existing(self, nodes: Sequence[str]) -> list[str]:
        return [node for node in nodes if self.record.node(node) is not None]

    def _create_resources(self, step: plans.Step, entry: dict[str, Any]) -> bool:
        record = self.record
        if "deadline" not in entry:
            for node_id in step.nodes:
                if record.node(node_id) is None:
                    record.nodes.append(self.new_node(node_id))
            entry["deadline"] = time.time() + self.settings.node_timeout
            self.checkpoint()
        infos = self.backend.create_nodes(record.cluster_id, [self.spec_of(record.node(n) or {}) for n in step.nodes])
        for node_id, info in infos.items():
            node = record.node(node_id)
            if node is not None:
                node.update(instance_id=info.instance_id, ip=info.ip)
        return self._running(step, entry, infos)

    def _running(self, step: plans.Step, entry: dict[str, Any], infos: Mapping[str, Any] | None = None) -> bool:
        nodes = self._existing(step.nodes)
        if infos is None or any(infos[node].state != RUNNING for node in nodes if node in infos):
            infos = self.backend.describe_nodes(self.record.cluster_id, nodes)
        waiting = [node for node in nodes if infos[node].state != RUNNING]
        if not waiting:
            for node in nodes:
                found = self.record.node(node)
                if found is not None and infos[node].ip:
                    found.update(instance_id=infos[node].instance_id, ip=infos[node].ip)
            return True
        entry.setdefault("deadline", time.time() + self.settings.node_timeout)
        if time.time() > float(entry["deadline"]):
            raise StepFailed(f"{step.name}: node(s) {', '.join(waiting)} did not read Running within "
                             f"{self.settings.node_timeout:g} s ({', '.join(infos[n].state for n in waiting)})")
        return False

    # --- nodes and metadata -----------------------------------------------------------------------
    def _base_role(self, role: str) -> Node:
        return self.cluster.node(role[: -len(REPLICA_SUFFIX)] if role.endswith(REPLICA_SUFFIX) else role)

    def sizes_of(self, role: str) -> dict[str, Any]:
        node = self._base_role(role)
        return {"cpu": node.cpu, "memory": node.memory, "instance_class": node.instance_class,
                "volume_size": node.volume.size if node.volume is not None else None}

    def new_node(self, node_id: str) -> dict[str, Any]:
        role, sid = _node_role(node_id)
        replica = role.endswith(REPLICA_SUFFIX)
        per = self._base_role(role).replica if replica else 0
        gid = (sid - 1) // per + 1 if replica and per else sid
        cid = self.record.cluster_id
        return {"node_id": node_id, "role": role, "sid": sid, "gid": gid, "gsid": _digits(cid, node_id),
                "cln": f"cln-{_hex(cid, node_id)}", "instance_id": "", "ip": "", **self.sizes_of(role)}

    def spec_of(self, node: Mapping[str, Any]) -> NodeSpec:
        role = str(node["role"])
        return NodeSpec(node_id=str(node["node_id"]), role=role, sid=int(node["sid"]),
                        image=self._base_role(role).container.image, cpu=node.get("cpu"), memory=node.get("memory"),
                        volume_size=node.get("volume_size"), instance_class=node.get("instance_class"),
                        placement=self.placement)

    def _host(self, node: Mapping[str, Any]) -> dict[str, Any]:
        shown = dict(node)
        shown["node_id"] = node.get("cln") or node["node_id"]
        shown["custom"] = self.record.custom_metadata.get(str(node["node_id"]), {})
        return shown

    def cluster_keys(self) -> dict[str, Any]:
        record, cluster = self.record, self.cluster
        endpoints = {}
        for name, endpoint in cluster.endpoints.items():
            endpoints[name] = {"port": cluster.endpoint_port(name) or "", "protocol": endpoint.protocol or ""}
        keys: dict[str, Any] = {
            "app_id": f"app-{_hex(record.package)}", "cluster_id": record.cluster_id,
            "user_id": f"usr-{_hex(record.stack_id.split(':')[0] if record.stack_id else 'local')}",
            "global_uuid": _digits(record.cluster_id, size=18), "zone": record.zone or "", "vxnet": cluster.vxnet,
            "endpoints": endpoints,
        }
        audit = (record.run or {}).get("upgrade_audit")
        if audit:
            keys["upgrade-audit"] = audit
        return keys

    def publish(self) -> None:
        """Every node's /self tree, now (after each change of nodes, env or the temporary keys)."""
        record = self.record
        hosts = [self._host(node) for node in record.nodes if node.get("instance_id")]
        by_id = {str(node["node_id"]): host for node, host in zip([n for n in record.nodes if n.get("instance_id")], hosts)}
        cluster_keys = self.cluster_keys()
        role_env = {role: node.env for role, node in self.cluster.roles.items()}
        adding = [by_id[n] for n in record.adding if n in by_id]
        deleting = [by_id[n] for n in record.deleting if n in by_id]
        trees = {node_id: metadata.self_tree(host, hosts, cluster_keys, self.cluster.env, adding=adding,
                                             deleting=deleting, vertical_roles=record.vertical_roles,
                                             role_env=role_env, definition=self.cluster)
                 for node_id, host in by_id.items()}
        many = getattr(self.backend, "publish_metadata_many", None)
        if not trees:
            return
        if callable(many):
            many(record.cluster_id, trees)
            return
        for node_id, tree in trees.items():
            self.backend.publish_metadata(record.cluster_id, node_id, tree)
