"""Cold start and warm throughput: crhelper for ROS vs AWS crhelper 2.0.12 vs the leanest stdlib handler (issues 2, 18).

    python bench/cold_warm.py [--pairs N] [--warm-requests N] [--warm-rounds N] [--warm-cap S] [--trust system|bench-ca]

Every contender answers the same Create of Custom::Greeting and really delivers its response over
HTTPS to a loopback server whose certificate comes from a throw-away CA that the bench adds to the
system trust for its own children (`_trust.py`): every contender verifies TLS with its default,
production trust and no CA setting of its own. Each delivery is checked after the run.
Cold: fresh processes in interleaved pairs (ours, peer, ours, peer ...), at least --pairs per
comparison; the targets are judged on the median of the per-pair ratios (min and max shown), the
absolute medians are printed beside them. Warm: one process per contender and round answering
--warm-requests distinct requests; median req/s of the rounds.
Each contender runs from its own virtual environment under bench/.venvs/ (created on first use,
bytecode cached by an untimed first run). Exit status: 0 when every target is met, 1 when one is
missed, 2 when a contender failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import _trust  # noqa: E402
import _venvs  # noqa: E402
from _capture import CaptureServer  # noqa: E402
from _events import cfn_create, delivery_problem, ros_create  # noqa: E402
from _stats import Verdict, median, p90, ratio, table  # noqa: E402

WARMUP_REQUESTS = 5
MIB = 1024.0


class BenchError(RuntimeError):
    """A contender did not do what the bench needs (crashed, hung, or did not deliver exactly once)."""


#: What Function Compute sets in a function's environment; "FC ctx" contenders run as they would there.
FC_ENV = {"FC_FUNCTION_NAME": "greeting", "FC_SERVICE_NAME": "bench", "FC_REGION": "cn-hangzhou"}


@dataclass(frozen=True)
class Contender:
    """One way of answering the request: which interpreter, which handler, which runtime context."""

    key: str
    label: str
    venv: _venvs.VenvSpec
    handler: str  # module:attribute
    module_dir: Path
    shape: str  # "ros" or "cfn": the event shape it expects
    context: str  # "fc", "lambda" or "none"
    env: dict[str, str] = field(default_factory=dict)

    def event(self, base_url: str) -> dict[str, Any]:
        return cfn_create(base_url) if self.shape == "cfn" else ros_create(base_url)


def build_contenders(trust_env: dict[str, str], ours_extra: dict[str, str] | None = None) -> dict[str, Contender]:
    """Every contender as its users deploy it, with no CA setting of its own: they all trust the system
    store (which the bench extends with its CA, `_trust.py`), or, failing that, `trust_env` for all."""
    ours_env = {"PYTHONPATH": str(REPO), **trust_env, **(ours_extra or {})}
    aws_env = {
        **trust_env,
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "AKIABENCHFAKE000000",
        "AWS_SECRET_ACCESS_KEY": "bench-fake-secret",  # not a credential: boto3 clients are built, never used
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_LAMBDA_FUNCTION_NAME": "bench-greeting",
    }
    samples = REPO / "samples"
    fc_ours = {**FC_ENV, **ours_env}
    entries = [
        Contender("ours", "ours (pydantic), FC ctx", _venvs.OURS, "greeting:handler", samples, "ros", "fc", fc_ours),
        Contender("ours-noctx", "ours (pydantic), no ctx", _venvs.OURS, "greeting:handler", samples, "ros", "none", ours_env),
        Contender("ours-msgspec", "ours (msgspec), FC ctx", _venvs.OURS, "greeting_fast:handler", samples, "ros", "fc", fc_ours),
        Contender("ours-dict", "ours (dict), FC ctx", _venvs.OURS, "_ours_dict:handler", BENCH, "ros", "fc", fc_ours),
        Contender("ours-dict-noctx", "ours (dict), no ctx", _venvs.OURS, "_ours_dict:handler", BENCH, "ros", "none", ours_env),
        Contender("aws", "AWS crhelper 2.0.12", _venvs.AWS, "_aws_greeting:handler", BENCH, "cfn", "lambda", aws_env),
        Contender("bare", "bare stdlib", _venvs.OURS, "_bare:handler", BENCH, "ros", "none", dict(trust_env)),
        Contender("bare-pydantic", "bare + pydantic model", _venvs.OURS, "_bare_pydantic:handler", BENCH, "ros", "none",
                  dict(trust_env)),
    ]
    return {c.key: c for c in entries}


@dataclass(frozen=True)
class Comparison:
    """Ours against one peer, timed as interleaved pairs; `limit` is the issue's target (None: reported only)."""

    ours: str
    peer: str
    limit: float | None


