"""A pre-importing fork server: cheap cold starts for the local Function Compute's instances.

Starting a Python process and importing crhelper costs a few hundred milliseconds of CPU; fifty cold
instances at once on two cores cost seconds. The fork server is one process (`python -m
crhelper.local.fc_fork`, one per endpoint process: `shared_server`) that imports those modules once and forks a
worker per new instance: the worker inherits them, copy-on-write, and only imports the function's
own module. Only framework modules and the libraries named to it are pre-imported, never a
function's code, so no module-level side effect of a function is shared between instances.

Protocol, over a SOCK_SEQPACKET socket pair (the server's end is its stdin): the endpoint sends
one JSON message per fork, `{"env", "cwd", "sys_path", "preload"}`, carrying three descriptors
(job pipe read end, result pipe write end, log pipe write end) and an `id`; the server answers
`{"id", "pid": n}` (or `{"id", "error": text}`) in order, so requests are pipelined, and `{"exit": pid, "code": n}` when it reaps an instance (`n` as
`Popen.returncode`: negative for a signal). Each instance leads its own process group
(a SIGKILL of the group ends what it spawned; the group is set by both sides, as a shell does, so it
exists before the endpoint hears the pid) and dies with the server, which dies with the
endpoint. The server is single-threaded, as forking requires; at the end of its socket it kills
every instance's group and exits.

Forks are served by several processes at once (CRHELPER_FC_FORK_SERVERS, default 4): after its first
fork (its imports, and the first function's, done) the server forks copies of itself, each reading
requests from the same socket (a
SOCK_SEQPACKET message goes to exactly one reader; replies are whole messages too). A burst of 50
cold starts is then not one serial chain of forks: on a loaded machine each process gets its own
share of the CPU, and a single server, competing with the instances it has just forked, became the
slowest step of a 50-resource stack. Each copy reaps and reports its own instances and dies with the
server (their instances die with them).
"""
from __future__ import annotations

import array
import gc
import importlib
import io
import json
import os
import queue
import selectors
import signal
import socket
import subprocess
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, Callable, Mapping, Sequence

from crhelper.local.processes import PARENT_PID_ENV, die_with_parent, python_env, signal_group, start_process

_MAX_MESSAGE = 4 << 20
SERVERS_SETTING = "CRHELPER_FC_FORK_SERVERS"
#: Processes serving forks (the server and its copies).
DEFAULT_SERVERS = 4
_REPLY_SECONDS = 30.0
#: Exit status of an instance whose setup failed before it could serve.
SETUP_FAILED = 70


# --- the server process ------------------------------------------------------------------------

def _preload(modules: Sequence[str], done: set[str]) -> None:
    fresh = [name for name in modules if name not in done]
    for name in fresh:
        done.add(name)
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that fails here fails in the instance, precisely
            pass
    if fresh:
        gc.freeze()  # what is loaded now stays out of the instances' collections: their pages stay shared


