"""AppCenter package check time (issue 13): validate + render of each shared package, warm process.

One iteration is what `crhelper appcenter validate` does after start-up: read the package files
from disk, parse config.json, layer and check the default values, render the template, parse and
type the cluster (`handlers.appcenter.check.load_and_check`). A few warm-up iterations first (regex
compilation, pydantic's first validation), then N timed ones per package, interleaved round-robin
across the packages so load on the machine hits them alike. Prints the median and p90 of each and
the verdict against the target (median <= 5 ms each). A warm process keeps what it parsed by content
(the package's files by their digest, config.json's form, the template's scan, the typed cluster by
the rendered text): the files are read every time, the values checked and the template rendered
every time; the stage table times each stage apart, the typed cluster without its cache.

    python bench/appcenter_render.py --iterations 50
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import Verdict, median, p90, table  # noqa: E402

from handlers.appcenter.check import load_and_check  # noqa: E402
from handlers.appcenter.cluster import parse_cluster  # noqa: E402
from handlers.appcenter.config import parse_config  # noqa: E402
from handlers.appcenter.mustache import render  # noqa: E402
from handlers.appcenter.package import load_package  # noqa: E402
from handlers.appcenter.values import resolve_values  # noqa: E402

PACKAGES = Path(__file__).resolve().parents[2] / "shared" / "appcenter"
NAMES = ("zookeeper", "etcd", "redis-standalone", "tomcat", "postgresql-simplecluster")
TARGET_MS = 5.0


def once(path: Path) -> tuple[float, float]:
    """(wall ms, this thread's CPU ms) of one validate + render."""
    started, cpu = time.perf_counter(), time.thread_time()
    checked = load_and_check(path)
    elapsed, used = time.perf_counter() - started, time.thread_time() - cpu
    if not checked.ok:
        raise SystemExit(f"{path.name} does not validate: {[str(p) for p in checked.errors]}")
    return elapsed * 1000, used * 1000


STAGES = ("read files (+ digest)", "config.json (by digest)", "values", "render", "typed cluster (uncached)")


def stages(path: Path) -> list[float]:
    """Wall ms of each stage of one validate + render, timed apart (where the time goes)."""
    marks = [time.perf_counter()]
    package = load_package(path)
    marks.append(time.perf_counter())
    config = parse_config(package.config, package.config_digest or None)
    marks.append(time.perf_counter())
    values = resolve_values(config, None, replace_policy=package.replace_policy)
    marks.append(time.perf_counter())
    rendered = render(package.template, values.values)
    marks.append(time.perf_counter())
    parse_cluster(rendered, config)
    marks.append(time.perf_counter())
    return [(after - before) * 1000 for before, after in zip(marks, marks[1:])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--packages", default=os.fspath(PACKAGES), help="folder holding the shared packages")
    args = parser.parse_args()
    paths = [Path(args.packages) / name for name in NAMES]
    for path in paths:
        for _ in range(args.warmup):
            once(path)
    walls: dict[str, list[float]] = {path.name: [] for path in paths}
    cpus: dict[str, list[float]] = {path.name: [] for path in paths}
    for _ in range(args.iterations):
        for path in paths:
            wall, cpu = once(path)
            walls[path.name].append(wall)
            cpus[path.name].append(cpu)
    split: dict[str, list[list[float]]] = {path.name: [] for path in paths}
    for _ in range(args.iterations):
        for path in paths:
            split[path.name].append(stages(path))
    rows, verdicts = [], []
    for name, values in walls.items():
        rows.append([name, f"{median(values):.2f}", f"{p90(values):.2f}", f"{min(values):.2f}",
                     f"{median(cpus[name]):.2f}"])
        verdicts.append(Verdict(f"{name} validate+render median ms", median(values), TARGET_MS, higher_is_better=False))
    print(f"validate + render, warm process, files read each time; {args.iterations} runs each; "
          f"load average {os.getloadavg()[0]:.2f} (CPU ms: this thread only, less sensitive to a busy machine)")
    print(table(["package", "median ms", "p90 ms", "min ms", "median CPU ms"], rows))
    print(f"\nwhere the time goes: median wall ms of each stage, timed apart ({args.iterations} more runs each)")
    print(table(["package", *STAGES], [[name, *(f"{median([run[i] for run in runs]):.2f}" for i in range(len(STAGES)))]
                                        for name, runs in split.items()]))
    for verdict in verdicts:
        print(verdict.line())
    return 0 if all(verdict.passed for verdict in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
