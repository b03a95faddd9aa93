"""Local processes for local backends: the primitives, and the client of the per-home daemon.

Two lifetimes (`../shared/spec/cloud-apis.md` §4):

- **One invocation** (FC workers): `start_process(..., die_with_parent=True)` in the parent,
  `die_with_parent()` first thing in the child. The child leads its own process group, so one
  `signal_group` ends whatever it spawned, and it dies with its parent even after a SIGKILL.
- **Resources** (boot-group instances, cluster nodes) outlive the FC worker that asked for them, so
  they belong to one daemon per `$CRHELPER_HOME` (`crhelper.local.supervisor_daemon`), which
  `SupervisorClient` starts on demand and talks to over a Unix socket (one JSON line each way).
  The daemon's state file is the record of what runs; when no daemon runs and nothing recorded is
  alive, clients answer from it under the daemon's lock instead of starting a daemon to say so.

Standard library only. The one-invocation primitives the FC worker needs on every invocation live
in the lighter `crhelper.local.processes`.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from crhelper import paths
from crhelper.config import env_float
from crhelper import holder
from crhelper.holder import stat_fields, start_ticks
from crhelper.local.processes import python_env, signal_group

#: Liveness of a pid (and, given its start ticks, that it is still that process): one home, `crhelper.holder`.
process_alive = holder.process_alive

def resource_owner(stack_id: str, logical_id: str) -> str:
    """The owner label of processes that stand for one stack resource (an instance, a cluster node):
    `crhelper stack delete` stops whatever the stack's resources left behind by this label."""
    return f"{stack_id}/{logical_id}"


def owned_by_stack(owner: str, stack_id: str) -> bool:
    return owner == stack_id or owner.startswith(f"{stack_id}/")


# ------------------------------------------------------------------------------------------- errors
INVALID_SPEC = "InvalidSpec"
SPEC_CONFLICT = "SpecConflict"
NOT_FOUND = "NotFound"
NOT_READY = "NotReady"
REFUSED = "Refused"
UNAVAILABLE = "Unavailable"
EXITING = "Exiting"
START_FAILED = "StartFailed"
STOP_FAILED = "StopFailed"
BAD_REQUEST = "BadRequest"
INTERNAL = "Internal"

#: Liveness of a pid (and, given its start ticks, that it is still that process): one home, `crhelper.holder`.
process_alive = holder.process_alive


class SupervisorError(Exception):
    """A supervisor operation that cannot be done; `code` says which rule (the constants above)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class SupervisorSettings:
    """Delays of the supervisor, as settings so tests run in seconds."""

    #: CRHELPER_SUPERVISOR_GRACE: seconds between SIGTERM and SIGKILL when a process is stopped
    grace: float = 10.0
    #: CRHELPER_SUPERVISOR_LINGER: seconds the daemon stays once it owns nothing, before it exits
    linger: float = 30.0
    #: CRHELPER_SUPERVISOR_POLL: how often the daemon looks at its processes (exit, readiness)
    poll: float = 0.2
    #: CRHELPER_SUPERVISOR_START_TIMEOUT: how long a client waits for a daemon to answer
    start_timeout: float = 10.0

    ENV: ClassVar[Dict[str, str]] = {"grace": "CRHELPER_SUPERVISOR_GRACE", "linger": "CRHELPER_SUPERVISOR_LINGER",
           "poll": "CRHELPER_SUPERVISOR_POLL", "start_timeout": "CRHELPER_SUPERVISOR_START_TIMEOUT"}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "SupervisorSettings":
        env = os.environ if env is None else env
        return cls(
            grace=env_float(env, cls.ENV["grace"], cls.grace, maximum=3600.0),
            linger=env_float(env, cls.ENV["linger"], cls.linger, maximum=86_400.0),
            poll=env_float(env, cls.ENV["poll"], cls.poll, minimum=0.01, maximum=10.0),
            start_timeout=env_float(env, cls.ENV["start_timeout"], cls.start_timeout, minimum=0.5, maximum=600.0),
        )

    def as_env(self) -> dict[str, str]:
        """The variables that give a daemon these settings."""
        return {variable: repr(getattr(self, name)) for name, variable in self.ENV.items()}


# -------------------------------------------------------------------------------- process primitives
def process_start_ticks(pid: int) -> str:
    """When `pid` started (clock ticks since boot), to tell it from a later process with its pid; "" if unknown."""
    return start_ticks(pid)


def group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` still runs. Zombies count as gone: PID 1 of a container
    may never reap them, and they hold nothing (where /proc is missing, `killpg(0)` decides)."""
    if not os.path.isdir("/proc/self"):
        return holder.signal_reaches(os.killpg, pgid)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = stat_fields(int(entry))
            if len(stat) > 2 and stat[2] == str(pgid) and stat[0] not in ("Z", "X"):
                return True
    return False


