"""Where a contender's import time goes: `python -X importtime`, repeated, minimum per module.

    python bench/_importtime.py greeting [--runs 9] [--top 25] [--env ours|aws] [--prefix pydantic] [--set K=V]

One `-X importtime` run on a shared 2-core machine is too noisy to act on; the minimum over several
fresh processes is stable. Prints the modules with the largest cumulative time (indentation shows
nesting in the first run's tree) and the self time summed per top-level package.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import _venvs  # noqa: E402


def parse_importtime(text: str) -> list[tuple[str, int, int, int]]:
    """(module, depth, self µs, cumulative µs) per `import time:` line, in the order printed."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line.split(":", 1)[1].split("|")
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append((name.strip(), depth, int(self_us), int(cumulative_us)))
    return rows


def run_once(python: Path, module: str, path: str, extra_env: dict[str, str]) -> list[tuple[str, int, int, int]]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "LANG": "C.UTF-8", **extra_env}
    # cwd=BENCH: `-c` puts the working directory on sys.path, and the checkout's crhelper must not shadow AWS's
    done = subprocess.run([str(python), "-X", "importtime", "-c", f"import {module}"], env=env, cwd=BENCH,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
        raise SystemExit(f"`import {module}` failed in {python}:\n" + "\n".join(errors[-15:]))
    return parse_importtime(done.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--env", choices=("ours", "aws"), default="ours")
    parser.add_argument("--prefix", default="", help="only list modules whose name starts with this")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="environment for the child, e.g. CRHELPER_STORE=none")
    args = parser.parse_args(argv)
    extra_env = dict(item.split("=", 1) for item in args.set)
    python = _venvs.ensure(_venvs.OURS if args.env == "ours" else _venvs.AWS)
    # AWS crhelper is also `crhelper`: the checkout must not be on its path
    path = f"{REPO}:{REPO / 'samples'}:{BENCH}" if args.env == "ours" else str(BENCH)
    runs = [run_once(python, args.module, path, extra_env) for _ in range(args.runs)]
    best_self: dict[str, int] = {}
    best_cumulative: dict[str, int] = {}
    for rows in runs:
        for name, _depth, self_us, cumulative_us in rows:
            best_self[name] = min(best_self.get(name, self_us), self_us)
            best_cumulative[name] = min(best_cumulative.get(name, cumulative_us), cumulative_us)
    depth_of = {name: depth for name, depth, _, _ in runs[0]}
    print(f"-X importtime of `import {args.module}` in bench/.venvs/{'ours' if args.env == 'ours' else 'aws-crhelper'}, "
          f"minimum over {args.runs} processes (ms)")
    print(f"{'cumulative':>10} {'self':>7}  module")
    listed = [n for n in best_cumulative if n.startswith(args.prefix)]
    for name in sorted(listed, key=lambda n: best_cumulative[n], reverse=True)[: args.top]:
        print(f"{best_cumulative[name] / 1000:10.1f} {best_self[name] / 1000:7.1f}  {'  ' * depth_of.get(name, 0)}{name}")
    per_package: collections.Counter[str] = collections.Counter()
    for name, value in best_self.items():
        per_package[name.split(".")[0]] += value
    print("\nself time per top-level package (sum of per-module minima, ms):")
    for package, value in per_package.most_common(12):
        print(f"{value / 1000:10.1f}  {package}")
    print(f"{sum(per_package.values()) / 1000:10.1f}  (all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
