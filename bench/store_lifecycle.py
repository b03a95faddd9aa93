"""CPU per plain request of the lifecycle and its store: claim, handler, complete, settle, no HTTP.

    python bench/store_lifecycle.py [--requests 2000] [--threads 1] [--store sqlite|memory] [--handler-ms 0]

Runs `--requests` plain Creates through `Lifecycle.run` and `Verdict.settle(True)` from `--threads`
threads on a fresh store (an SQLite file in a temporary folder, or `memory://`), and prints the
process's CPU and wall time per request. Meant for A/B runs of two checkouts (`PYTHONPATH=<tree>`),
interleaved: it isolates what the store transactions of a request cost from delivery and transport.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this tree's crhelper, not the installed one (a worktree A/B measures its own code)

from crhelper import Provider, Result  # noqa: E402
from crhelper.config import Settings  # noqa: E402
from crhelper.lifecycle import Lifecycle  # noqa: E402
from crhelper.request import parse_request  # noqa: E402
from crhelper.runtime import guarded_runner  # noqa: E402
from crhelper.store import open_store  # noqa: E402
from crhelper.testing import make_event  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--handler-ms", type=float, default=0.0)
    args = parser.parse_args()
    pause = args.handler_ms / 1000.0
    provider = Provider()

    @provider.create("Custom::Plain")
    def create(props: dict, request: object) -> Result:
        time.sleep(pause)
        return Result(physical_id="plain")

    with tempfile.TemporaryDirectory() as folder:
        store = open_store(f"sqlite:///{folder}/state.sqlite" if args.store == "sqlite" else "memory://")
        lifecycle = Lifecycle(provider.registry, store, default_type=None, step_lease=30, record_ttl=3600)
        run = guarded_runner(provider.registry, Settings(), None, 0.0)
        events = [make_event("Create", "Custom::Plain") for _ in range(args.requests)]

        def work(share: list[dict]) -> None:
            for event in share:
                lifecycle.run(parse_request(event), event, run, None).settle(True)

        threads = [threading.Thread(target=work, args=(events[i::args.threads],)) for i in range(args.threads)]
        cpu, wall = time.process_time(), time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        store.close()
    print(f"store={args.store} threads={args.threads} handler={args.handler_ms:g} ms: "
          f"{cpu / args.requests * 1000:.3f} ms CPU per request, {wall / args.requests * 1000:.3f} ms wall per request")


if __name__ == "__main__":
    main()