#: Issue 18's cold-start targets, and the ratios the README quotes.
COMPARISONS = (
    Comparison("ours", "bare-pydantic", 1.1),
    Comparison("ours-msgspec", "aws", 0.4),
    Comparison("ours-dict", "aws", 0.4),
    Comparison("ours", "aws", None),
    Comparison("ours-dict", "bare", None),
)
WARM = ("ours", "ours-noctx", "ours-msgspec", "ours-dict", "ours-dict-noctx", "aws", "bare")


# --- processes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChildRun:
    wall_s: float
    cpu_s: float
    maxrss_kib: int
    result: dict[str, Any] | None
    first_response_s: float  # from spawn until the server had the first response


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def spawn(python: Path, args: list[str], env: dict[str, str], log: Path, timeout: float) -> tuple[float, float, float, int]:
    """Run a child with stdout+stderr appended to `log`; (perf_counter at spawn, wall seconds from spawn to
    exit, CPU seconds, exit code).

    CPU time (user + system, from wait4) is reported beside wall time because it barely moves when
    other work shares the machine, while wall time does.

    Peak RSS comes from the child's own /proc/self/status (VmHWM): wait4's ru_maxrss would report
    at least this bench's own RSS, which Linux carries into the child across posix_spawn + exec."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    started = time.perf_counter()
    pid = os.posix_spawn(str(python), [str(python), *args], env, file_actions=actions)
    watchdog = threading.Timer(timeout, _kill, (pid,))
    watchdog.start()
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    watchdog.cancel()
    return started, wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


_EMPTY_CODE = (
    "import sys\n"
    "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
    "open(sys.argv[1], 'w').write(hwm)\n"
)


class Runner:
    """Runs contenders' children against one capture server and checks every delivery."""

    def __init__(self, server: CaptureServer, workdir: Path, pythons: dict[str, Path]) -> None:
        self.server = server
        self.workdir = workdir
        self.pythons = pythons
        self._count = 0

    def env_for(self, contender: Contender, home: Path) -> dict[str, str]:
        """A clean environment: no developer-machine CA or proxy variables, and a fresh home per process
        (like a new function instance: empty ~/.aws for boto3, an empty crhelper state store for ours)."""
        base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "CRHELPER_HOME": str(home / ".crhelper"),
                "LANG": "C.UTF-8"}
        return {**base, **contender.env}

    def _log(self, contender: Contender) -> Path:
        return self.workdir / f"{contender.key}.log"

    def run(self, contender: Contender, requests: int, warmup: int, timeout: float, cap_s: float = 0.0) -> ChildRun:
        """Answer `warmup + requests` fresh events in one child (stopping early after `cap_s` seconds of timed
        loop, if set); raise BenchError unless each handled event was delivered exactly once and no other was."""
        self._count += 1
        events = [contender.event(self.server.base_url) for _ in range(warmup + requests)]
        spec = {
            "module_dir": str(contender.module_dir),
            "handler": contender.handler,
            "context": contender.context,
            "function_timeout": 60,
            "warmup": warmup,
            "max_loop_s": cap_s,
            "events": events,
        }
        spec_path = self.workdir / f"spec-{self._count}.json"
        result_path = self.workdir / f"result-{self._count}.json"
        spec_path.write_text(json.dumps(spec))
        python = self.pythons[contender.venv.name]
        home = self.workdir / f"home-{self._count}"
        home.mkdir()
        started, wall, cpu, code = spawn(python, [str(BENCH / "_child.py"), str(spec_path), str(result_path)],
                                         self.env_for(contender, home), self._log(contender), timeout)
        if code != 0:
            raise BenchError(f"{contender.label}: child exited {code}\n{self.log_tail(contender)}")
        result = json.loads(result_path.read_text())
        handled = warmup + int(result["requests"])
        arrivals = self.verify(contender, [e["RequestId"] for e in events[:handled]], [e["RequestId"] for e in events[handled:]])
        spec_path.unlink()
        result_path.unlink()
        shutil.rmtree(home, ignore_errors=True)
        return ChildRun(wall, cpu, int(result["peak_rss_kib"]), result, min(arrivals) - started)

    def verify(self, contender: Contender, request_ids: list[str], not_handled: list[str]) -> list[float]:
        """Check every delivery; return when each arrived."""
        arrivals = []
        stray = [rid for rid, deliveries in self.server.take(not_handled).items() if deliveries]
        if stray:
            raise BenchError(f"{contender.label}: responses for {len(stray)} requests it was never given")
        for request_id, deliveries in self.server.take(request_ids).items():
            if len(deliveries) != 1:
                raise BenchError(f"{contender.label}: {len(deliveries)} deliveries for {request_id}\n{self.log_tail(contender)}")
            problem = delivery_problem(deliveries[0].method, deliveries[0].body)
            if problem:
                raise BenchError(f"{contender.label}: wrong response for {request_id}: {problem}")
            arrivals.append(deliveries[0].at)
        return arrivals

    def empty_interpreter(self, timeout: float) -> tuple[float, int]:
        """The floor under every row: starting the venv's interpreter and reading its own VmHWM."""
        result_path = self.workdir / "empty.rss"
        _started, wall, _cpu, code = spawn(self.pythons[_venvs.OURS.name], ["-c", _EMPTY_CODE, str(result_path)],
                                           {"PATH": "/usr/bin:/bin", "HOME": str(self.workdir)}, self.workdir / "empty.log",
                                           timeout)
        if code != 0:
            raise BenchError("the empty interpreter failed to start")
        return wall, int(result_path.read_text())

    def log_tail(self, contender: Contender, lines: int = 25) -> str:
        path = self._log(contender)
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no output)"


