"""Packaged cold start (issue 15): one Create from a read-only code folder, as Function Compute runs it.

    python bench/package_coldstart.py [--pairs N] [--runtime python3.10 --runtime python3.12] [--trust system|bench-ca]

Contenders, per runtime, each a zip unpacked into a folder made read-only (`chmod -R a-w`), started
by the target interpreter of an empty venv with PYTHONDONTWRITEBYTECODE=1, a fresh process per
Create (`_package_child.py`: code folder on sys.path and as working directory, `index.handler`
called with the event as JSON bytes and an FC-shaped context):
- ours: `crhelper package samples/greeting.py:provider` (pydantic model), bytecode for the target;
- ours (dict): the same for bench/_ours_dict.py (no pydantic import);
- ours, no bytecode: `crhelper package --no-bytecode` of samples/greeting.py;
- AWS crhelper 2.0.12 packaged the ordinary way (`_package_builds.build_aws`): the headline peer;
- AWS crhelper + target bytecode: the same zip with everything compiled by the target interpreter
  (unchecked-hash), which its users do not do: what bytecode alone would give it.
Each delivers its response over HTTPS (AWS crhelper only speaks HTTPS) to a loopback server whose
CA every contender trusts the same way (cold_warm.py's `_trust`); every delivery is checked: one
SUCCESS with the expected physical id and data per Create. Rounds run every contender once in a
rotating order; the ratios are per round (ours / AWS of the same round), median with min and max,
for wall time (spawn to exit) and CPU time (user + system of the child). "import index ms" is the
import of the entry module alone (ours loads the provider lazily, at the first call: that is in
"handler ms", which ends when the handler returns). After the runs each code
folder must hold the same __pycache__ files as before (nothing was compiled into it).
Exit 0 when done, 2 when a contender failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import _package_builds as builds  # noqa: E402
from _capture import CaptureServer  # noqa: E402
from _events import delivery_problem, ros_create  # noqa: E402
from _stats import median, p90, ratio, table  # noqa: E402
from cold_warm import BenchError, load_line, machine_line, make_tls, rotate, spawn  # noqa: E402

#: What FC sets in every function's environment.
FC_ENV = {"FC_FUNCTION_NAME": "greeting", "FC_SERVICE_NAME": "bench", "FC_REGION": "cn-hangzhou",
          "FC_FUNC_CODE_PATH": "/code"}
#: (ours, peer) ratios reported; the first is the issue's headline.
COMPARISONS = (("ours", "aws"), ("ours-dict", "aws"), ("ours-nobc", "aws"), ("ours", "ours-nobc"), ("ours", "aws-bc"),
               ("aws-bc", "aws"))


@dataclass
class Samples:
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    to_response_s: list[float] = field(default_factory=list)
    import_s: list[float] = field(default_factory=list)
    handle_s: list[float] = field(default_factory=list)
    rss_kib: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    to_response_s: float
    import_s: float
    handle_s: float
    rss_kib: int


class Runner:
    """Starts one contender's cold process against the capture server and checks its one delivery."""

    def __init__(self, server: CaptureServer, work: Path, python: Path, trust_env: dict[str, str]) -> None:
        self.server, self.work, self.python, self.trust_env = server, work, python, trust_env
        self.count = 0

    def run(self, package: builds.Package, timeout: float = 60.0) -> Run:
        self.count += 1
        event = ros_create(self.server.base_url)
        spec_path = self.work / f"spec-{self.count}.json"
        result_path = self.work / f"result-{self.count}.json"
        spec_path.write_text(json.dumps({"code_dir": str(package.code_dir), "handler": "index.handler", "event": event}))
        home = self.work / f"home-{self.count}"
        home.mkdir()
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "CRHELPER_HOME": str(home / ".crhelper"),
               **FC_ENV, **self.trust_env, **package.env}
        log = self.work / f"{package.key}.log"
        started, wall, cpu, code = spawn(self.python, ["-s", str(BENCH / "_package_child.py"), str(spec_path),
                                                       str(result_path)], env, log, timeout)
        if code != 0:
            raise BenchError(f"{package.label}: child exited {code}\n{tail(log)}")
        result = json.loads(result_path.read_text())
        deliveries = self.server.take([event["RequestId"]])[event["RequestId"]]
        if len(deliveries) != 1:
            raise BenchError(f"{package.label}: {len(deliveries)} deliveries\n{tail(log)}")
        problem = delivery_problem(deliveries[0].method, deliveries[0].body)
        if problem:
            raise BenchError(f"{package.label}: wrong response: {problem}\n{tail(log)}")
        for path in (spec_path, result_path):
            path.unlink()
        shutil.rmtree(home, ignore_errors=True)
        return Run(wall, cpu, deliveries[0].at - started, float(result["import_s"]), float(result["handle_s"]),
                   int(result["peak_rss_kib"]))


def tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no output)"


def measure(runner: Runner, packages: dict[str, builds.Package], rounds: int) -> tuple[dict[str, Samples], list[dict[str, Run]]]:
    samples = {key: Samples() for key in packages}
    for package in packages.values():  # untimed: the page cache holds every contender's files alike
        runner.run(package)
    by_round = []
    for index in range(rounds):
        runs = {}
        for key in rotate(list(packages), index):
            found = runner.run(packages[key])
            runs[key] = found
            s = samples[key]
            s.wall_s.append(found.wall_s)
            s.cpu_s.append(found.cpu_s)
            s.to_response_s.append(found.to_response_s)
            s.import_s.append(found.import_s)
            s.handle_s.append(found.handle_s)
            s.rss_kib.append(found.rss_kib)
        by_round.append(runs)
    return samples, by_round


