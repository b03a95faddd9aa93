"""Cold start of this checkout against an earlier commit of itself, measured in one run (issue 10).

    python bench/against_commit.py --baseline REV [--pairs N]

A refactor must not make the Function Compute cold path slower. Both trees answer the same Create
(pydantic- and dict-typed providers, FC context) over HTTPS to one loopback capture server, each
delivery checked; the two run as interleaved pairs (ours then the baseline, then the other way
round), each child a fresh process from the same virtual environment with its bytecode cached.
Reported: the median of the per-pair ratios ours/baseline, with min and max, for wall and CPU time.
Exit status 0 when every median ratio is at most 1.05, 1 otherwise, 2 when a contender failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import _venvs  # noqa: E402
from _capture import CaptureServer  # noqa: E402
from _stats import median, table  # noqa: E402
from cold_warm import BenchError, Contender, Runner, build_contenders, machine_line, make_tls  # noqa: E402

KEYS = ("ours", "ours-dict")
LIMIT = 1.05


def export_tree(rev: str, into: Path) -> Path:
    """The files of `rev` (git archive: no build artefacts, no bytecode of this checkout)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def baseline_of(contender: Contender, tree: Path) -> Contender:
    """The same contender, importing crhelper (and the samples) from the baseline tree."""
    env = {**contender.env, "PYTHONPATH": str(tree)}
    module_dir = tree / contender.module_dir.relative_to(REPO)
    return dataclasses.replace(contender, key=f"{contender.key}@base", label=f"{contender.label} @baseline",
                               module_dir=module_dir, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, metavar="REV", help="the commit to compare with (e.g. the pre-refactor one)")
    parser.add_argument("--pairs", type=int, default=20, help="interleaved pairs per contender (default 20)")
    args = parser.parse_args(argv)
    began = time.monotonic()
    python = _venvs.ensure(_venvs.OURS, print)
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.baseline], check=True,
                         capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    print(f"$ python bench/against_commit.py --baseline {args.baseline} --pairs {args.pairs}")
    print(machine_line())
    print(f"ours: working tree at {head} (uncommitted changes included); baseline: {rev}")
    with tempfile.TemporaryDirectory(prefix="crhelper-against-") as tmp:
        workdir = Path(tmp)
        tree = export_tree(args.baseline, workdir / "baseline")
        server_context, trust = make_tls(workdir, "system")
        print(f"trust: {trust.mode}")
        contenders = build_contenders(trust.env)
        rows = []
        worst = 0.0
        with CaptureServer(server_context) as server:
            runner = Runner(server, workdir, {_venvs.OURS.name: python})
            try:
                for key in KEYS:
                    ours, base = contenders[key], baseline_of(contenders[key], tree)
                    for warm in (ours, base, ours, base):  # untimed: bytecode compiled, page cache warm
                        runner.run(warm, 1, 0, timeout=60)
                    wall, cpu = [], []
                    for index in range(args.pairs):
                        order = (ours, base) if index % 2 == 0 else (base, ours)
                        runs = {c.key: runner.run(c, 1, 0, timeout=60) for c in order}
                        wall.append(runs[ours.key].wall_s / runs[base.key].wall_s)
                        cpu.append(runs[ours.key].cpu_s / runs[base.key].cpu_s)
                    worst = max(worst, median(wall), median(cpu))
                    rows.append([ours.label, f"{median(wall):.3f}", f"{min(wall):.3f}", f"{max(wall):.3f}",
                                 f"{median(cpu):.3f}", f"{min(cpu):.3f}", f"{max(cpu):.3f}"])
            except BenchError as exc:
                print(f"ERROR: {exc}")
                return 2
    print("")
    print(table(["cold start, ours / baseline (per pair)", "wall median", "min", "max", "CPU median", "min", "max"], rows))
    print(f"\n{'PASS' if worst <= LIMIT else 'MISS'}: worst median ratio {worst:.3f} (limit {LIMIT})")
    print(f"total bench time {time.monotonic() - began:.0f} s")
    return 0 if worst <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