# --- TLS -------------------------------------------------------------------------------------------


def make_tls(workdir: Path, trust: str) -> tuple[ssl.SSLContext, _trust.Trust]:
    """A throw-away CA and a 127.0.0.1 server certificate, the CA put into every contender's trust
    (`_trust.install`: the system store itself where possible). Call before any thread starts."""
    import trustme

    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(server_context)
    return server_context, _trust.install(workdir, ca.cert_pem.bytes(), trust)


# --- measurements --------------------------------------------------------------------------------


@dataclass
class ColdSamples:
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    to_response_s: list[float] = field(default_factory=list)
    rss_kib: list[float] = field(default_factory=list)
    import_s: list[float] = field(default_factory=list)
    handle_s: list[float] = field(default_factory=list)

    def add(self, child: ChildRun) -> None:
        self.wall_s.append(child.wall_s)
        self.cpu_s.append(child.cpu_s)
        self.to_response_s.append(child.first_response_s)
        self.rss_kib.append(child.maxrss_kib)
        self.import_s.append(float((child.result or {}).get("import_s", 0.0)))
        self.handle_s.append(float((child.result or {}).get("loop_s", 0.0)))


@dataclass
class PairRatios:
    """ours / peer of each interleaved pair, for wall time, CPU time and spawn-to-response."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    to_response: list[float] = field(default_factory=list)


def rotate(items: list[Any], by: int) -> list[Any]:
    """Round-robin order that changes every run, so no contender always runs right after another."""
    shift = by % len(items)
    return items[shift:] + items[:shift]


def measure_cold(runner: Runner, contenders: dict[str, Contender], comparisons: tuple[Comparison, ...],
                 pairs: int) -> tuple[dict[str, ColdSamples], dict[Comparison, PairRatios], ColdSamples]:
    """`pairs` pairs per comparison, each pair ours then its peer back to back (so the sequence is ours,
    peer, ours, peer ...), the comparisons taken in turn so that load drift spreads over all of them."""
    keys = sorted({k for c in comparisons for k in (c.ours, c.peer)})
    samples = {key: ColdSamples() for key in keys}
    ratios = {c: PairRatios() for c in comparisons}
    empty = ColdSamples()
    for key in keys:  # untimed: compiles .pyc files and warms the page cache for everyone
        runner.run(contenders[key], 1, 0, timeout=60)
    runner.empty_interpreter(timeout=30)
    for _ in range(pairs):
        for comparison in comparisons:
            ours = runner.run(contenders[comparison.ours], 1, 0, timeout=60)
            peer = runner.run(contenders[comparison.peer], 1, 0, timeout=60)
            samples[comparison.ours].add(ours)
            samples[comparison.peer].add(peer)
            found = ratios[comparison]
            found.wall.append(ratio(ours.wall_s, peer.wall_s))
            found.cpu.append(ratio(ours.cpu_s, peer.cpu_s))
            found.to_response.append(ratio(ours.first_response_s, peer.first_response_s))
        wall, rss = runner.empty_interpreter(timeout=30)
        empty.wall_s.append(wall)
        empty.rss_kib.append(rss)
    return samples, ratios, empty


@dataclass
class WarmSamples:
    rates: list[float] = field(default_factory=list)
    handled: list[int] = field(default_factory=list)
    cpu_per_request_s: list[float] = field(default_factory=list)


def measure_warm(runner: Runner, contenders: list[Contender], requests: int, rounds: int, cap_s: float) -> dict[str, WarmSamples]:
    samples = {c.key: WarmSamples() for c in contenders}
    for index in range(rounds):
        for contender in rotate(contenders, index):
            child = runner.run(contender, requests, WARMUP_REQUESTS, timeout=240, cap_s=cap_s)
            result = child.result or {}
            samples[contender.key].rates.append(result["requests"] / result["loop_s"])
            samples[contender.key].handled.append(int(result["requests"]))
            samples[contender.key].cpu_per_request_s.append(result["loop_cpu_s"] / result["requests"])
    return samples


# --- report ----------------------------------------------------------------------------------------


def cold_report(contenders: dict[str, Contender], samples: dict[str, ColdSamples], empty: ColdSamples) -> str:
    """Absolute medians per contender over every run it took part in (its pairs pooled)."""
    rows = []
    for key, s in samples.items():
        rows.append([
            contenders[key].label, f"{len(s.wall_s)}",
            f"{median(s.wall_s) * 1000:.0f}", f"{p90(s.wall_s) * 1000:.0f}", f"{median(s.cpu_s) * 1000:.0f}",
            f"{median(s.to_response_s) * 1000:.0f}",
            f"{median(s.rss_kib) / MIB:.1f}", f"{p90(s.rss_kib) / MIB:.1f}",
            f"{median(s.import_s) * 1000:.0f}", f"{median(s.handle_s) * 1000:.0f}",
            f"{median([w - i - h for w, i, h in zip(s.wall_s, s.import_s, s.handle_s)]) * 1000:.0f}",
        ])
    rows.append([
        "(empty interpreter: -c pass)", f"{len(empty.wall_s)}", f"{median(empty.wall_s) * 1000:.0f}",
        f"{p90(empty.wall_s) * 1000:.0f}", "-", "-", f"{median(empty.rss_kib) / MIB:.1f}", f"{p90(empty.rss_kib) / MIB:.1f}",
        "-", "-", "-",
    ])
    headers = ["cold start (spawn -> exit)", "runs", "wall ms", "p90", "CPU ms", "to resp ms", "RSS MiB", "p90",
               "import ms", "1st req ms", "rest ms"]
    return table(headers, rows)


def pairs_report(contenders: dict[str, Contender], ratios: dict[Comparison, PairRatios], samples: dict[str, ColdSamples]) -> str:
    """Medians of the per-pair ratios, with min and max: what the targets are judged on."""
    rows = []
    for comparison, found in ratios.items():
        rows.append([
            f"{contenders[comparison.ours].label} / {contenders[comparison.peer].label}", f"{len(found.wall)}",
            f"{median(found.wall):.3f}", f"{min(found.wall):.3f}", f"{max(found.wall):.3f}",
            f"{median(found.cpu):.3f}", f"{min(found.cpu):.3f}", f"{max(found.cpu):.3f}", f"{median(found.to_response):.3f}",
            f"{ratio(median(samples[comparison.ours].rss_kib), median(samples[comparison.peer].rss_kib)):.2f}",
            "-" if comparison.limit is None else f"<= {comparison.limit:.2f}",
        ])
    headers = ["cold start, ours / peer (per pair)", "pairs", "wall median", "min", "max", "CPU median", "min", "max",
               "to resp", "RSS", "target"]
    return table(headers, rows)


def warm_report(contenders: list[Contender], warm: dict[str, WarmSamples]) -> str:
    bare, aws = median(warm["bare"].rates), median(warm["aws"].rates)
    bare_cpu = median(warm["bare"].cpu_per_request_s)
    rows = []
    for contender in contenders:
        values = warm[contender.key].rates
        rows.append([
            contender.label, f"{median(values):.0f}", f"{min(values):.0f}", f"{max(values):.0f}",
            f"{min(warm[contender.key].handled)}", f"{median(warm[contender.key].cpu_per_request_s) * 1000:.2f}",
            f"{ratio(median(values), bare):.2f}x", f"{ratio(median(values), aws):.1f}x",
            f"{ratio(bare_cpu, median(warm[contender.key].cpu_per_request_s)):.2f}x",
        ])
    headers = ["warm (one process)", "req/s median", "min", "max", "timed reqs", "CPU ms/req", "vs bare", "vs aws",
               "vs bare (CPU)"]
    return table(headers, rows)


def cold_verdicts(ratios: dict[Comparison, PairRatios], labels: dict[str, str]) -> list[Verdict]:
    """Issue 18's targets on the medians of the per-pair ratios, for wall time and for CPU time: wall time
    is what a cold start costs, CPU time what stays steady while other sessions load these cores; a target
    holds only when both do."""
    found = []
    for comparison, pair in ratios.items():
        if comparison.limit is None:
            continue
        name = f"{labels[comparison.ours]} / {labels[comparison.peer]}"
        found.append(Verdict(f"cold wall {name}", median(pair.wall), comparison.limit, False,
                             note=f"pairs {len(pair.wall)}, min {min(pair.wall):.2f}, max {max(pair.wall):.2f}; "
                                  f"spawn-to-response {median(pair.to_response):.2f}"))
        found.append(Verdict(f"cold CPU  {name}", median(pair.cpu), comparison.limit, False,
                             note=f"min {min(pair.cpu):.2f}, max {max(pair.cpu):.2f}"))
    return found


def warm_verdicts(warm: dict[str, WarmSamples], labels: dict[str, str]) -> list[Verdict]:
    """Issue 2's warm target, on requests/s and on CPU per request (the steadier reading on shared cores)."""
    bare_rate, bare_cpu = median(warm["bare"].rates), median(warm["bare"].cpu_per_request_s)
    found = []
    for key in ("ours", "ours-noctx", "ours-msgspec", "ours-dict", "ours-dict-noctx"):
        found.append(Verdict(f"warm {labels[key]} / bare, req/s", ratio(median(warm[key].rates), bare_rate), 0.8, True))
        found.append(Verdict(f"warm {labels[key]} / bare, CPU per request", ratio(bare_cpu, median(warm[key].cpu_per_request_s)),
                             0.8, True))
    return found