def report(runtime_name: str, packages: dict[str, builds.Package], samples: dict[str, Samples],
           by_round: list[dict[str, Run]]) -> tuple[str, dict[str, object]]:
    rows = []
    for key, package in packages.items():
        s = samples[key]
        rows.append([package.label, f"{package.zip_path.stat().st_size:,}", f"{package.files}", f"{package.pyc_files}",
                     f"{len(s.wall_s)}", f"{median(s.wall_s) * 1000:.0f}", f"{p90(s.wall_s) * 1000:.0f}",
                     f"{median(s.cpu_s) * 1000:.0f}", f"{median(s.to_response_s) * 1000:.0f}",
                     f"{median(s.import_s) * 1000:.0f}", f"{median(s.handle_s) * 1000:.0f}",
                     f"{median([w - r for w, r in zip(s.wall_s, s.to_response_s)]) * 1000:.0f}",
                     f"{median(s.rss_kib) / 1024:.1f}"])
    absolute = table([f"{runtime_name}: one Create, cold", "zip bytes", "files", ".pyc", "runs", "wall ms", "p90",
                      "CPU ms", "to resp ms", "import index ms", "handler ms", "resp->exit ms", "RSS MiB"], rows)
    pair_rows = []
    figures: dict[str, object] = {}
    for ours, peer in COMPARISONS:
        if ours not in packages or peer not in packages:
            continue
        wall = [ratio(r[ours].wall_s, r[peer].wall_s) for r in by_round]
        cpu = [ratio(r[ours].cpu_s, r[peer].cpu_s) for r in by_round]
        to_resp = [ratio(r[ours].to_response_s, r[peer].to_response_s) for r in by_round]
        name = f"{packages[ours].label} / {packages[peer].label}"
        pair_rows.append([name, f"{len(wall)}", f"{median(wall):.3f}", f"{min(wall):.3f}", f"{max(wall):.3f}",
                          f"{median(cpu):.3f}", f"{min(cpu):.3f}", f"{max(cpu):.3f}", f"{median(to_resp):.3f}"])
        figures[f"{ours}/{peer}"] = {"wall": [median(wall), min(wall), max(wall)], "cpu": [median(cpu), min(cpu), max(cpu)],
                                     "to_response": median(to_resp)}
    ratios = table([f"{runtime_name}: ours / peer, per round", "rounds", "wall median", "min", "max", "CPU median",
                    "min", "max", "to resp"], pair_rows)
    return f"{absolute}\n\n{ratios}", figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=20, help="rounds (each contender once per round; default 20)")
    parser.add_argument("--runtime", action="append", choices=("python3.10", "python3.12"), default=None,
                        help="FC runtime(s) to bench (default: both whose interpreter is on this machine)")
    parser.add_argument("--trust", choices=("system", "bench-ca"), default="system",
                        help="how every contender trusts the bench CA (see cold_warm.py)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the ratios as JSON")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from crhelper.local.processes import find_python

    out = print
    out(machine_line())
    runtimes = args.runtime or ["python3.10", "python3.12"]
    work = Path(tempfile.mkdtemp(prefix="package-coldstart-"))
    figures: dict[str, object] = {}
    try:
        server_context, trust = make_tls(work, args.trust)
        out(f"trust: {trust.mode}")
        try:
            with CaptureServer(server_context) as server:
                for runtime_name in runtimes:
                    version = runtime_name.removeprefix("python")
                    interpreter = find_python(version)
                    if interpreter is None:
                        out(f"{runtime_name}: no Python {version} on this machine (PATH, pyenv): skipped")
                        continue
                    rt_work = work / runtime_name
                    rt_work.mkdir()
                    started = time.perf_counter()
                    packages = {
                        "ours": builds.build_ours("ours", "ours (pydantic), crhelper package",
                                                  f"{REPO / 'samples' / 'greeting.py'}:provider", runtime_name, rt_work, True),
                        "ours-dict": builds.build_ours("ours-dict", "ours (dict), crhelper package",
                                                       f"{BENCH / '_ours_dict.py'}:provider", runtime_name, rt_work, True),
                        "ours-nobc": builds.build_ours("ours-nobc", "ours (pydantic), --no-bytecode",
                                                       f"{REPO / 'samples' / 'greeting.py'}:provider", runtime_name, rt_work,
                                                       False),
                        "aws": builds.build_aws("aws", "AWS crhelper 2.0.12, pip --target zip", rt_work),
                        "aws-bc": builds.build_aws("aws-bc", "AWS crhelper 2.0.12, + target bytecode", rt_work,
                                                   compile_with=interpreter),
                    }
                    before = {k: builds.cache_dirs(p.code_dir) for k, p in packages.items()}
                    python = builds.clean_venv(version, interpreter)
                    out(f"{runtime_name}: {interpreter} (empty venv {python}); built in "
                        f"{time.perf_counter() - started:.1f} s; {load_line()}")
                    runner = Runner(server, rt_work, python, trust.env)
                    samples, by_round = measure(runner, packages, args.pairs)
                    for key, package in packages.items():
                        if builds.cache_dirs(package.code_dir) != before[key]:
                            raise BenchError(f"{package.label}: the code folder's __pycache__ changed during the runs")
                    text, found = report(runtime_name, packages, samples, by_round)
                    figures[runtime_name] = found
                    out(text)
                    out(f"{runtime_name}: after the runs, {load_line()}; every code folder's __pycache__ unchanged")
                    out("")
        finally:
            trust.close()
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 2
    finally:
        for folder in work.glob("*/*"):
            if folder.is_dir():
                builds.make_writable(folder)
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    out(f"uptime: {os.popen('uptime').read().strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