def stop_group(pgid: int, grace: float, *, reap: Callable[[], object] | None = None,
               poll: float = 0.02, kill_wait: float = 5.0) -> bool:
    """SIGTERM group `pgid` (and SIGCONT, so a stopped process sees it), SIGKILL whatever is left
    after `grace` seconds, and wait until none is left; True when it took a SIGKILL. `reap`
    (e.g. `Popen.poll`) lets the caller collect its own child's exit status meanwhile.
    A descendant that started a session of its own has left the group and is not reached."""

    def gone_within(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            if reap is not None:
                reap()
            if not group_alive(pgid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)

    if not signal_group(pgid, signal.SIGTERM):
        return False
    signal_group(pgid, signal.SIGCONT)
    if gone_within(grace):
        return False
    signal_group(pgid, signal.SIGKILL)
    if not gone_within(kill_wait):
        raise SupervisorError(STOP_FAILED, f"process group {pgid} is still there {kill_wait:g} s after SIGKILL "
                                           "(a process in uninterruptible sleep?)")
    return True


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    """Whether `host:port` accepts a TCP connection now (any 127.0.0.N: an unused one refuses)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port(host: str, port: int, timeout: float, *, interval: float = 0.05,
              alive: Callable[[], bool] | None = None) -> bool:
    """Poll until `host:port` accepts a connection (True) or `timeout` passes (False); `alive`
    ends the wait early (False) once the process that should listen is gone."""
    deadline = time.monotonic() + timeout
    while True:
        if port_open(host, port, timeout=min(0.5, max(0.05, deadline - time.monotonic()))):
            return True
        if time.monotonic() >= deadline or (alive is not None and not alive()):
            return False
        time.sleep(interval)


# ------------------------------------------------------------------------------------------ secrets
_SECRET_KEY = re.compile(r"SECRET|TOKEN|PASSW|KEY|CREDENTIAL", re.IGNORECASE)
MASK = "***"


def is_secret_key(key: str) -> bool:
    """Environment keys whose values are never shown: *SECRET*, *TOKEN*, *PASSWORD*, *KEY*, ..."""
    return bool(_SECRET_KEY.search(key))


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    return {key: MASK if is_secret_key(key) else value for key, value in env.items()}


# ------------------------------------------------------------------------------------------- paths
SUPERVISOR_DIR = "supervisor"
#: AF_UNIX paths are limited to 108 bytes; longer homes get their socket in a private temp folder.
_MAX_SOCKET_PATH = 100


@dataclass(frozen=True)
class SupervisorPaths:
    """Where one home's supervisor keeps its socket, lock, state file and logs."""

    folder: Path

    @classmethod
    def for_home(cls, home: Path | None = None) -> "SupervisorPaths":
        return cls((paths.home() if home is None else Path(home)) / SUPERVISOR_DIR)

    @property
    def socket(self) -> Path:
        path = self.folder / "daemon.sock"
        if len(os.fsencode(str(path))) <= _MAX_SOCKET_PATH:
            return path
        import hashlib
        import tempfile

        digest = hashlib.sha256(os.fsencode(str(self.folder.resolve()))).hexdigest()[:24]
        return Path(tempfile.gettempdir()) / f"crhelper-{os.getuid()}" / f"{digest}.sock"

    @property
    def state(self) -> Path:
        return self.folder / "state.json"

    @property
    def lock(self) -> Path:
        return self.folder / "daemon.lock"

    @property
    def pid(self) -> Path:
        return self.folder / "daemon.pid"

    @property
    def daemon_log(self) -> Path:
        return self.folder / "daemon.log"

    @property
    def logs(self) -> Path:
        return self.folder / "logs"

    def log_for(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def ensure(self) -> None:
        """Create the folders 0700; refuse folders another user owns (they could read or fake our socket)."""
        for folder in dict.fromkeys((self.folder, self.logs, self.socket.parent)):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            owner = folder.stat().st_uid
            if owner != os.getuid():
                raise SupervisorError(REFUSED, f"{folder} belongs to uid {owner}, not to this user (uid {os.getuid()}): "
                                               "refusing to keep supervisor state there")
            os.chmod(folder, 0o700)


# ----------------------------------------------------------------------------------- specs, records
STARTING, RUNNING, EXITED, STOPPED = "starting", "running", "exited", "stopped"
LIVE = (STARTING, RUNNING)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}\Z")
_MAX_OWNER = 512


def _shallow(instance: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict, not copied (`asdict` deep-copies: ~0.1 ms a record, and the
    daemon turns every record to JSON on each save and each list)."""
    return {f.name: getattr(instance, f.name) for f in fields(instance)}


def _invalid(rule: str) -> SupervisorError:
    return SupervisorError(INVALID_SPEC, rule)


@dataclass(frozen=True)
class ProcessSpec:
    """What runs under a name. A second start of a running name must give the same spec."""

    name: str
    argv: Tuple[str, ...]
    owner: str = ""
    cwd: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    log_path: str = ""
    ready_host: str = ""
    ready_port: int = 0

    def check(self) -> None:
        """Raise InvalidSpec naming the field and the rule it breaks (never a value of env)."""
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise _invalid("name: 1-128 characters, letters, digits and . _ @ - (not first), "
                           f"got {self.name!r}"[:200])
        if not isinstance(self.argv, tuple) or not self.argv or not all(isinstance(a, str) for a in self.argv):
            raise _invalid("argv: a non-empty list of strings (the program, then its arguments; no shell)")
        if any("\0" in a for a in self.argv) or not self.argv[0]:
            raise _invalid("argv: no empty program and no NUL characters")
        if not isinstance(self.owner, str) or len(self.owner) > _MAX_OWNER or not self.owner.isprintable():
            raise _invalid(f"owner: printable text of at most {_MAX_OWNER} characters")
        for label, value in (("cwd", self.cwd), ("log_path", self.log_path)):
            if not isinstance(value, str) or (value and not os.path.isabs(value)) or "\0" in value:
                raise _invalid(f"{label}: an absolute path, got {value!r}"[:200])
        if not isinstance(self.env, Mapping):
            raise _invalid("env: an object of string keys and values")
        for key, value in self.env.items():
            if not isinstance(key, str) or not key or "=" in key or "\0" in key:
                raise _invalid(f"env: keys are non-empty strings without '=' or NUL, got {key!r}"[:200])
            if not isinstance(value, str) or "\0" in value:
                raise _invalid(f"env.{key}: a string without NUL characters"[:200])
        if not isinstance(self.ready_port, int) or isinstance(self.ready_port, bool) or not 0 <= self.ready_port <= 65535:
            raise _invalid("ready_port: 1-65535, or 0 for no readiness check")
        if not isinstance(self.ready_host, str) or (self.ready_port and not self.ready_host):
            raise _invalid("ready_host: the address to check with ready_port, e.g. 127.0.0.2")

    def differences(self, other: "ProcessSpec") -> list[str]:
        """The fields in which `other` differs, by name only (env values may be secrets)."""
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]

    def to_json(self) -> dict[str, Any]:
        data = _shallow(self)
        data["argv"], data["env"] = list(self.argv), dict(self.env)
        return data

    @classmethod
    def from_json(cls, data: Any) -> "ProcessSpec":
        if not isinstance(data, Mapping):
            raise _invalid("spec: an object with name and argv")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise _invalid(f"spec: unknown fields {', '.join(map(str, unknown))[:200]}")
        if "name" not in data or "argv" not in data:
            raise _invalid("spec: name and argv are required")
        values = dict(data)
        values["argv"] = tuple(values["argv"]) if isinstance(values["argv"], list) else values["argv"]
        values["env"] = dict(values["env"]) if isinstance(values.get("env"), Mapping) else values.get("env", {})
        spec = cls(**values)
        spec.check()
        return spec


@dataclass(frozen=True)
class ProcessStatus:
    """What a client sees of a supervised process; env values of secret-looking keys are masked.
    `exit_code` is negative for a signal (-15 SIGTERM), None while it runs or when unknown."""

    name: str
    owner: str
    state: str
    pid: Optional[int]
    exit_code: Optional[int]
    started_at: Optional[float]
    ended_at: Optional[float]
    restarts: int
    argv: Tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    log_path: str
    ready: str
    adopted: bool
    note: str

    @property
    def running(self) -> bool:
        return self.state in LIVE

    def to_json(self) -> dict[str, Any]:
        data = _shallow(self)
        data["argv"], data["env"] = list(self.argv), dict(self.env)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ProcessStatus":
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        values["argv"] = tuple(values["argv"] or ())
        values["env"] = dict(values["env"] or {})
        return cls(**values)


@dataclass
class ProcessRecord:
    """The daemon's record of one name: its spec and what became of the last start (persisted)."""

    spec: ProcessSpec
    state: str = STARTING
    pid: Optional[int] = None
    start_ticks: str = ""
    exit_code: Optional[int] = None
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    restarts: int = 0
    adopted: bool = False
    note: str = ""

    def finish(self, state: str, exit_code: int | None, note: str = "") -> None:
        self.state, self.exit_code, self.ended_at, self.note = state, exit_code, time.time(), note

    def status(self) -> ProcessStatus:
        spec = self.spec
        return ProcessStatus(
            name=spec.name, owner=spec.owner, state=self.state, pid=self.pid, exit_code=self.exit_code,
            started_at=self.started_at, ended_at=self.ended_at, restarts=self.restarts, argv=spec.argv,
            cwd=spec.cwd, env=mask_env(spec.env), log_path=spec.log_path,
            ready=f"{spec.ready_host}:{spec.ready_port}" if spec.ready_port else "", adopted=self.adopted,
            note=self.note)

    def to_json(self) -> dict[str, Any]:
        data = _shallow(self)
        data["spec"] = self.spec.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ProcessRecord":
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["spec"] = ProcessSpec.from_json(data.get("spec"))
        return cls(**values)


_STATE_VERSION = 1


def load_records(path: Path) -> Dict[str, ProcessRecord]:
    """The state file's records ({} when there is none); ValueError when it cannot be read as one."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        document = json.loads(raw.decode("utf-8"))
        if not isinstance(document, dict) or document.get("version") != _STATE_VERSION:
            raise ValueError(f"not a version {_STATE_VERSION} supervisor state")
        records = [ProcessRecord.from_json(item) for item in document.get("records", [])]
    except (ValueError, TypeError, KeyError, SupervisorError) as exc:
        raise ValueError(f"{path}: unreadable supervisor state ({exc})") from None
    return {record.spec.name: record for record in records}


def save_records(path: Path, records: Mapping[str, ProcessRecord]) -> None:
    """Replace the state file atomically, 0600: it holds the full env (needed to restart), secrets included."""
    write_state(path, [r.to_json() for r in records.values()])


def write_state(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """`save_records` for records already turned to JSON data (a snapshot taken under a lock)."""
    body = json.dumps({"version": _STATE_VERSION, "records": list(records)}, indent=1)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(body)
    os.replace(temporary, path)


class StateLock:
    """The daemon's lock (an flock on `daemon.lock`, released by the kernel when its holder dies,
    so a killed daemon leaves nothing stale behind). Whoever holds it may write the state file."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock if it is free (never waits); True when taken."""
        descriptor = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(descriptor)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        self._fd = descriptor
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# --------------------------------------------------------------------------------------------- wire
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


def send_message(sock: socket.socket, message: Mapping[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode("utf-8") + b"\n")


def read_message(sock: socket.socket) -> dict[str, Any] | None:
    """One JSON object ending with a newline; None when the peer closed before sending any."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            if not chunks:
                return None
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n"):
            break
        if size > MAX_MESSAGE_BYTES:
            raise ValueError(f"message: at most {MAX_MESSAGE_BYTES} bytes")
    message = json.loads(b"".join(chunks).decode("utf-8"))
    if not isinstance(message, dict):
        raise ValueError("message: a JSON object")
    return message


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket (Linux SO_PEERCRED); None elsewhere."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    import struct

    raw = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    return int(struct.unpack("3i", raw)[1])


def tail_lines(path: str | os.PathLike[str], lines: int, max_bytes: int = 1024 * 1024) -> str:
    """The last `lines` lines of a file (of its last `max_bytes` at most), decoded leniently."""
    if lines <= 0:
        return ""
    with open(path, "rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        start = max(0, end - max_bytes)
        block = 8192
        position = end
        data = b""
        while position > start and data.count(b"\n") <= lines:
            position = max(start, position - block)
            handle.seek(position)
            data = handle.read(end - position)
    text = data.decode("utf-8", errors="replace")
    kept = text.splitlines(keepends=True)[-lines:]
    return "".join(kept)


# ------------------------------------------------------------------------------------------- client
DAEMON_MODULE = "crhelper.local.supervisor_daemon"
#: Requests safe to send again when the daemon went away before answering.
_RETRYABLE = frozenset({"ping", "list", "start", "start_many", "stop", "stop_many", "stop_owner", "stop_all"})
_RELAUNCH_SECONDS = 0.5


class _NoDaemon(Exception):
    """No daemon answered (no socket, refused, or it is exiting): start one or read the state file."""


class SupervisorClient:
    """Start, stop and look at the processes of one `$CRHELPER_HOME`, from any process of that home.

    The first call that needs a daemon starts one (`python -m crhelper.local.supervisor_daemon`);
    two clients racing get one daemon. The daemon exits by itself once it owns nothing.
    """

    def __init__(self, home: str | os.PathLike[str] | None = None, *, settings: SupervisorSettings | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self._env = dict(os.environ if env is None else env)
        self.home = Path(home) if home is not None else paths.home(self._env)
        self.paths = SupervisorPaths.for_home(self.home)
        self.settings = settings or SupervisorSettings.from_env(self._env)

    # ---------------------------------------------------------------------------------- operations
    def start(self, name: str, argv: Sequence[str], *, owner: str = "", cwd: str | None = None,
              env: Mapping[str, str] | None = None, log_path: str | os.PathLike[str] | None = None,
              ready: Tuple[str, int] | None = None) -> ProcessStatus:
        """Run `argv` under `name` (state `starting` until `ready`, a (host, port), accepts; else
        `running`). Its environment is PATH, HOME, LANG and the like from the daemon, plus `env`;
        output goes to `log_path` (default `supervisor/logs/<name>.log`). Starting a running name
        with the same spec returns it; with another spec raises SpecConflict."""
        spec = self.spec(name, argv, owner=owner, cwd=cwd, env=env, log_path=log_path, ready=ready)
        return ProcessStatus.from_json(self._call({"op": "start", "spec": spec.to_json()}))

    @staticmethod
    def spec(name: str, argv: Sequence[str], *, owner: str = "", cwd: str | None = None,
             env: Mapping[str, str] | None = None, log_path: str | os.PathLike[str] | None = None,
             ready: Tuple[str, int] | None = None) -> ProcessSpec:
        """The checked spec `start` sends (arguments as there), for `start_many`."""
        host, port = ready if ready is not None else ("", 0)
        spec = ProcessSpec(name=name, argv=tuple(argv), owner=owner, cwd=os.path.abspath(cwd or os.getcwd()),
                           env=dict(env or {}), log_path=os.path.abspath(log_path) if log_path else "",
                           ready_host=host, ready_port=port)
        spec.check()
        return spec

    def start_many(self, specs: Sequence[ProcessSpec]) -> List[ProcessStatus]:
        """Start several processes in one request (`spec()` builds each; each behaves as `start`):
        the daemon spawns them one after the other without waiting on any, and writes its state
        file once. Every spec is tried; then the first that failed raises its SupervisorError
        (the ones started stay started: starting them again returns them)."""
        if not specs:
            return []
        for spec in specs:
            spec.check()
        message = {"op": "start_many", "specs": [spec.to_json() for spec in specs]}
        try:
            answers = self._call(message)
        except SupervisorError as exc:
            if exc.code != BAD_REQUEST or not str(exc).startswith("op:"):
                raise
            # a daemon from before start_many (it answered "op: one of ..."): one request each
            return [ProcessStatus.from_json(self._call({"op": "start", "spec": spec.to_json()})) for spec in specs]
        started, failure = [], None
        for answer in answers:
            if answer.get("ok"):
                started.append(ProcessStatus.from_json(answer["result"]))
            elif failure is None:
                error = answer.get("error") or {}
                failure = SupervisorError(str(error.get("code", INTERNAL)), str(error.get("message", "start failed")))
        if failure is not None:
            raise failure
        return started

    def stop(self, name: str, *, grace: float | None = None, forget: bool = False) -> ProcessStatus:
        """SIGTERM its process group, SIGKILL after `grace`; `forget` also drops its record."""
        message = {"op": "stop", "name": name, "grace": grace, "forget": forget}
        return ProcessStatus.from_json(self._maybe_offline(message, lambda records: self._stop_offline(records, message)))

    def stop_many(self, names: Sequence[str] = (), *, owners: Sequence[str] = (), grace: float | None = None,
                  forget: bool = False) -> List[ProcessStatus]:
        """`stop` for several names and every process of several `owners`, in one request, at once
        (one grace for all); names not on record are skipped (e.g. the processes of finished
        commands, forgotten together)."""
        if not names and not owners:
            return []
        message = {"op": "stop_many", "names": list(names), "owners": list(owners), "grace": grace, "forget": forget}
        try:
            answer = self._maybe_offline(message, lambda records: self._stop_names_offline(records, message))
        except SupervisorError as exc:
            if exc.code != BAD_REQUEST or not str(exc).startswith("op:"):
                raise
            answer = []  # a daemon from before stop_many: one request each
            for owner in owners:
                answer += [status.to_json() for status in self.stop_owner(owner, grace=grace, forget=forget)]
            for name in names:
                try:
                    answer.append(self.stop(name, grace=grace, forget=forget).to_json())
                except SupervisorError as missing:
                    if missing.code != NOT_FOUND:
                        raise
        return [ProcessStatus.from_json(item) for item in answer]

    def restart(self, name: str, *, grace: float | None = None) -> ProcessStatus:
        """Stop it (if it runs) and start it again with the same spec."""
        return ProcessStatus.from_json(self._call({"op": "restart", "name": name, "grace": grace}))

    def status(self, name: str) -> ProcessStatus:
        for status in self.list():
            if status.name == name:
                return status
        raise SupervisorError(NOT_FOUND, f"no supervised process named {name!r} in {self.home}")

    def list(self, owner: str | None = None) -> List[ProcessStatus]:
        message = {"op": "list", "owner": owner}
        answer = self._maybe_offline(message, lambda records: [r.status().to_json() for r in records.values()
                                                               if owner is None or r.spec.owner == owner])
        return [ProcessStatus.from_json(item) for item in answer]

    def stop_owner(self, owner: str, *, grace: float | None = None, forget: bool = False) -> List[ProcessStatus]:
        """Stop every process of `owner` at once (one grace for all), e.g. a deleted stack's."""
        message = {"op": "stop_owner", "owner": owner, "grace": grace, "forget": forget}
        answer = self._maybe_offline(message, lambda records: self._stop_owner_offline(records, message))
        return [ProcessStatus.from_json(item) for item in answer]

    def stop_all(self, *, grace: float | None = None) -> List[ProcessStatus]:
        """Stop every process of this home, then the daemon."""
        message = {"op": "stop_all", "grace": grace}
        answer = self._maybe_offline(message, lambda records: [r.status().to_json() for r in records.values()])
        return [ProcessStatus.from_json(item) for item in answer]

    def wait_ready(self, name: str, timeout: float) -> ProcessStatus:
        """Wait until `name` is `running` (its ready port accepts); NotReady when it ends or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status(name)
            if status.state == RUNNING:
                return status
            if not status.running:
                raise SupervisorError(NOT_READY, f"{name} is {status.state} (exit code {status.exit_code}) before it was "
                                                 f"ready; see its log: {status.log_path}")
            if time.monotonic() >= deadline:
                raise SupervisorError(NOT_READY, f"{name} was not ready at {status.ready} within {timeout:g} s; "
                                                 f"see its log: {status.log_path}")
            time.sleep(min(self.settings.poll, 0.1))

    @staticmethod
    def wait_port(host: str, port: int, timeout: float) -> bool:
        return wait_port(host, port, timeout)

    def logs(self, name: str, tail: int = 100) -> str:
        """The last `tail` lines of its captured output (stdout and stderr)."""
        status = self.status(name)
        try:
            return tail_lines(status.log_path, tail)
        except FileNotFoundError:
            return ""

    def daemon_pid(self) -> int | None:
        """The pid of this home's daemon if one answers now (never starts one)."""
        try:
            return int(self._exchange({"op": "ping"}, 5.0)["pid"])
        except _NoDaemon:
            return None

    # ---------------------------------------------------------------------------------- transport
    def _timeout(self, message: Mapping[str, Any]) -> float:
        grace = message.get("grace")
        return self.settings.start_timeout + (self.settings.grace if grace is None else float(grace)) + 15.0

    def _call(self, message: Mapping[str, Any]) -> Any:
        """Send `message` to the daemon, starting one when none answers."""
        deadline = time.monotonic() + self.settings.start_timeout
        launched: float | None = None
        while True:
            try:
                return self._exchange(message, self._timeout(message))
            except _NoDaemon as exc:
                reason = str(exc)
            now = time.monotonic()
            if now >= deadline:
                raise SupervisorError(UNAVAILABLE, f"no supervisor daemon answered at {self.paths.socket} within "
                                                   f"{self.settings.start_timeout:g} s ({reason}); its log: "
                                                   f"{self.paths.daemon_log}")
            if launched is None or now - launched >= _RELAUNCH_SECONDS:
                self._launch()
                launched = time.monotonic()
            else:
                time.sleep(0.02)

    def _exchange(self, message: Mapping[str, Any], timeout: float) -> Any:
        path = self.paths.socket
        try:
            owner = path.stat().st_uid
        except FileNotFoundError:
            raise _NoDaemon("no socket") from None
        if owner != os.getuid():
            raise SupervisorError(REFUSED, f"{path} belongs to uid {owner}, not to this user: refusing to talk to it")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            self._connect(sock, path, timeout)
            try:
                send_message(sock, message)
                reply = read_message(sock)
            except (ConnectionResetError, BrokenPipeError):
                reply = None
            except socket.timeout:
                raise SupervisorError(UNAVAILABLE, f"the supervisor daemon did not answer {message.get('op')} within "
                                                   f"{timeout:g} s") from None
        if reply is None:
            if message.get("op") in _RETRYABLE:
                raise _NoDaemon("the daemon closed the connection without answering")
            raise SupervisorError(UNAVAILABLE, "the supervisor daemon went away before answering; "
                                               f"check with: crhelper supervisor status {message.get('name', '')}")
        if reply.get("ok"):
            return reply.get("result")
        error = reply.get("error") or {}
        if error.get("code") == EXITING:
            raise _NoDaemon("the daemon is exiting")
        raise SupervisorError(str(error.get("code", INTERNAL)), str(error.get("message", "unknown supervisor error")))

    @staticmethod
    def _connect(sock: socket.socket, path: Path, timeout: float) -> None:
        """Connect, waiting while the daemon's accept backlog is full: a Unix socket refuses such a
        connect at once (EAGAIN) where TCP would queue it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                sock.connect(str(path))
                return
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                raise _NoDaemon(exc.strerror or str(exc)) from None
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SupervisorError(UNAVAILABLE, f"the supervisor daemon is too busy to accept a connection "
                                                       f"within {timeout:g} s") from None
                time.sleep(0.01)

    def _launch(self) -> None:
        """Start a daemon for this home (it returns once listening, or when another holds the lock)."""
        env = python_env({k: v for k, v in self._env.items() if not is_secret_key(k)})
        env.update(self.settings.as_env())
        env[paths.HOME_ENV] = str(self.home)
        try:
            result = subprocess.run([sys.executable, "-m", DAEMON_MODULE, "--home", str(self.home)], env=env, cwd="/",
                                    stdin=subprocess.DEVNULL, capture_output=True, timeout=self.settings.start_timeout)
        except subprocess.TimeoutExpired:
            raise SupervisorError(UNAVAILABLE, f"the supervisor daemon did not start within "
                                               f"{self.settings.start_timeout:g} s; its log: {self.paths.daemon_log}") from None
        if result.returncode != 0:
            said = (result.stderr or result.stdout).decode("utf-8", "replace").strip().splitlines()
            raise SupervisorError(UNAVAILABLE, f"the supervisor daemon did not start: {said[-1] if said else 'no output'}; "
                                               f"its log: {self.paths.daemon_log}")

    # ---------------------------------------------------------------------- answers without a daemon
    def _maybe_offline(self, message: Mapping[str, Any],
                       answer: Callable[[Dict[str, ProcessRecord]], Any]) -> Any:
        """Ask the daemon; with none running and nothing recorded alive, answer from the state file
        under the daemon's lock (no daemon is started just to say nothing runs)."""
        try:
            return self._exchange(message, self._timeout(message))
        except _NoDaemon:
            pass
        with self._offline_records() as records:
            if records is not None:
                return answer(records)
        return self._call(message)

    def _offline_records(self) -> "_OfflineRecords":
        return _OfflineRecords(self.paths)

    def _stop_offline(self, records: Dict[str, ProcessRecord], message: Mapping[str, Any]) -> Dict[str, Any]:
        name = str(message["name"])
        record = records.get(name)
        if record is None:
            raise SupervisorError(NOT_FOUND, f"no supervised process named {name!r} in {self.home}")
        if message.get("forget"):
            del records[name]
            save_records(self.paths.state, records)
        return record.status().to_json()

    def _stop_names_offline(self, records: Dict[str, ProcessRecord], message: Mapping[str, Any]) -> List[Dict[str, Any]]:
        owners = set(message["owners"])
        chosen = [name for name in dict.fromkeys(message["names"]) if name in records]
        chosen += [name for name, record in records.items() if record.spec.owner in owners and name not in chosen]
        mine = [records[name] for name in chosen]
        if message.get("forget") and mine:
            for record in mine:
                del records[record.spec.name]
            save_records(self.paths.state, records)
        return [r.status().to_json() for r in mine]

    def _stop_owner_offline(self, records: Dict[str, ProcessRecord], message: Mapping[str, Any]) -> List[Dict[str, Any]]:
        mine = [r for r in records.values() if r.spec.owner == message["owner"]]
        if message.get("forget") and mine:
            for record in mine:
                del records[record.spec.name]
            save_records(self.paths.state, records)
        return [r.status().to_json() for r in mine]


class _OfflineRecords:
    """`with`: the state file's records while holding the daemon's lock, or None when a daemon
    holds it, the file is unreadable, or a record is alive (only a daemon may watch or stop those)."""

    def __init__(self, supervisor_paths: SupervisorPaths) -> None:
        self._paths = supervisor_paths
        self._lock = StateLock(supervisor_paths.lock)

    def __enter__(self) -> Dict[str, ProcessRecord] | None:
        if not self._paths.folder.is_dir():
            return {}
        if not self._lock.acquire():
            return None
        try:
            records = load_records(self._paths.state)
        except ValueError:
            return None
        if any(record.state in LIVE for record in records.values()):
            return None
        return records

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


