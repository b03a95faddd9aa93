"""The supervisor daemon: one per `$CRHELPER_HOME`, owner of the processes that stand for resources.

Run as `python -m crhelper.local.supervisor_daemon --home H` (what `SupervisorClient` does when no
daemon answers): it forks, and the parent returns once the daemon listens (`ready <pid>`) or when
another daemon holds the home's lock (`busy`). That flock is the only way to own a home, so two
clients starting daemons at once get one, and a killed daemon leaves nothing stale: the kernel
drops its lock, the next daemon unlinks the old socket, reads the state file and re-adopts the
children still alive (checked by pid and start time, so a reused pid is not mistaken for one).
It cannot read the exit code of an adopted child (not its child): that is reported as unknown.

The socket is `supervisor/daemon.sock` (0600, in a 0700 folder); peers of another uid are refused
(SO_PEERCRED). SIGTERM/SIGINT end the daemon and leave its processes running, recorded for the next
daemon; `stop_all` (`crhelper supervisor stop --all`) stops them and then the daemon. With nothing
alive for `linger` seconds it exits by itself.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Sequence

from crhelper import paths
from crhelper.config import ConfigError
from crhelper.local.supervisor import (
    BAD_REQUEST, EXITED, EXITING, INTERNAL, LIVE, NOT_FOUND, REFUSED, RUNNING, SPEC_CONFLICT, STARTING, START_FAILED,
    STOPPED,
    ProcessRecord, ProcessSpec, StateLock, SupervisorError, SupervisorPaths, SupervisorSettings,
    group_alive, load_records, peer_uid, port_open, process_alive, process_start_ticks, read_message,
    send_message, stop_group, write_state,
)
from crhelper.local.processes import become_subreaper, start_process
from crhelper.logs import configure, get_logger
from crhelper.signals import stop_requested

log = get_logger("supervisor")

#: What a supervised process gets from the daemon's environment; everything else comes from its spec.
BASE_ENV_KEYS = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
                 paths.HOME_ENV)
_MAX_GRACE = 3600.0
_LOCK_WAIT_SECONDS = 1.0
_REQUEST_READ_TIMEOUT = 10.0
#: Most specs one start_many request may carry (a cluster's nodes, a tier's instances).
_MAX_BATCH = 1000
#: Threads that spawn the processes of one start_many.
_SPAWN_THREADS = 8
_MAX_DAEMON_LOG_BYTES = 1024 * 1024
_NOTE_ADOPTED = "adopted by a new supervisor daemon: its exit code will be unknown"
_NOTE_LOST = "exited while no supervisor daemon watched it: exit code unknown"


class Supervisor:
    """The processes of one home. Every change is saved to the state file before the operation that
    made it answers; operations on one name are serialised (a per-name lock), different names
    proceed in parallel, spawns included (the table lock is held only to register a process)."""

    def __init__(self, supervisor_paths: SupervisorPaths, settings: SupervisorSettings,
                 base_env: Mapping[str, str]) -> None:
        self.paths = supervisor_paths
        self.settings = settings
        self._base_env = {key: base_env[key] for key in BASE_ENV_KEYS if key in base_env}
        self._lock = threading.RLock()
        self._records: Dict[str, ProcessRecord] = {}
        self._procs: Dict[str, "subprocess.Popen[bytes]"] = {}
        self._name_locks: Dict[str, threading.Lock] = {}
        self._cleanups: List[threading.Thread] = []
        self._active = 0
        self._last_activity = time.monotonic()
        self._closing = False
        self._exit_requested = False
        self._subreaper = False
        #: Spawns between fork and registration: the stray reaper waits for none (see `_reap_strays`).
        self._spawning = 0
        #: Group commit of the state file: `_changes` counts the changes asked to be saved, `_saved`
        #: the last of them the file holds; one thread writes at a time (`_writing`).
        self._save_done = threading.Condition(threading.Lock())
        self._changes = 0
        self._saved = 0
        self._writing = False

    # --------------------------------------------------------------------------------- lifecycle
    def load(self) -> None:
        """Read the state file; re-adopt live records whose process still runs, close the others."""
        try:
            records = load_records(self.paths.state)
        except ValueError as exc:
            aside = self.paths.state.with_name(f"state.json.unreadable-{int(time.time())}")
            os.replace(self.paths.state, aside)
            log.warning("supervisor state unreadable, moved aside", extra={"fields": {"error": str(exc), "moved_to": str(aside)}})
            records = {}
        for record in records.values():
            if record.state not in LIVE:
                continue
            if record.pid and process_alive(record.pid, record.start_ticks):
                record.adopted, record.note = True, _NOTE_ADOPTED
                log.info("adopted", extra={"fields": {"name": record.spec.name, "pid": record.pid}})
            else:
                record.finish(EXITED, None, _NOTE_LOST)
        with self._lock:
            self._records = records
        self._save()
        self._subreaper = become_subreaper()

    def _save(self) -> None:
        """Write the state file with every change made before this call, and return once it is
        written (the caller answers its client only then: what it started is on record). Changes
        made while another thread writes share the next write, so a burst of starts costs a few
        writes, not one each. Never call it holding `_lock`: the writer needs it for its snapshot."""
        with self._save_done:
            self._changes += 1
            wanted = self._changes
            while self._saved < wanted:
                if not self._writing:
                    break
                self._save_done.wait()
            else:
                return
            self._writing = True
            covered = self._changes
        written = False
        try:
            with self._lock:  # every change numbered up to `covered` was made before its number
                snapshot = [record.to_json() for record in self._records.values()]
            write_state(self.paths.state, snapshot)
            written = True
        finally:
            with self._save_done:
                self._writing = False
                if written:
                    self._saved = max(self._saved, covered)
                self._save_done.notify_all()

    def begin_request(self) -> bool:
        """Count a request in; False once the daemon is closing (the client then starts another)."""
        with self._lock:
            if self._closing:
                return False
            self._active += 1
            return True

    def end_request(self) -> None:
        with self._lock:
            self._active -= 1
            self._last_activity = time.monotonic()

    def should_exit(self) -> bool:
        """True (and closed to new requests) after stop_all, or when nothing has been alive for `linger`."""
        with self._lock:
            if self._active:
                return False
            self._cleanups = [t for t in self._cleanups if t.is_alive()]
            idle = not self._cleanups and not any(r.state in LIVE for r in self._records.values())
            lingered = time.monotonic() - self._last_activity >= self.settings.linger
            if self._exit_requested or (idle and lingered):
                self._closing = True
            return self._closing

    def close(self) -> None:
        with self._lock:
            self._closing = True
        self._save()

    # -------------------------------------------------------------------------------- operations
    def handle(self, message: Mapping[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        operation = self._OPERATIONS.get(op) if isinstance(op, str) else None
        try:
            if operation is None:
                raise SupervisorError(BAD_REQUEST, f"op: one of {', '.join(sorted(self._OPERATIONS))}, got {op!r}"[:300])
            return {"ok": True, "result": operation(self, message)}
        except SupervisorError as exc:
            return {"ok": False, "error": {"code": exc.code, "message": str(exc)}}
        except Exception as exc:  # noqa: BLE001 - the client gets an answer, the log the traceback
            log.exception("supervisor operation failed", extra={"fields": {"op": op}})
            return {"ok": False, "error": {"code": INTERNAL, "message": f"{type(exc).__name__}: {exc}"}}

    def _ping(self, message: Mapping[str, Any]) -> dict[str, Any]:
        return {"pid": os.getpid()}

    def _start(self, message: Mapping[str, Any]) -> dict[str, Any]:
        spec = ProcessSpec.from_json(message.get("spec"))
        if not spec.log_path:
            spec = replace(spec, log_path=str(self.paths.log_for(spec.name)))
        return self.start(spec).status().to_json()

    def _start_many(self, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Several starts in one request: each spec as `start`, one state-file write for all of
        them; one item's failure (a conflict, a program that cannot start) is its own answer."""
        raw = message.get("specs")
        if not isinstance(raw, list) or len(raw) > _MAX_BATCH:
            raise SupervisorError(BAD_REQUEST, f"specs: a list of at most {_MAX_BATCH} process specs")
        specs = []
        for index, item in enumerate(raw):
            try:
                spec = ProcessSpec.from_json(item)
            except SupervisorError as exc:
                raise SupervisorError(exc.code, f"specs[{index}]: {exc}") from None
            specs.append(spec if spec.log_path else replace(spec, log_path=str(self.paths.log_for(spec.name))))
        names = [spec.name for spec in specs]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise SupervisorError(BAD_REQUEST, f"specs: each name at most once ({', '.join(twice)[:200]} repeated)")
        def one(spec: ProcessSpec) -> dict[str, Any]:
            try:
                return {"ok": True, "result": self.start(spec, save=False).status().to_json()}
            except SupervisorError as exc:
                return {"ok": False, "error": {"code": exc.code, "message": str(exc)}}

        try:  # spawned together: each spawn waits for its child's exec, which the others overlap
            if len(specs) < 2:
                return [one(spec) for spec in specs]
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(_SPAWN_THREADS, len(specs)),
                                                       thread_name_prefix="spawn") as pool:
                return list(pool.map(one, specs))
        finally:
            self._save()  # on record, all of them, before the client hears of any

    def _stop_names(self, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Stop (and with `forget`, drop) at once the named processes and every process of the
        `owners`; names not on record are skipped."""
        names, owners = message.get("names", []), message.get("owners", [])
        if not isinstance(names, list) or not all(isinstance(name, str) and name for name in names):
            raise SupervisorError(BAD_REQUEST, "names: a list of names of supervised processes")
        if not isinstance(owners, list) or not all(isinstance(owner, str) for owner in owners):
            raise SupervisorError(BAD_REQUEST, "owners: a list of owner labels")
        wanted = set(owners)
        with self._lock:
            known = [name for name in dict.fromkeys(names) if name in self._records]
            known += [name for name, record in self._records.items() if record.spec.owner in wanted and name not in known]
        records = self._stop_many(known, _grace(message, self.settings), bool(message.get("forget")))
        return [r.status().to_json() for r in records]

    def _stop(self, message: Mapping[str, Any]) -> dict[str, Any]:
        return self.stop(_name(message), _grace(message, self.settings), bool(message.get("forget"))).status().to_json()

    def _restart(self, message: Mapping[str, Any]) -> dict[str, Any]:
        return self.restart(_name(message), _grace(message, self.settings)).status().to_json()

    def _list(self, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        owner = message.get("owner")
        with self._lock:
            return [r.status().to_json() for r in self._records.values() if owner is None or r.spec.owner == owner]

    def _stop_owner(self, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        owner = message.get("owner")
        if not isinstance(owner, str):
            raise SupervisorError(BAD_REQUEST, "owner: a string")
        with self._lock:
            names = [name for name, r in self._records.items() if r.spec.owner == owner]
        records = self._stop_many(names, _grace(message, self.settings), bool(message.get("forget")))
        return [r.status().to_json() for r in records]

    def _stop_all(self, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        with self._lock:
            names = list(self._records)
        records = self._stop_many(names, _grace(message, self.settings), False)
        with self._lock:
            self._exit_requested = True
        log.info("stopping everything and the daemon", extra={"fields": {"processes": len(names)}})
        return [r.status().to_json() for r in records]

    _OPERATIONS: Dict[str, Callable[["Supervisor", Mapping[str, Any]], Any]] = {
        "ping": _ping, "start": _start, "start_many": _start_many, "stop": _stop, "stop_many": _stop_names, "restart": _restart, "list": _list,
        "stop_owner": _stop_owner, "stop_all": _stop_all,
    }

    # ------------------------------------------------------------------------ the process table
    def _name_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._name_locks.setdefault(name, threading.Lock())

    def _get(self, name: str) -> ProcessRecord:
        with self._lock:
            record = self._records.get(name)
        if record is None:
            raise SupervisorError(NOT_FOUND, f"no supervised process named {name!r} in {self.paths.folder.parent}")
        return record

    def start(self, spec: ProcessSpec, save: bool = True) -> ProcessRecord:
        """Start `spec` (or return its live record); `save=False` leaves the state-file write to
        the caller, which must make it before answering (`_start_many`: one write for a batch)."""
        with self._name_lock(spec.name):
            with self._lock:
                record = self._records.get(spec.name)
            if record is not None and record.state in LIVE:
                differences = record.spec.differences(spec)
                if differences:
                    raise SupervisorError(SPEC_CONFLICT, f"{spec.name}: already {record.state} (pid {record.pid}) with another "
                                          f"{', '.join(differences)}; stop it first or choose another name")
                return record
            same = record is not None and not record.spec.differences(spec)
            return self._spawn(spec, record.restarts + 1 if record is not None and same else 0, save)

    def _spawn(self, spec: ProcessSpec, restarts: int, save: bool = True) -> ProcessRecord:
        log_path = Path(spec.log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            os.write(descriptor, f"--- crhelper supervisor: start {restarts + 1} of {spec.name} at {stamp} ---\n".encode())
            env = {**self._base_env, **spec.env}
            with self._lock:  # the stray reaper leaves children alone until they are registered
                self._spawning += 1
            try:
                try:
                    proc = start_process(spec.argv, cwd=spec.cwd or None, env=env, stdout=descriptor,
                                         stderr=subprocess.STDOUT)
                except OSError as exc:
                    what = exc.filename if exc.filename is not None else spec.argv[0]
                    raise SupervisorError(START_FAILED, f"{spec.name}: cannot start: {exc.strerror or exc}: {what!r}") from None
                record = ProcessRecord(spec=spec, state=STARTING if spec.ready_port else RUNNING, pid=proc.pid,
                                       start_ticks=process_start_ticks(proc.pid), started_at=time.time(),
                                       restarts=restarts)
                with self._lock:
                    self._records[spec.name] = record
                    self._procs[spec.name] = proc
            finally:
                with self._lock:
                    self._spawning -= 1
        finally:
            os.close(descriptor)
        # On record before the client hears of it. A daemon killed between the spawn and this write leaves
        # the process unrecorded and the client unanswered, as when the spawn and the write shared the lock.
        if save:
            self._save()
        log.info("started", extra={"fields": {"name": spec.name, "pid": proc.pid, "owner": spec.owner}})
        return record

    def stop(self, name: str, grace: float, forget: bool = False) -> ProcessRecord:
        with self._name_lock(name):
            record = self._get(name)
            if record.state in LIVE:
                self._stop_record(record, grace)
            if forget:
                with self._lock:
                    self._records.pop(name, None)
                    self._procs.pop(name, None)
                self._save()
            return record

    def restart(self, name: str, grace: float) -> ProcessRecord:
        with self._name_lock(name):
            record = self._get(name)
            if record.state in LIVE:
                self._stop_record(record, grace)
            return self._spawn(record.spec, record.restarts + 1)

    def _stop_many(self, names: Sequence[str], grace: float, forget: bool) -> List[ProcessRecord]:
        """Stop several at once, so the whole takes one grace, not one per process."""
        if not names:
            return []
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(names)), thread_name_prefix="stop") as pool:
            return list(pool.map(lambda name: self.stop(name, grace, forget), names))

    def _stop_record(self, record: ProcessRecord, grace: float) -> None:
        """TERM, then KILL after `grace`, the record's process group (name lock held)."""
        assert record.pid is not None
        proc = self._procs.get(record.spec.name)
        if proc is None and not process_alive(record.pid, record.start_ticks):
            record.finish(EXITED, None, _NOTE_LOST)  # an adopted process that is gone (or a reused pid)
        else:
            ended_before = proc.poll() if proc is not None else None
            killed = stop_group(record.pid, grace, reap=proc.poll if proc is not None else None)
            code = proc.wait(5.0) if proc is not None else None
            if ended_before is not None:
                record.finish(EXITED, ended_before, record.note)
            else:
                record.finish(STOPPED, code, "SIGKILL after the grace" if killed else record.note)
            log.info("stopped", extra={"fields": {"name": record.spec.name, "exit_code": code, "killed": killed}})
        self._save()

    # --------------------------------------------------------------------------------- watching
    def check(self) -> None:
        """One look at every live process: exits, readiness, orphans to reap."""
        self._reap_strays()
        changed = False
        with self._lock:
            live = [r for r in self._records.values() if r.state in LIVE]
        for record in live:
            lock = self._name_lock(record.spec.name)
            if not lock.acquire(blocking=False):
                continue  # an operation on it is under way
            try:
                changed = self._check_record(record) or changed
            finally:
                lock.release()
        if changed:
            with self._lock:
                self._last_activity = time.monotonic()
            self._save()

    def _check_record(self, record: ProcessRecord) -> bool:
        assert record.pid is not None
        proc = self._procs.get(record.spec.name)
        if proc is not None:
            code = proc.poll()
            ended = code is not None
        else:
            code, ended = None, not process_alive(record.pid, record.start_ticks)
        if ended:
            record.finish(EXITED, code, record.note if proc is None else "")
            log.info("exited", extra={"fields": {"name": record.spec.name, "exit_code": code}})
            if group_alive(record.pid):  # it left processes behind in its group: end them too
                cleanup = threading.Thread(target=stop_group, args=(record.pid, self.settings.grace),
                                           name=f"cleanup-{record.spec.name}", daemon=True)
                cleanup.start()
                with self._lock:
                    self._cleanups.append(cleanup)
            return True
        spec = record.spec
        if record.state == STARTING and port_open(spec.ready_host, spec.ready_port, timeout=0.1):
            record.state = RUNNING
            return True
        return False

    def _reap_strays(self) -> None:
        """As child subreaper the daemon inherits the orphaned descendants of its processes: reap
        those, and leave its own children to their Popen (which must read their exit codes)."""
        if not self._subreaper:
            return
        while True:
            with self._lock:
                if self._spawning:
                    return  # a child forked but not registered yet could be taken for a stray: next round
                try:
                    info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    return
                if info is None:
                    return
                ours = next((p for p in self._procs.values() if p.pid == info.si_pid), None)
                if ours is None:
                    os.waitpid(info.si_pid, 0)
                elif ours.poll() is None:
                    return  # its Popen is busy waiting for it elsewhere: let that collect it


def _name(message: Mapping[str, Any]) -> str:
    name = message.get("name")
    if not isinstance(name, str) or not name:
        raise SupervisorError(BAD_REQUEST, "name: the name of a supervised process")
    return name


def _grace(message: Mapping[str, Any], settings: SupervisorSettings) -> float:
    grace = message.get("grace")
    if grace is None:
        return settings.grace
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= _MAX_GRACE:
        raise SupervisorError(BAD_REQUEST, f"grace: seconds from 0 to {_MAX_GRACE:g}, got {grace!r}"[:200])
    return float(grace)


# ------------------------------------------------------------------------------------------ server
class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    block_on_close = False
    #: A tier of ten instances starting at once: with the default backlog of 5 a Unix socket's
    #: connect fails at once (EAGAIN) instead of waiting.
    request_queue_size = 128

    def __init__(self, path: str, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        super().__init__(path, _Handler)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        supervisor = self.server.supervisor
        sock: socket.socket = self.request
        uid = peer_uid(sock)
        if uid is not None and uid != os.getuid():
            log.warning("refused a client of another user", extra={"fields": {"peer_uid": uid}})
            # Take its request first (briefly, never acting on it): refusing before it is read would
            # close the socket under a client still sending, which then sees a reset, not the reason.
            sock.settimeout(2.0)
            try:
                read_message(sock)
            except (OSError, ValueError):
                pass
            self._reply({"ok": False, "error": {"code": REFUSED, "message": f"uid {uid} may not use the supervisor of "
                                                                            f"uid {os.getuid()}"}})
            return
        if not supervisor.begin_request():
            self._reply({"ok": False, "error": {"code": EXITING, "message": "the supervisor daemon is exiting"}})
            return
        try:
            sock.settimeout(_REQUEST_READ_TIMEOUT)
            try:
                message = read_message(sock)
            except (ValueError, OSError) as exc:
                self._reply({"ok": False, "error": {"code": BAD_REQUEST, "message": f"unreadable request: {exc}"[:300]}})
                return
            if message is None:
                return
            sock.settimeout(None)
            self._reply(supervisor.handle(message))
        finally:
            supervisor.end_request()

    def _reply(self, answer: Mapping[str, Any]) -> None:
        try:
            send_message(self.request, answer)
        except OSError:
            pass  # the client left; its request was done all the same


def _socket_connectable(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def serve(supervisor_paths: SupervisorPaths, settings: SupervisorSettings,
          report: Callable[[str], None] = lambda text: None) -> int:
    """Own the home (its lock), listen, watch the processes until told to stop or idle; 0 on a clean exit."""
    lock = StateLock(supervisor_paths.lock)
    deadline = time.monotonic() + _LOCK_WAIT_SECONDS
    while not lock.acquire():  # a daemon is starting or exiting: wait a little, unless it already answers
        if _socket_connectable(supervisor_paths.socket) or time.monotonic() >= deadline:
            report("busy")
            return 0
        time.sleep(0.02)
    server: _Server | None = None
    try:
        supervisor = Supervisor(supervisor_paths, settings, os.environ)
        supervisor.load()
        socket_path = supervisor_paths.socket
        socket_path.unlink(missing_ok=True)  # a killed daemon's; we hold the lock, so it is no one's now
        server = _Server(str(socket_path), supervisor)
        os.chmod(socket_path, 0o600)
        supervisor_paths.pid.write_text(f"{os.getpid()}\n", encoding="ascii")
        threading.Thread(target=server.serve_forever, args=(0.05,), name="supervisor-socket", daemon=True).start()
        log.info("supervisor daemon listening", extra={"fields": {"pid": os.getpid(), "socket": str(socket_path)}})
        report(f"ready {os.getpid()}")
        with stop_requested() as stop:
            while not stop.wait(settings.poll):
                supervisor.check()
                if supervisor.should_exit():
                    break
            if stop.is_set():
                log.info("signalled: exiting, processes left running for the next daemon")
        supervisor.close()
        return 0
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
            supervisor_paths.socket.unlink(missing_ok=True)
        supervisor_paths.pid.unlink(missing_ok=True)
        lock.release()
        log.info("supervisor daemon exited", extra={"fields": {"pid": os.getpid()}})


def _redirect_output(daemon_log: Path) -> None:
    """stdin from /dev/null, stdout and stderr to the daemon's log (kept under about 1 MiB)."""
    try:
        if daemon_log.stat().st_size > _MAX_DAEMON_LOG_BYTES:
            os.replace(daemon_log, daemon_log.with_name(daemon_log.name + ".1"))
    except FileNotFoundError:
        pass
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(daemon_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crhelper.local.supervisor_daemon",
                                     description="The supervisor daemon of one CRHELPER_HOME (clients start it on demand).")
    parser.add_argument("--home", default=None, help="the CRHELPER_HOME to supervise (default: $CRHELPER_HOME or ~/.crhelper)")
    parser.add_argument("--foreground", action="store_true", help="do not fork; log to stderr")
    args = parser.parse_args(argv)
    try:
        settings = SupervisorSettings.from_env()
        supervisor_paths = SupervisorPaths.for_home(Path(args.home) if args.home else None)
        supervisor_paths.ensure()
    except (ConfigError, SupervisorError, OSError) as exc:
        print(f"crhelper supervisor: {exc}", file=sys.stderr)
        return 2
    if args.foreground:
        configure()
        return serve(supervisor_paths, settings, lambda text: print(text, flush=True))
    read_end, write_end = os.pipe()
    child = os.fork()
    if child:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as answer:
            said = answer.read().decode("ascii", "replace").strip()
        print(said or f"the daemon exited before it listened; see {supervisor_paths.daemon_log}")
        return 0 if said.startswith(("ready", "busy")) else 1
    os.close(read_end)
    os.setsid()
    code = 1
    try:
        _redirect_output(supervisor_paths.daemon_log)
        configure()

        def report(text: str) -> None:
            os.write(write_end, text.encode("ascii"))
            os.close(write_end)

        code = serve(supervisor_paths, settings, report)
    except BaseException:  # noqa: BLE001 - a daemon has no one to raise to: log it and exit
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
