"""Bounded chaos run: ROS requests through three real delivery paths with faults injected at random.

    python bench/chaos.py --requests 300 --seed 1
    python bench/chaos.py --requests 60 --paths serve --seed 7 --json /tmp/chaos.json

Paths (all on loopback, all real processes):

* ``fc``: the local Function Compute endpoint (``crhelper.local.fc_server``) invoked asynchronously
  with the real ``fc2`` SDK, as the stack emulator does; every invocation runs in a fresh worker
  process; faults: the worker SIGKILLed mid-handler on its first attempt (the endpoint's own
  kill_provider injection, ``crhelper.emulator.delivery_fc_handler``) so that FC's async retry must
  answer, and duplicate async invocations.
* ``worker``: ``crhelper worker`` subprocesses long-polling the local MNS endpoint
  (``crhelper.local.mns_server``) through ``aliyun-mns-sdk``; faults: duplicate messages, the worker
  SIGKILLed at random moments (while handlers run) and restarted.
* ``serve``: ``crhelper serve`` subprocesses receiving POSTs as ROS sends them for ``web:`` tokens;
  faults: duplicate POSTs, serve SIGKILLed and restarted (POSTs refused meanwhile are retried, as
  ROS retries).

On every path: ResponseURLs that trickle their reply one byte a second (a short trickle that completes
within an attempt's budget, and a long one on the first attempt that the framework must cut and
retry), that answer 5xx for the first N tries, that are slow, that refuse connections throughout (a
closed port); a store locked by another process (``BEGIN EXCLUSIVE`` on the shared sqlite file for a
few seconds at a time); oversize requests (20 KB of properties), handlers returning > 4 KB Data,
malformed requests (bad JSON, missing fields, deeply nested JSON).

The provider is a ledger (written to a temp dir, loaded by path): every create and delete appends a
line (op, id, pid, time) to an append-only file. Each resource goes through a stack life: a Create;
if it is answered FAILED, the rollback Delete with the PhysicalResourceId the FAILED carried; if it
is answered SUCCESS, a Delete with its id at the end; if it could not be answered (closed port), the
rollback Delete without an id, as ROS sends after a Create timed out. Afterwards every id created
and not deleted is a leak.

Counted per path and in total: requests; answered exactly once; lost (no accepted answer although the
ResponseURL accepts); undeliverable (the ResponseURL refused throughout; the framework must have
logged it); duplicated (more than one accepted answer for one request, or two different bodies);
leaked; and the worst time to answer against the request's deadline (the function timeout on the
FC path, the type's deadline for long-running ones, a per-request deadline elsewhere). The plan
(which request gets which fault) is deterministic for a seed; process timing is not.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from crhelper.testing import ResponseServer, make_event  # noqa: E402

#: Timings of the run (settings, so the run is short).
FC_TIMEOUT = 10.0          # function timeout on the FC path: the deadline there
REQUEST_DEADLINE = 20.0    # per-request deadline on the worker and serve paths (a ROS Timeout)
LONG_DEADLINE = 30.0       # the ledger type's deadline (set_deadline): long-running requests on all paths
STEP_LEASE = 3.0           # CRHELPER_STEP_LEASE
VISIBILITY = 3             # worker --visibility-timeout
KILL_AFTER = (0.4, 1.2)    # FC kill variants: seconds into the first attempt
STORE_LOCK_SECONDS = (2.0, 4.0)
FAILED_MARKER = "crhelper:CREATE_FAILED"

DELIVERY_ENV = {
    "CRHELPER_CONNECT_TIMEOUT": "1",
    "CRHELPER_READ_TIMEOUT": "4",       # one attempt's budget: 5 s, whatever the peer trickles
    "CRHELPER_RESPONSE_ATTEMPTS": "6",
    "CRHELPER_BACKOFF_BASE": "0.2",
    "CRHELPER_BACKOFF_CAP": "1.0",
    "CRHELPER_STEP_LEASE": str(STEP_LEASE),
    "CRHELPER_LOG_LEVEL": "INFO",
}

LEDGER_PROVIDER = textwrap.dedent('''
    """Chaos ledger provider: every create and delete is appended to CHAOS_LEDGER."""
    import json
    import os
    import time

    from crhelper import Failure, InProgress, Provider, Result

    provider = Provider()
    provider.set_deadline("Custom::Ledger", float(os.environ.get("CHAOS_LONG_DEADLINE", "30")))
    LEDGER = os.environ["CHAOS_LEDGER"]


    def _record(op, physical_id, request):
        line = json.dumps({"op": op, "id": physical_id, "pid": os.getpid(), "t": time.time(),
                           "stack": request.stack_id, "request": request.request_id}) + "\\n"
        fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


    @provider.create("Custom::Ledger")
    def create(props: dict, request):
        mode = props.get("Mode", "ok")
        physical_id = "led-" + props["Name"]
        if mode == "fail":
            raise Failure("ledger: this resource is configured to fail")
        if mode == "long":
            step = (request.state or 0) + 1
            if step < int(props.get("Polls", 3)):
                return InProgress(state=step, delay=float(props.get("Delay", 1)))
        _record("create", physical_id, request)
        time.sleep(float(props.get("Sleep", 0)))
        if mode == "baddata":
            return Result(physical_id=physical_id, data={"Blob": "x" * 6000})
        return Result(physical_id=physical_id, data={"Name": props["Name"]})


    @provider.delete("Custom::Ledger")
    def delete(props: dict, request):
        time.sleep(float(props.get("DeleteSleep", 0)))
        _record("delete", request.physical_resource_id, request)
''')

STORE_LOCKER = textwrap.dedent('''
    import sqlite3, sys, time
    c = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
    c.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    c.execute("COMMIT")
''')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------------
# ResponseURL servers of our own: trickling and closed
class TrickleServer:
    """Answers 200 one byte a second: `short` trickles 3 bytes (done within an attempt's budget);
    `long` trickles 40 bytes on the first attempt (the framework must cut it and retry), normal after.
    A reply counts as accepted once its last byte was written."""

    REPLY = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
             b"Connection: close\r\n\r\n{}")

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self.lock = threading.Lock()
        self.plans: dict[str, str] = {}
        self.attempts: dict[str, int] = defaultdict(int)
        self.received: dict[str, list[dict[str, Any] | None]] = defaultdict(list)
        self.accepted: dict[str, list[tuple[float, dict[str, Any] | None]]] = defaultdict(list)
        self.cut: dict[str, int] = defaultdict(int)
        self._stop = False
        threading.Thread(target=self._accept, daemon=True, name="trickle").start()

    def new_urls(self, mode: str) -> tuple[str, str, str]:
        token = uuid.uuid4().hex
        with self.lock:
            self.plans[token] = mode
        base = f"http://127.0.0.1:{self.port}/ros"
        return token, f"{base}/public/{token}?Signature=x", f"{base}/intranet/{token}?Signature=x"

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        token = "?"
        try:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                body += chunk
            path = lines[0].split(" ")[1]
            token = path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
            with self.lock:
                mode = self.plans.get(token, "short")
                self.attempts[token] += 1
                attempt = self.attempts[token]
                self.received[token].append(parsed)
            slow = 3 if mode == "short" else (40 if attempt == 1 else 0)
            for index in range(slow):
                conn.sendall(self.REPLY[index:index + 1])
                time.sleep(1.0)
            if slow:
                # A client that gave up (the framework's watchdog shuts the socket down) or died has
                # sent FIN by now; a reply written after that would be counted though nobody read it.
                readable, _, _ = select.select([conn], [], [], 0)
                if readable and conn.recv(1, socket.MSG_PEEK) == b"":
                    raise ConnectionResetError("peer closed before the reply was complete")
            conn.sendall(self.REPLY[slow:])
            with self.lock:
                self.accepted[token].append((time.time(), parsed))
        except OSError:
            with self.lock:
                self.cut[token] += 1
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop = True
        self._sock.close()


# ---------------------------------------------------------------------------------------------------
@dataclass
class Req:
    n: int
    path: str
    kind: str                      # create | delete | rollback | malformed
    faults: list[str]
    event: dict[str, Any]
    body: bytes
    sink: str                      # rs | trickle | closed | none
    token: str | None
    deadline: float
    life: "Life | None" = None
    sent_at: float | None = None
    inband: list[int] = field(default_factory=list)   # serve: HTTP statuses of the accepted POSTs
    message_ids: list[str] = field(default_factory=list)
    fc_ids: list[str] = field(default_factory=list)
    done_sending: threading.Event = field(default_factory=threading.Event)

    @property
    def request_id(self) -> str:
        return str(self.event.get("RequestId", ""))


@dataclass
class Life:
    stack_id: str
    path: str
    name: str
    props: dict[str, Any]
    requests: list[Req] = field(default_factory=list)
    physical_id: str | None = None
    finished: bool = False


class Chaos:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
        self.tmp = Path(tempfile.mkdtemp(prefix="crhelper-chaos-"))
        self.ledger = self.tmp / "ledger.log"
        self.ledger.touch()
        self.store_path = self.tmp / "store.sqlite"
        self.provider_file = self.tmp / "ledger.py"
        self.provider_file.write_text(LEDGER_PROVIDER)
        self.spec = f"{self.provider_file}:provider"
        self.env = {**os.environ, **DELIVERY_ENV,
                    "CRHELPER_STORE": f"sqlite:///{self.store_path}",
                    "CRHELPER_HOME": str(self.tmp / "home"),
                    "CHAOS_LEDGER": str(self.ledger),
                    "CHAOS_LONG_DEADLINE": str(LONG_DEADLINE),
                    "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.rs = ResponseServer().start()
        self.trickle = TrickleServer()
        self.closed_port = free_port()  # bound once, closed: nothing listens there
        self.requests: list[Req] = []
        self.lives: list[Life] = []
        self.lock = threading.Lock()
        self.stop_chaos = threading.Event()
        self.events: list[tuple[float, str]] = []   # kills, restarts, store locks
        self.lock_windows: list[tuple[float, float]] = []
        self.procs: dict[str, subprocess.Popen[bytes] | None] = {}
        self.generation: dict[str, int] = defaultdict(int)
        self.kills: dict[str, int] = defaultdict(int)
        self.t0 = time.time()
        self.counter = 0

    # ----------------------------------------------------------------- infrastructure
    def log_event(self, text: str) -> None:
        with self.lock:
            self.events.append((time.time() - self.t0, text))
        if self.args.verbose:
            print(f"[{time.time() - self.t0:6.1f}s] {text}", file=sys.stderr, flush=True)

    def start_fc(self) -> None:
        from crhelper.local.fc_server import LocalFunctionCompute

        from crhelper.emulator.delivery_fc_handler import KILL_AFTER_ENV, KILL_DIR_ENV, PROVIDER_ENV

        self.fc = LocalFunctionCompute(async_workers=12, async_retry_delay=0.5, max_async_retries=3)
        fn_env = {k: self.env[k] for k in (*DELIVERY_ENV, "CRHELPER_STORE", "CRHELPER_HOME", "CHAOS_LEDGER",
                                           "CHAOS_LONG_DEADLINE")}
        fn_env[PROVIDER_ENV] = self.spec
        handler = "crhelper.emulator.delivery_fc_handler:handler"
        self.fc.register("chaos", "ledger", handler, timeout=FC_TIMEOUT, env=fn_env)
        for index, after in enumerate(KILL_AFTER):
            kill_dir = self.tmp / f"kill{index}"
            kill_dir.mkdir()
            self.fc.register("chaos", f"ledger-kill{index}", handler, timeout=FC_TIMEOUT,
                             env={**fn_env, KILL_DIR_ENV: str(kill_dir), KILL_AFTER_ENV: str(after)})
        self.fc.start()
        self.fc_client = self.fc.client()
        self.fc_lock = threading.Lock()

    def start_mns(self) -> None:
        from crhelper.local.mns_server import LocalMNS
        from mns.queue import QueueMeta

        self.mns = LocalMNS().start()
        # A worker SIGKILLed mid long-poll breaks the pipe of its reply: expected here, not worth a traceback.
        self.mns._server.handle_error = lambda *args: None  # type: ignore[union-attr, method-assign]
        self.queue_name = "chaos-" + uuid.uuid4().hex[:8]
        queue = self.mns.account().get_queue(self.queue_name)
        queue.set_encoding(False)
        queue.create(QueueMeta(vis_timeout=VISIBILITY))
        self.mns_lock = threading.Lock()
        self.mns_queue = queue
        self.env["ALIBABA_CLOUD_ACCESS_KEY_ID"] = self.mns.access_key_id
        self.env["ALIBABA_CLOUD_ACCESS_KEY_SECRET"] = self.mns.access_key_secret
        self.spawn("worker")

    def start_serve(self) -> None:
        self.serve_port = free_port()
        self.serve_url = f"http://127.0.0.1:{self.serve_port}/"
        self.spawn("serve")

    def spawn(self, name: str) -> None:
        self.generation[name] += 1
        out = open(self.tmp / f"{name}-{self.generation[name]}.log", "wb")
        if name == "worker":
            cmd = [sys.executable, "-m", "crhelper.cli.worker", self.spec, "--queue", self.queue_name,
                   "--endpoint", self.mns.endpoint, "--concurrency", "6", "--wait-seconds", "1",
                   "--visibility-timeout", str(VISIBILITY), "--extend-every", "1", "--grace", "3"]
        else:
            cmd = [sys.executable, "-m", "crhelper.cli.serve", self.spec, "--port", str(self.serve_port),
                   "--workers", "8", "--threads", "16", "--grace", "3"]
        proc = subprocess.Popen(cmd, env=self.env, cwd=self.tmp, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        self.procs[name] = proc
        if name == "serve":
            end = time.monotonic() + 15
            while time.monotonic() < end and proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.serve_port), timeout=0.5).close()
                    break
                except OSError:
                    time.sleep(0.05)
        self.log_event(f"{name} started (pid {proc.pid})")

    def killer(self, name: str, rng: random.Random) -> None:
        """SIGKILL the process at random moments (handlers run most of the time) and restart it."""
        while not self.stop_chaos.wait(rng.uniform(*self.args.kill_every)):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            in_flight = [r.n for r in self.requests if r.path == name and r.sent_at and not self.accepted(r)
                         and r.sink in ("rs", "trickle")]
            proc.kill()
            proc.wait()
            self.kills[name] += 1
            self.log_event(f"{name} SIGKILLed (pid {proc.pid}, {len(in_flight)} requests unanswered)")
            with self.lock:
                for r in self.requests:
                    if r.n in in_flight and "killed" not in r.faults:
                        r.faults.append("killed")
            time.sleep(rng.uniform(0.2, 1.0))
            if not self.stop_chaos.is_set():
                self.spawn(name)

    def store_locker(self, rng: random.Random) -> None:
        while not self.stop_chaos.wait(rng.uniform(6.0, 14.0)):
            seconds = rng.uniform(*STORE_LOCK_SECONDS)
            proc = subprocess.Popen([sys.executable, "-c", STORE_LOCKER, str(self.store_path), str(seconds)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != b"locked":
                proc.wait()
                continue
            start = time.time()
            self.log_event(f"store locked (BEGIN EXCLUSIVE) for {seconds:.1f} s")
            proc.wait()
            with self.lock:
                self.lock_windows.append((start, time.time()))

    # ----------------------------------------------------------------- requests
    def next_n(self) -> int:
        with self.lock:
            self.counter += 1
            return self.counter

    def urls_for(self, rng: random.Random, event: dict[str, Any], faults: list[str], allow_closed: bool = True
                 ) -> tuple[str, str | None]:
        roll = rng.random()
        if allow_closed and roll < 0.06:
            faults.append("closed-port")
            url = f"http://127.0.0.1:{self.closed_port}/ros/closed/{uuid.uuid4().hex}?Signature=x"
            event["ResponseURL"] = event["IntranetResponseURL"] = url
            return "closed", None
        if roll < 0.14:
            faults.append("trickle-short")
            token, public, intranet = self.trickle.new_urls("short")
        elif roll < 0.20:
            faults.append("trickle-long")
            token, public, intranet = self.trickle.new_urls("long")
        else:
            options: dict[str, Any] = {}
            if roll < 0.34:
                options["fail_first"] = rng.randint(1, 3)
                options["fail_status"] = rng.choice([500, 502, 503, 429])
                faults.append(f"{options['fail_status']}x{options['fail_first']}")
            elif roll < 0.40:
                options["delay"] = rng.uniform(0.5, 2.0)
                faults.append("slow-url")
            public, intranet = self.rs.new_urls(event, **options)
            token = public.split("?")[0].rsplit("/", 1)[-1]
            event["ResponseURL"], event["IntranetResponseURL"] = public, intranet
            return "rs", token
        event["ResponseURL"], event["IntranetResponseURL"] = public, intranet
        return "trickle", token

    def deadline_for(self, path: str, props: dict[str, Any]) -> float:
        if props.get("Mode") == "long":
            return LONG_DEADLINE
        return FC_TIMEOUT if path == "fc" else REQUEST_DEADLINE

    def make_req(self, rng: random.Random, life: Life, kind: str, request_type: str,
                 physical_id: str | None = None, allow_closed: bool = True) -> Req:
        faults: list[str] = []
        props = dict(life.props)
        event = make_event(request_type, "Custom::Ledger", props, stack_id=life.stack_id,
                           stack_name="chaos", logical_resource_id=f"R{life.name}",
                           physical_resource_id=physical_id)
        if request_type == "Delete" and physical_id is None:
            event.pop("PhysicalResourceId", None)
        sink, token = self.urls_for(rng, event, faults, allow_closed)
        if request_type == "Create" and "Blob" in props:
            faults.append("oversize-request")
        if props.get("Mode") not in (None, "ok") and request_type == "Create":
            faults.append(f"mode-{props['Mode']}")
        req = Req(self.next_n(), life.path, kind, faults, event, json.dumps(event).encode(), sink, token,
                  self.deadline_for(life.path, props) if request_type == "Create" else
                  (FC_TIMEOUT if life.path == "fc" else REQUEST_DEADLINE), life)
        self.delivery_faults(rng, req)
        return req

    def delivery_faults(self, rng: random.Random, req: Req) -> None:
        if rng.random() < 0.15:
            req.faults.append("duplicate")
        if req.path == "fc" and req.kind != "malformed" and rng.random() < 0.2:
            req.faults.append(f"fc-kill{rng.randrange(len(KILL_AFTER))}")

    def malformed(self, rng: random.Random, path: str) -> Req:
        variant = rng.choice(["bad-json", "missing-field", "deep-json", "deep-json"])
        event = make_event("Create", "Custom::Ledger", {"Name": uuid.uuid4().hex[:10]}, stack_name="chaos")
        faults = [variant]
        sink, token = "none", None
        if variant == "bad-json":
            body = b'{"RequestType": "Create", "ResponseURL": ' + os.urandom(8).hex().encode() + b" \xff"
        else:
            sink, token = self.urls_for(rng, event, faults, allow_closed=False)
            if variant == "missing-field":
                missing = rng.choice(["LogicalResourceId", "ResourceType", "RequestType", "StackId"])
                faults.append(f"no-{missing}")
                event.pop(missing)
                body = json.dumps(event).encode()
            else:
                depth = rng.choice([200, 5000, 20000])  # 40 KB at most: within MNS's 64 KB and FC's 128 KB
                faults.append(f"depth-{depth}")
                text = json.dumps(event)
                nested = "[" * depth + "]" * depth
                body = (text[:-1] + ', "ResourceProperties": {"Name": "deep", "Nested": ' + nested + "}}").encode()
        req = Req(self.next_n(), path, "malformed", faults, event, body, sink, token,
                  FC_TIMEOUT if path == "fc" else REQUEST_DEADLINE)
        if rng.random() < 0.15:
            req.faults.append("duplicate")
        return req

    # ----------------------------------------------------------------- sending
    def send(self, req: Req, rng: random.Random) -> None:
        with self.lock:
            self.requests.append(req)
        req.sent_at = time.time()
        copies = 2 if "duplicate" in req.faults else 1
        try:
            for copy in range(copies):
                if copy:
                    time.sleep(rng.uniform(0.0, 1.5))
                try:
                    getattr(self, f"send_{req.path}")(req)
                except Exception as exc:  # noqa: BLE001 - an endpoint refusing the request is an in-band answer
                    status = getattr(exc, "status_code", None) or getattr(exc, "status", None) or 0
                    req.inband.append(int(status) if str(status).isdigit() else 0)
                    req.faults.append(f"send-error:{type(exc).__name__}")
        finally:
            req.done_sending.set()

    def send_fc(self, req: Req) -> None:
        kill = next((f for f in req.faults if f.startswith("fc-kill")), None)
        function = "ledger" if kill is None else "ledger-" + kill[3:]
        with self.fc_lock:
            reply = self.fc_client.invoke_function("chaos", function, payload=req.body,
                                                   headers={"x-fc-invocation-type": "Async"})
        req.fc_ids.append(str(reply.headers.get("x-fc-request-id", "")))

    def send_worker(self, req: Req) -> None:
        from mns.queue import Message

        with self.mns_lock:
            sent = self.mns_queue.send_message(Message(req.body.decode("utf-8", errors="surrogateescape")
                                                       if b"\xff" not in req.body else req.body.decode("latin-1")))
        req.message_ids.append(sent.message_id)

    def send_serve(self, req: Req) -> None:
        """POST as ROS does; a refused connection or a 5xx is retried (serve may be restarting)."""
        import http.client

        end = time.monotonic() + req.deadline
        while time.monotonic() < end:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.serve_port, timeout=10)
                conn.request("POST", "/", body=req.body, headers={"Content-Type": "application/json"})
                status = conn.getresponse().status
                conn.close()
            except OSError:
                time.sleep(0.2)
                continue
            if status >= 500:
                time.sleep(0.3)
                continue
            req.inband.append(status)
            return

    # ----------------------------------------------------------------- answers
    def accepted(self, req: Req) -> list[tuple[float, dict[str, Any] | None]]:
        if req.sink == "rs":
            with self.rs._lock:
                return [(c.received_at, c.body) for c in self.rs.captures if c.token == req.token and c.status == 200]
        if req.sink == "trickle":
            with self.trickle.lock:
                return list(self.trickle.accepted.get(req.token or "", []))
        return []

    def received_bodies(self, req: Req) -> list[Any]:
        if req.sink == "rs":
            with self.rs._lock:
                return [c.body for c in self.rs.captures if c.token == req.token]
        if req.sink == "trickle":
            with self.trickle.lock:
                return list(self.trickle.received.get(req.token or "", []))
        return []

    def wait_answer(self, req: Req, limit: float) -> dict[str, Any] | None:
        end = time.time() + limit
        while time.time() < end:
            got = self.accepted(req)
            if got:
                return got[0][1]
            if req.path == "serve" and req.done_sending.is_set() and req.inband and all(s >= 400 for s in req.inband):
                return None
            time.sleep(0.1)
        return None

    # ----------------------------------------------------------------- stack lives
    def run_life(self, life: Life, seed: int) -> None:
        rng = random.Random(seed)
        create = self.make_req(rng, life, "create", "Create")
        life.requests.append(create)
        self.send(create, rng)
        if create.sink == "closed":
            # No answer can arrive; ROS would time the resource out, then roll back with no id.
            create.done_sending.wait(30)
            time.sleep(8.0)
            physical_id = None
        else:
            body = self.wait_answer(create, create.deadline + 10)
            if body is None:
                physical_id = None
            else:
                physical_id = body.get("PhysicalResourceId")
        kind = "delete" if (physical_id and physical_id != FAILED_MARKER) else "rollback"
        life.props = {k: v for k, v in life.props.items() if k != "Sleep"}
        delete = self.make_req(rng, life, kind, "Delete", physical_id)
        life.requests.append(delete)
        self.send(delete, rng)
        if delete.sink != "closed":
            self.wait_answer(delete, delete.deadline + 10)
        else:
            time.sleep(6.0)
        life.finished = True

    def plan(self) -> list[tuple[str, Any, int]]:
        """(path, Life or None for a malformed request, seed) until --requests requests are planned."""
        plan: list[tuple[str, Any, int]] = []
        total = 0
        while total < self.args.requests:
            path = self.paths[len(plan) % len(self.paths)]
            seed = self.rng.randrange(2**31)
            if self.rng.random() < 0.12:
                plan.append((path, None, seed))
                total += 1
                continue
            roll = self.rng.random()
            props: dict[str, Any] = {"Name": uuid.UUID(int=self.rng.getrandbits(128)).hex[:12]}
            if roll < 0.15:
                props.update(Mode="long", Polls=self.rng.randint(2, 4), Delay=1)
            elif roll < 0.27:
                props["Mode"] = "fail"
            elif roll < 0.37:
                props["Mode"] = "baddata"
            elif roll < 0.45:
                props["Blob"] = "b" * 20_000
            if props.get("Mode") != "long":
                # FC kills fire 0.4 or 1.2 s into the attempt: most handlers are still running then
                props["Sleep"] = round(self.rng.uniform(0.2, 2.5), 2)
            life = Life(str(uuid.UUID(int=self.rng.getrandbits(128))), path, props["Name"], props)
            plan.append((path, life, seed))
            total += 2
        return plan

    def run_malformed(self, path: str, seed: int) -> None:
        rng = random.Random(seed)
        req = self.malformed(rng, path)
        self.send(req, rng)
        if req.sink != "none":
            self.wait_answer(req, req.deadline + 5)

    # ----------------------------------------------------------------- the run
    def run(self) -> dict[str, Any]:
        started = time.time()
        if "fc" in self.paths:
            self.start_fc()
        if "worker" in self.paths:
            self.start_mns()
        if "serve" in self.paths:
            self.start_serve()
        chaos_threads = [threading.Thread(target=self.store_locker, args=(random.Random(self.args.seed + 1),),
                                          daemon=True)]
        for index, name in enumerate(("worker", "serve")):
            if name in self.paths:
                chaos_threads.append(threading.Thread(target=self.killer,
                                                      args=(name, random.Random(self.args.seed + 10 + index)),
                                                      daemon=True))
        for thread in chaos_threads:
            thread.start()
        plan = self.plan()
        with ThreadPoolExecutor(self.args.concurrency) as pool:
            futures = []
            for path, life, seed in plan:
                if life is None:
                    futures.append(pool.submit(self.run_malformed, path, seed))
                else:
                    self.lives.append(life)
                    futures.append(pool.submit(self.run_life, life, seed))
                time.sleep(self.args.spacing)
            for future in futures:
                try:
                    future.result(timeout=max(1.0, self.args.max_seconds - (time.time() - started)))
                except Exception as exc:  # noqa: BLE001 - report, do not hang
                    print(f"chaos: a stack life failed or timed out: {exc!r}", file=sys.stderr)
        self.stop_chaos.set()
        for thread in chaos_threads:
            thread.join(20)
        time.sleep(self.args.settle)  # late duplicates (redeliveries, re-sends) show up here
        return self.report(time.time() - started)

    def shutdown(self) -> None:
        self.stop_chaos.set()
        for name, proc in self.procs.items():
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if hasattr(self, "fc"):
            self.fc.stop()
        if hasattr(self, "mns"):
            self.mns.stop()
        self.rs.stop()
        self.trickle.stop()

    # ----------------------------------------------------------------- evaluation
    def logs_by_request(self) -> dict[str, list[str]]:
        messages: dict[str, list[str]] = defaultdict(list)
        texts: list[str] = []
        for file in sorted(self.tmp.glob("*.log")):
            if file.name != "ledger.log":
                texts.append(file.read_text(errors="replace"))
        if hasattr(self, "fc"):
            for record in self.fc.records:
                for attempt in record.attempts:
                    texts.append(attempt.log_tail.decode(errors="replace"))
        for text in texts:
            for line in text.splitlines():
                start = line.find("{")
                if start < 0:
                    continue
                try:
                    entry = json.loads(line[start:])
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    key = str(entry.get("RequestId") or entry.get("MessageId") or "")
                    messages[key].append(str(entry.get("message", "")) + " " + str(entry.get("error", "")))
        return messages

    def report(self, wall: float) -> dict[str, Any]:
        logs = self.logs_by_request()
        ledger = [json.loads(line) for line in self.ledger.read_text().splitlines() if line.strip()]
        created: dict[str, set[str]] = defaultdict(set)
        deleted: dict[str, set[str]] = defaultdict(set)
        for entry in ledger:
            (created if entry["op"] == "create" else deleted)[entry["stack"]].add(str(entry["id"]))
        rows: dict[str, dict[str, Any]] = {}
        problems: list[str] = []
        for path in [*self.paths, "total"]:
            rows[path] = {"requests": 0, "answered_once": 0, "lost": 0, "undeliverable": 0,
                          "undeliverable_logged": 0, "no_url": 0, "no_url_rejected": 0, "duplicated": 0,
                          "duplicated_identical": 0, "leaked": 0, "orphaned_undeliverable": 0,
                          "late": 0, "worst_s": 0.0, "worst_deadline_s": 0.0, "worst_ratio": 0.0,
                          "success": 0, "failed": 0, "inband_4xx": 0,
                          "dup_resend_duplicate": 0, "dup_recovery_resend": 0}
        for req in self.requests:
            for row in (rows[req.path], rows["total"]):
                row["requests"] += 1
            got = self.accepted(req)
            bodies = [b for b in self.received_bodies(req) if b is not None]
            distinct = {json.dumps(b, sort_keys=True) for b in bodies}
            tag = f"#{req.n} {req.path} {req.kind} {req.event.get('RequestType', '?')} faults={','.join(req.faults) or '-'}"
            for row in (rows[req.path], rows["total"]):
                if req.sink == "closed":
                    row["undeliverable"] += 1
                    logged = any("not delivered" in m for m in logs.get(req.request_id, []))
                    row["undeliverable_logged"] += logged
                    continue
                if req.sink == "none":
                    row["no_url"] += 1
                    rejected = (any(400 <= s < 500 for s in req.inband)
                                or any(logs.get(mid) for mid in req.message_ids)
                                or any(self._fc_failed_or_logged(fid) for fid in req.fc_ids))
                    row["no_url_rejected"] += rejected
                    continue
                if len(got) == 1 and len(distinct) <= 1:
                    row["answered_once"] += 1
                elif not got:
                    if req.path == "serve" and req.inband and all(400 <= s < 500 for s in req.inband):
                        row["inband_4xx"] += 1   # refused in the HTTP reply, nothing at the ResponseURL
                    else:
                        row["lost"] += 1
                else:
                    row["duplicated"] += 1
                    if len(distinct) == 1:
                        row["duplicated_identical"] += 1
                    texts = logs.get(req.request_id, [])
                    if any("re-sending the stored response" in m for m in texts):
                        row["dup_resend_duplicate"] += 1
                    if any("process died before sending it" in m for m in texts):
                        row["dup_recovery_resend"] += 1
                if got:
                    body = got[0][1] or {}
                    row["success" if body.get("Status") == "SUCCESS" else "failed"] += 1
                    elapsed = got[0][0] - (req.sent_at or got[0][0])
                    ratio = elapsed / req.deadline
                    if ratio > row["worst_ratio"]:
                        row.update(worst_ratio=round(ratio, 3), worst_s=round(elapsed, 2),
                                   worst_deadline_s=req.deadline)
                    row["late"] += elapsed > req.deadline
            if req.path != "total" and req.sink not in ("closed", "none"):
                if not got and req.path == "serve" and req.inband and all(400 <= s < 500 for s in req.inband):
                    problems.append(f"REFUSED IN-BAND ONLY (HTTP {req.inband}, no answer at its ResponseURL) {tag}")
                elif not got:
                    problems.append(f"LOST {tag} inband={req.inband}")
                elif len(got) > 1 or len(distinct) > 1:
                    statuses = [(b or {}).get("Status") for _, b in got]
                    problems.append(f"DUPLICATED {tag}: {len(got)} accepted {statuses}, {len(distinct)} distinct bodies")
                elif got and got[0][0] - (req.sent_at or 0) > req.deadline:
                    problems.append(f"LATE {tag}: {got[0][0] - (req.sent_at or 0):.1f} s > {req.deadline:.0f} s")
            if req.sink == "closed" and not any("not delivered" in m for m in logs.get(req.request_id, [])):
                problems.append(f"UNDELIVERABLE NOT LOGGED {tag}")
        for life in self.lives:
            leaks = created.get(life.stack_id, set()) - deleted.get(life.stack_id, set())
            if not leaks:
                continue
            create = life.requests[0] if life.requests else None
            if create is not None and create.sink == "closed":
                key = "orphaned_undeliverable"
            else:
                key = "leaked"
                problems.append(f"LEAKED {sorted(leaks)} stack {life.path} requests "
                                + "; ".join(f"#{r.n} {r.kind} faults={','.join(r.faults) or '-'}" for r in life.requests))
            rows[life.path][key] += len(leaks)
            rows["total"][key] += len(leaks)
        return {"rows": rows, "problems": problems, "violations": list(self.rs.violations),
                "kills": dict(self.kills), "fc_kills": sum(1 for r in self.requests if any(f.startswith("fc-kill") for f in r.faults)),
                "store_locks": len(self.lock_windows),
                "store_locked_seconds": round(sum(b - a for a, b in self.lock_windows), 1),
                "wall_s": round(wall, 1), "seed": self.args.seed, "tmp": str(self.tmp),
                "trickle_cut": sum(self.trickle.cut.values())}

    def _fc_failed_or_logged(self, invocation_id: str) -> bool:
        try:
            record = self.fc.record(invocation_id)
        except KeyError:
            return False
        return any(a.log_tail for a in record.attempts) or record.status in ("failed", "succeeded")


COLUMNS = [("requests", "requests"), ("answered_once", "answered once"), ("lost", "lost"),
           ("undeliverable", "undeliverable (logged)"), ("no_url", "no URL (rejected)"),
           ("inband", "4xx in-band only"), ("duplicated", "duplicated (identical)"), ("leaked", "leaked"),
           ("worst", "worst answer / deadline")]


def format_table(result: dict[str, Any]) -> str:
    lines = []
    header = ["path"] + [title for _, title in COLUMNS]
    table = []
    for path, row in result["rows"].items():
        cells = [path, str(row["requests"]), str(row["answered_once"]), str(row["lost"]),
                 f"{row['undeliverable']} ({row['undeliverable_logged']})",
                 f"{row['no_url']} ({row['no_url_rejected']})", str(row["inband_4xx"]),
                 f"{row['duplicated']} ({row['duplicated_identical']})", str(row["leaked"]),
                 f"{row['worst_s']:.1f} s / {row['worst_deadline_s']:.0f} s ({row['late']} late)"]
        table.append(cells)
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    lines.append("  ".join("-" * w for w in widths))
    for cells in table:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    total = result["rows"]["total"]
    lines.append("")
    lines.append(f"answers: {total['success']} SUCCESS, {total['failed']} FAILED, "
                 f"orphaned by undeliverable Creates (ROS never learns their id): {total['orphaned_undeliverable']}")
    lines.append(f"duplicated answers whose logs show: a duplicate delivery after completion re-sent the stored response "
                 f"{total['dup_resend_duplicate']}; recovery re-sent a recorded answer after its process died "
                 f"{total['dup_recovery_resend']}")
    lines.append(f"faults: FC first attempts SIGKILLed {result['fc_kills']}, worker SIGKILLs {result['kills'].get('worker', 0)}, "
                 f"serve SIGKILLs {result['kills'].get('serve', 0)}, store locks {result['store_locks']} "
                 f"({result['store_locked_seconds']} s), trickled replies cut by the framework {result['trickle_cut']}")
    lines.append(f"ResponseServer protocol violations: {len(result['violations'])}; wall {result['wall_s']} s; seed {result['seed']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/chaos.py", description=__doc__.split("\n\n")[0],
        epilog="example: python bench/chaos.py --requests 300 --seed 1 --json /tmp/chaos.json\n"
               "         python bench/chaos.py --requests 40 --paths serve,worker --seed 3 -v",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="ROS requests to send in all (default 300)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the fault plan (default 1)")
    parser.add_argument("--paths", default="fc,worker,serve", help="comma-separated: fc, worker, serve (default all)")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--concurrency", type=int, default=12, help="stack lives in flight at once (default 12)")
    parser.add_argument("--spacing", type=float, default=0.15, help="seconds between starting stack lives (default 0.15)")
    parser.add_argument("--settle", type=float, default=6.0, help="seconds to wait for late duplicates at the end (default 6)")
    parser.add_argument("--max-seconds", type=float, default=420.0, help="hard bound on the run (default 420)")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(4.0, 9.0), metavar=("MIN", "MAX"),
                        help="seconds between SIGKILLs of the worker and of serve (default 4 9)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, ledger, store)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print kills, restarts and store locks as they happen")
    args = parser.parse_args(argv)
    bad = set(p.strip() for p in args.paths.split(",")) - {"fc", "worker", "serve"}
    if bad:
        parser.error(f"--paths: unknown {', '.join(sorted(bad))}")
    chaos = Chaos(args)
    timer = threading.Timer(args.max_seconds + 120, lambda: os._exit(3))  # stops by itself, whatever hangs
    timer.daemon = True
    timer.start()
    try:
        result = chaos.run()
    finally:
        chaos.shutdown()
    print(f"$ python bench/chaos.py --requests {args.requests} --seed {args.seed} --paths {args.paths}")
    print(format_table(result))
    for problem in result["problems"]:
        print("  " + problem)
    for violation in result["violations"][:20]:
        print("  violation: " + violation)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if not args.keep:
        import shutil

        shutil.rmtree(chaos.tmp, ignore_errors=True)
    else:
        print(f"kept {chaos.tmp}")
    total = result["rows"]["total"]
    ok = not (total["lost"] or total["duplicated"] or total["leaked"] or total["late"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
