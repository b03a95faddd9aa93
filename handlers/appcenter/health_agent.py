"""The local backend's health agent: one process per cluster under the supervisor daemon that owns
the nodes (`python -m handlers.appcenter.health_agent --cluster-dir DIR`), running the cluster's
`health-plan.json` (re-read every round: an update may change it) with each node's environment,
and rewriting `health.json` after every round (spec §3.4; the logic is `health`'s)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

from .backend_local import LocalNodeBackend
from .health import PLAN_FILE, NodeChecks, NodeHealth, run_round, shell_runner, write_status


def watch(folder: Path, cluster_id: str) -> None:
    """Run what is due, write the status, sleep until the next check is due; until killed."""
    backend = LocalNodeBackend(folder.parent)
    health: dict[str, NodeHealth] = {}
    due: dict[str, float] = {}

    def node_env(node_id: str) -> Mapping[str, str]:
        doc = backend.node_record(cluster_id, node_id)
        return backend.node_env(cluster_id, doc) if doc is not None else {}

    runner = shell_runner(node_env, lambda node_id: str(backend.node_dir(cluster_id, node_id)))
    while True:
        try:
            plan = [NodeChecks.from_json(doc) for doc in json.loads((folder / PLAN_FILE).read_text())]
        except (FileNotFoundError, ValueError):
            plan = []
        wanted = {checks.node_id for checks in plan}
        for gone in [node for node in health if node not in wanted]:
            health.pop(gone)
        if run_round(plan, health, runner, time.monotonic(), due):
            write_status(folder, health)
        nearest = min((due.get(checks.node_id, 0.0) for checks in plan), default=time.monotonic() + 1.0)
        time.sleep(min(1.0, max(0.05, nearest - time.monotonic())))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m handlers.appcenter.health_agent")
    parser.add_argument("--cluster-dir", required=True, type=Path, help="the cluster's folder of the local backend")
    args = parser.parse_args(argv)
    watch(args.cluster_dir, args.cluster_dir.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