def _become_instance(server_pid: int, closing: Sequence[int], fds: Sequence[int], request: Mapping[str, Any]) -> int:
    """In the forked child: a process group of its own, the function's environment, then serve jobs."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setpgid(0, 0)  # the server does it too: whichever runs first, the group exists before anyone kills it
    die_with_parent({PARENT_PID_ENV: str(server_pid)})
    for fd in closing:
        os.close(fd)
    job_fd, result_fd, log_fd = fds
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    if request.get("cwd"):
        os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request.get("env") or {})
    if isinstance(sys.stdout, io.TextIOWrapper):  # as PYTHONUNBUFFERED does for a spawned worker: lines stream
        sys.stdout.reconfigure(line_buffering=True)
    importlib.invalidate_caches()  # files written since the server listed a folder
    from crhelper.local.fc_worker import serve

    return serve(job_fd, result_fd)


def _send(control: socket.socket, message: Mapping[str, Any]) -> None:
    try:
        control.send(json.dumps(message).encode("utf-8"))
    except OSError:
        pass  # the endpoint is gone: the loop ends at the socket's end


def _fork(control: socket.socket, closing: Sequence[int], fds: list[int], request: Mapping[str, Any],
          loaded: set[str], children: set[int]) -> None:
    for path in reversed(list(request.get("sys_path") or [])):
        if path not in sys.path:
            sys.path.insert(0, path)
    _preload(list(request.get("preload") or []), loaded)
    server_pid = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:
        _send(control, {"id": request.get("id"), "error": f"fork failed: {exc}"})
        return
    if pid == 0:
        code = SETUP_FAILED
        try:
            code = _become_instance(server_pid, [control.fileno(), *closing], fds, request)
        except BaseException:  # noqa: BLE001 - whatever happens, the child never returns into the server loop
            traceback.print_exc()
        finally:
            os._exit(code)
    try:
        os.setpgid(pid, pid)
    except OSError:  # it did so itself already (EACCES after its exec never happens: it does not exec)
        pass
    children.add(pid)
    _send(control, {"id": request.get("id"), "pid": pid})


def _reap(control: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(control, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _receive(control: socket.socket) -> tuple[bytes, list[int]]:
    """One request and its descriptors, without waiting (BlockingIOError when another serving process
    took it). Not `socket.recv_fds`: it drops its `flags` (CPython through 3.12), so MSG_DONTWAIT
    did not apply and a server that lost the race slept in recvmsg, reaping nothing until the next
    request."""
    fds = array.array("i")
    message, ancillary, _, _ = control.recvmsg(_MAX_MESSAGE, socket.CMSG_LEN(3 * fds.itemsize), socket.MSG_DONTWAIT)
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    return message, list(fds)


def _servers(env: Mapping[str, str]) -> int:
    text = env.get(SERVERS_SETTING, "").strip()
    return max(1, min(int(text), 64)) if text.isdigit() else DEFAULT_SERVERS


def serve_forks(control: socket.socket, preload: Sequence[str] = (), servers: int = 1) -> int:
    """The server: import `preload`, then fork on request and report exits; once the first request's
    own imports are done (the function's handler module and libraries), `servers - 1` copies of it
    serve beside it. At the socket's end each kills its instances."""
    loaded: set[str] = set()
    _preload(preload, loaded)
    return _serve(control, loaded, servers - 1)


def _start_copies(control: socket.socket, loaded: set[str], count: int, inherited: Sequence[int],
                  selector: selectors.BaseSelector) -> None:
    """Fork `count` copies of this server, each serving the same socket until its end, then exiting
    (never returning into the caller's loop). A copy first closes what it inherited from the loop:
    `inherited` (the request's descriptors: an instance's pipe ends held open elsewhere would hide
    its death; the loop's wake-up pipe) and the selector."""
    server_pid = os.getpid()
    for _ in range(count):
        try:
            pid = os.fork()
        except OSError:
            return  # fewer copies: the requests still get served
        if pid == 0:
            code = 1
            try:
                signal.set_wakeup_fd(-1)  # the loop's pipe is closed next
                selector.close()
                for fd in inherited:
                    os.close(fd)
                die_with_parent({PARENT_PID_ENV: str(server_pid)})
                code = _serve(control, loaded, 0)
            finally:
                os._exit(code)


def _serve(control: socket.socket, loaded: set[str], copies: int) -> int:
    """One serving process's loop (its own SIGCHLD wake-up pipe: each reaps its own instances);
    `copies` of it start after its first fork."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj == wake_read:
                    while True:
                        try:
                            if not os.read(wake_read, 512):
                                break
                        except BlockingIOError:
                            break
                    _reap(control, children)
                    continue
                try:  # another serving process may have taken the message: never block here
                    message, fds = _receive(control)
                except (BlockingIOError, InterruptedError):
                    continue
                if not message:
                    return 0
                try:
                    request = json.loads(message.decode("utf-8"))
                    if len(fds) != 3:
                        raise ValueError(f"expected 3 descriptors, got {len(fds)}")
                    _fork(control, [wake_read, wake_write], fds, request, loaded, children)
                    if copies:  # the request's imports are done: the copies inherit them
                        _start_copies(control, loaded, copies, [*fds, wake_read, wake_write], selector)
                        copies = 0
                except ValueError as exc:
                    _send(control, {"id": None, "error": f"bad fork request: {exc}"})
                finally:
                    for fd in fds:
                        os.close(fd)
            _reap(control, children)
    finally:
        for pid in list(children):
            signal_group(pid, signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m crhelper.local.fc_fork [module ...]`: import the modules, then serve forks."""
    die_with_parent()
    control = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return serve_forks(control, ["crhelper.local.fc_worker", *(sys.argv[1:] if argv is None else argv)],
                       _servers(os.environ))


# --- the endpoint's side -----------------------------------------------------------------------

class ForkError(RuntimeError):
    """The fork server could not start an instance (it is gone, or fork failed)."""


class ForkedProcess:
    """An instance forked by the server: its pipes, its group, and its exit code as reported."""

    def __init__(self, server: "ForkServer", pid: int, job: IO[bytes], result: IO[bytes], log: IO[bytes]) -> None:
        self._server = server
        self.pid = pid
        self.job = job
        self.result = result
        self.log = log

    def kill(self) -> None:
        if not signal_group(self.pid, signal.SIGKILL) and self._server.exit_code(self.pid, 0) is None:
            try:
                os.kill(self.pid, signal.SIGKILL)  # not reaped yet, yet no group: it left it (a handler's setsid)
            except ProcessLookupError:
                pass

    def exit_code(self, timeout: float) -> int | None:
        return self._server.exit_code(self.pid, timeout)


class ForkServer:
    """The endpoint's handle on one fork server process.

    `launch(fn)` runs `fn` on a thread that lives as long as the endpoint: the server's parent death
    signal fires when the thread that started it ends, not only the process.
    """

    def __init__(self, python: str = sys.executable, *, launch: Callable[[Callable[[], Any]], Any] | None = None,
                 preload: Sequence[str] = ()) -> None:
        self._python = python
        self._preload = list(preload)
        self._launch = launch or (lambda fn: fn())
        self._lock = threading.Lock()
        self._next_id = 0
        self._waiting: dict[int, "queue.Queue[dict[str, Any] | None]"] = {}
        self._exits: dict[int, int] = {}
        self._exited = threading.Condition()
        self._socket: socket.socket | None = None
        self._process: Any = None
        self._closed = False

    def start(self) -> "ForkServer":
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = self._launch(lambda: start_process(
                [self._python, "-m", "crhelper.local.fc_fork", *self._preload], stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL, stderr=None, env=python_env(os.environ),
                die_with_parent=True))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._socket = ours
        threading.Thread(target=self._read, args=(ours,), name="fc-fork-server", daemon=True).start()
        return self

    @property
    def pid(self) -> int | None:
        return None if self._process is None else int(self._process.pid)

    @property
    def alive(self) -> bool:
        return self._socket is not None and not self._closed and self._process.poll() is None

    def _read(self, sock: socket.socket) -> None:
        while True:
            try:
                message = sock.recv(_MAX_MESSAGE)
            except OSError:
                message = b""
            if not message:
                break
            reply = json.loads(message.decode("utf-8"))
            if "exit" in reply:
                with self._exited:
                    self._exits[int(reply["exit"])] = int(reply["code"])
                    self._exited.notify_all()
                continue
            with self._lock:
                slot = self._waiting.pop(reply.get("id"), None)
            if slot is not None:
                slot.put(reply)
        with self._lock:
            self._closed = True
            waiting, self._waiting = list(self._waiting.values()), {}
        for slot in waiting:
            slot.put(None)
        with self._exited:
            self._exited.notify_all()

    def fork(self, env: Mapping[str, str], cwd: str | None, sys_path: Sequence[str],
             preload: Sequence[str]) -> ForkedProcess:
        """A new instance with the given environment; ForkError when the server cannot make one."""
        job_r, job_w = os.pipe()
        result_r, result_w = os.pipe()
        log_r, log_w = os.pipe()
        slot: "queue.Queue[dict[str, Any] | None]" = queue.Queue(1)
        try:
            with self._lock:  # requests are pipelined: a burst of cold starts does not wait a round trip each
                if self._socket is None or self._closed:
                    raise ForkError("the fork server is not running")
                self._next_id += 1
                request_id = self._next_id
                self._waiting[request_id] = slot
                request = json.dumps({"id": request_id, "env": dict(env), "cwd": cwd, "sys_path": list(sys_path),
                                      "preload": list(preload)}).encode("utf-8")
                try:
                    socket.send_fds(self._socket, [request], [job_r, result_w, log_w])
                except OSError as exc:
                    self._waiting.pop(request_id, None)
                    raise ForkError(f"the fork server is gone: {exc}") from None
            try:
                reply = slot.get(timeout=_REPLY_SECONDS)
            except queue.Empty:
                with self._lock:
                    self._waiting.pop(request_id, None)
                raise ForkError("the fork server did not answer in time") from None
            if reply is None or "pid" not in reply:
                raise ForkError((reply or {}).get("error") or "the fork server exited")
        except BaseException:
            for fd in (job_w, result_r, log_r):
                os.close(fd)
            raise
        finally:
            for fd in (job_r, result_w, log_w):
                os.close(fd)
        return ForkedProcess(self, int(reply["pid"]), os.fdopen(job_w, "wb"), os.fdopen(result_r, "rb"),
                             os.fdopen(log_r, "rb"))

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """The instance's exit code once the server reaped it; None if not within `timeout` seconds."""
        with self._exited:
            self._exited.wait_for(lambda: pid in self._exits or self._closed, timeout)
            return self._exits.get(pid)

    def close(self) -> None:
        """End the server; it SIGKILLs every instance's group as it goes."""
        with self._lock:
            sock, self._socket = self._socket, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self._process is not None:
            try:
                self._process.wait(5)
            except Exception:  # noqa: BLE001 - it ignored its socket's end: kill it
                self._process.kill()
                self._process.wait()


_shared_lock = threading.Lock()
_shared: dict[str, ForkServer] = {}
_shared_launcher: ThreadPoolExecutor | None = None


def shared_server(python: str = sys.executable, preload: Sequence[str] = ()) -> ForkServer:
    """This process's fork server for `python`, started on first use (importing `preload` at once,
    while the caller goes on) and kept while the process lives: every endpoint of the process shares
    it, so its imports are paid once per process, not per endpoint or stack operation. It is started
    from a thread that lives as long as the process (its parent death signal follows that thread)."""
    global _shared_launcher
    with _shared_lock:
        server = _shared.get(python)
        if server is not None and server.alive:
            return server
        if server is not None:
            server.close()
        if _shared_launcher is None:
            _shared_launcher = ThreadPoolExecutor(1, thread_name_prefix="fc-fork-launcher")
        launcher = _shared_launcher
        server = ForkServer(python, launch=lambda start: launcher.submit(start).result(), preload=preload).start()
        _shared[python] = server
        return server


if __name__ == "__main__":
    sys.exit(main())
