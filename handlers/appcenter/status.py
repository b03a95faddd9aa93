"""`crhelper appcenter status CLUSTER`: a deployed cluster as the provider's state and its health
checks see it (the nodes, the last lifecycle run, each node's health and monitor values)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Mapping

from .settings import AppCenterSettings
from crhelper.paths import home as crhelper_home, state_dir

from .state import DB_NAME, STATE_DIR, STORE_ENV, ClusterRecord, ClusterStore
from .store_for import open_cluster_store


def _health_of(record: ClusterRecord, store: ClusterStore | None = None) -> tuple[Mapping[str, Any] | None, str]:
    """What the backend's checks saw last, and a note when it cannot tell. An ecs cluster's health is
    read from the health book beside `store` (the time trigger writes it): no cloud credentials needed."""
    from .backend_for import backend_for

    if record.backend == "ecs" and store is not None:
        from .health_store import health_book, status_of

        try:
            doc = health_book(store).get(record.cluster_id)
        except Exception as exc:  # noqa: BLE001 - the rest of the status is still worth showing
            return None, f"health unknown: the health book: {type(exc).__name__}: {exc}"
        note = "" if doc and doc.get("watching") else (
            "health checks paused (a lifecycle operation, or the cluster is stopped)" if doc and doc.get("plan")
            else "")
        return status_of(doc), note
    try:
        backend = backend_for(record.backend, AppCenterSettings.from_env())
        read = getattr(backend, "health", None)
        return (read(record.cluster_id) if callable(read) else None), ""
    except Exception as exc:  # noqa: BLE001 - the rest of the status is still worth showing
        return None, f"health unknown: the {record.backend} backend: {type(exc).__name__}: {exc}"


def describe(record: ClusterRecord, health: Mapping[str, Any] | None, note: str = "") -> dict[str, Any]:
    """The status document (what --json prints)."""
    run = record.run or {}
    seen = (health or {}).get("nodes") or {}
    nodes = [{"NodeId": node["node_id"], "Role": node["role"], "InstanceId": node.get("instance_id", ""),
              "Ip": node.get("ip", ""), "Health": seen.get(node["node_id"])} for node in record.nodes]
    return {
        "ClusterId": record.cluster_id, "Backend": record.backend, "Status": record.status,
        "State": record.desired_state, "Version": record.version, "Package": record.package,
        "Stack": record.stack_id, "LogicalId": record.logical_id,
        "LastRun": {"Operations": [phase.get("operation") for phase in run.get("phases", [])],
                    "Finished": run.get("finished"), "Ok": run.get("ok"), "Reason": run.get("reason") or None,
                    "Seconds": round(run["ended"] - run["began"], 3) if run.get("ended") and run.get("began") else None},
        "Nodes": nodes, "HealthUpdated": (health or {}).get("updated"), "Note": note or None,
    }


def _health_text(found: Mapping[str, Any] | None) -> str:
    if not found:
        return "no checks"
    text = f"{found['status']} (checks {found['checks']}, actions {found['actions']}"
    if found.get("last_exit") not in (None, 0):
        text += f", last exit {found['last_exit']}"
    text += ")"
    monitor = found.get("monitor") or {}
    if monitor:
        text += "  " + " ".join(f"{key}={value}" for key, value in sorted(monitor.items()))
    return text


def print_text(doc: Mapping[str, Any], out: Any) -> None:
    print(f"cluster {doc['ClusterId']} ({doc['Backend']}, {doc['State']}, version {doc['Version'] or '-'}): "
          f"{doc['Status']}", file=out)
    print(f"package {doc['Package']}", file=out)
    last = doc["LastRun"]
    if last["Operations"]:
        outcome = "running" if not last["Finished"] else "ok" if last["Ok"] else f"failed: {last['Reason']}"
        took = f" in {last['Seconds']:g} s" if last["Seconds"] is not None else ""
        print(f"last run: {', '.join(map(str, last['Operations']))}: {outcome}{took}", file=out)
    for node in doc["Nodes"]:
        print(f"  {node['NodeId']:<14} {node['InstanceId']:<12} {node['Ip']:<16} {_health_text(node['Health'])}",
              file=out)
    if doc["HealthUpdated"]:
        print(f"health checked {time.time() - doc['HealthUpdated']:.1f} s ago", file=out)
    if doc["Note"]:
        print(doc["Note"], file=out)


def status(args: argparse.Namespace) -> int:
    """Exit 0 (shown), 1 (no such cluster: the known ones are listed)."""
    url = os.environ.get(STORE_ENV) or None
    if url is None and not (state_dir(STATE_DIR) / DB_NAME).exists():  # nothing deployed here: create nothing
        print(f"no cluster {args.cluster!r}: no cluster was deployed with CRHELPER_HOME={crhelper_home()}",
              file=sys.stderr)
        return 1
    store = open_cluster_store(url)
    record = store.get(args.cluster)
    if record is None:
        known = [r.cluster_id for r in store.list()]
        print(f"no cluster {args.cluster!r} in {store.path}" + (f"; known: {', '.join(known)}" if known else ""),
              file=sys.stderr)
        return 1
    health, note = _health_of(record, store)
    doc = describe(record, health, note)
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print_text(doc, sys.stdout)
    return 0