def machine_line() -> str:
    return (f"machine: nproc={os.cpu_count()}, Python {platform.python_version()} ({platform.python_implementation()}), "
            f"{platform.system()} {platform.release()}, {platform.machine()}; "
            f"date {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")


def load_line() -> str:
    """Other sessions share these cores: every run notes the load average it ran under."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20, help="interleaved cold-start pairs per comparison (default 20)")
    parser.add_argument("--warm-requests", type=int, default=500, help="timed requests per warm process (default 500)")
    parser.add_argument("--warm-rounds", type=int, default=3, help="warm processes per contender (default 3; 0 skips warm)")
    parser.add_argument("--warm-cap", type=float, default=8.0, metavar="SECONDS",
                        help="stop a warm process's timed loop after this long even if requests remain "
                             "(keeps the slow contender from dominating the run time; 0 = no cap; default 8)")
    parser.add_argument("--trust", choices=("system", "bench-ca"), default="system",
                        help="what every contender trusts: the system CA store plus the bench CA, as in production "
                             "(default), or the bench CA alone (isolates framework overhead from CA-store loading)")
    parser.add_argument("--ours-env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment for our contenders only, to try a setting's effect "
                             "(e.g. CRHELPER_STORE=none); repeatable")
    args = parser.parse_args(argv)
    if any("=" not in item for item in args.ours_env):
        parser.error("--ours-env takes KEY=VALUE")
    if args.pairs < 1 or args.warm_requests < 1 or args.warm_rounds < 0:
        parser.error("--pairs and --warm-requests must be at least 1, --warm-rounds at least 0")
    return args


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    pythons = {spec.name: _venvs.ensure(spec, out) for spec in (_venvs.OURS, _venvs.AWS)}
    out(f"$ python bench/cold_warm.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip())
    out(machine_line() + "; " + load_line())
    extra = f" ours-env={','.join(args.ours_env)}" if args.ours_env else ""
    out(f"pairs={args.pairs} warm-requests={args.warm_requests} warm-rounds={args.warm_rounds}{extra}; "
        "every response delivered over HTTPS to 127.0.0.1 and checked")
    with tempfile.TemporaryDirectory(prefix="crhelper-bench-") as tmp:
        workdir = Path(tmp)
        server_context, trust = make_tls(workdir, args.trust)
        out(f"trust: {trust.mode}")
        try:
            contenders = build_contenders(trust.env, dict(item.split("=", 1) for item in args.ours_env))
            labels = {key: c.label for key, c in contenders.items()}
            with CaptureServer(server_context) as server:
                runner = Runner(server, workdir, pythons)
                try:
                    samples, ratios, empty = measure_cold(runner, contenders, COMPARISONS, args.pairs)
                    out("")
                    out(cold_report(contenders, samples, empty))
                    out("")
                    out(pairs_report(contenders, ratios, samples))
                    results = cold_verdicts(ratios, labels)
                    if args.warm_rounds:
                        warm_list = [contenders[k] for k in WARM]
                        warm = measure_warm(runner, warm_list, args.warm_requests, args.warm_rounds, args.warm_cap)
                        out("")
                        out(warm_report(warm_list, warm))
                        results += warm_verdicts(warm, labels)
                except BenchError as exc:
                    out(f"ERROR: {exc}")
                    return 2
        finally:
            trust.close()
    out("")
    for verdict in results:
        out(verdict.line())
    out(f"\n{load_line()}; total bench time {time.monotonic() - began:.0f} s")
    return 0 if all(v.passed for v in results) else 1


if __name__ == "__main__":
    sys.exit(main())
