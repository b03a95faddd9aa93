"""A local Apache CloudStack API endpoint that the unpatched `cs` client talks to.

    with LocalCloudStack(settings=CloudStackSettings(start_seconds=0.1)) as cloud:
        vm = cloud.add_vm("db-1", guest=["python3", "-m", "http.server", "5432", "--bind", "127.0.0.2"])
        cloud.client(fetch_result=True, poll_interval=0.05).startVirtualMachine(id=vm.id)

Requests are verified as a Java CloudStack server verifies them (`cloudstack_api`); VMs move through
their states on a ticker (`cloudstack_state`). Each VM may carry a guest command, run as a real
process group while the VM is Running (like an instance's boot script: env `VM_ID`, `VM_NAME`,
`VM_IP`, `HOST`; the VM's private IP is its own loopback address 127.0.0.N), killed as it starts
stopping, so a TCP check sees it come and go.

Extensions add commands (`CloudStackExtension`): those installed in the entry-point group
`crhelper.local.cloudstack` (the boot-group API of `handlers.bootgroups.cloudstack_service`) are
loaded when the endpoint starts, or the constructor's `extensions` are used instead.

Standalone: `python -m crhelper.local.cloudstack_server --vm web-1@web --vm 'db-1=python3 -m http.server'`
with the key pair `cs` reads too: CLOUDSTACK_KEY / CLOUDSTACK_SECRET.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import replace
from types import TracebackType
from typing import Any, Callable, Sequence

from crhelper.cloud.credentials import Credentials
from crhelper.local.cloudstack_api import API_PATH, CONTENT_TYPE, CloudStackApi, CloudStackExtension, RecordedRequest
from crhelper.local.cloudstack_state import (
    RUNNING, STOPPED, CloudStackSettings, CloudStackState, InstanceGroup, PowerEvent, VirtualMachine,
    invalid_parameter)
from crhelper.local.processes import start_process
from crhelper.local.supervisor import stop_group
from crhelper.logs import get_logger
from crhelper.servers import ApiRequestHandler, ApiResponse, LocalHTTPServer, ServerThread
from crhelper.signals import stop_requested

KEY_ENV, SECRET_ENV = "CLOUDSTACK_KEY", "CLOUDSTACK_SECRET"
#: The entry-point group of the endpoint's extensions: callables `(LocalCloudStack) -> CloudStackExtension`.
EXTENSION_GROUP = "crhelper.local.cloudstack"
#: The longest the ticker sleeps between looks at the job engine (an injected clock may jump).
_TICK_CAP_SECONDS = 0.1
#: More than any API call sends (a form body of 1,000 parameters).
_MAX_BODY = 1024 * 1024

_log = get_logger("local.cloudstack")


class _CloudStackHttpServer(LocalHTTPServer):
    owner: "LocalCloudStack"


class _Handler(ApiRequestHandler):
    server: _CloudStackHttpServer

    def _serve(self) -> None:
        length = self.headers.get("Content-Length", "0") or "0"
        if length.isdigit() and int(length) <= _MAX_BODY:
            body = self.rfile.read(int(length)) if int(length) else b""
            response = self.server.owner.handle(self.command, self.path, dict(self.headers.items()), body)
        else:  # the body cannot be read safely: answer and drop the connection
            self.close_connection = True
            error = invalid_parameter(f"Content-Length: must be a whole number of bytes up to {_MAX_BODY}")
            response = ApiResponse(error.errorcode, {"Content-Type": CONTENT_TYPE},
                                   json.dumps({"errorresponse": error.body()}).encode())
        self.write_response(response)

    do_GET = do_POST = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # a request line carries the query (and its signature): never logged


class GuestProcesses:
    """The guest command of each Running VM, as a process group of its own."""

    def __init__(self, grace: float, log_dir: str | None = None) -> None:
        self.grace = grace
        self.log_dir = log_dir
        self._running: dict[str, "subprocess.Popen[bytes]"] = {}

    def pid(self, vm_id: str) -> int | None:
        proc = self._running.get(vm_id)
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self, vm: VirtualMachine) -> None:
        if vm.guest is None or self.pid(vm.id) is not None:
            return
        argv = ["/bin/sh", "-c", vm.guest] if isinstance(vm.guest, str) else list(vm.guest)
        env = {**os.environ, "VM_ID": vm.id, "VM_NAME": vm.name, "VM_IP": vm.ip, "HOST": vm.ip}
        output: Any = subprocess.DEVNULL
        if self.log_dir is not None:
            output = open(os.path.join(self.log_dir, f"{vm.name}.log"), "ab")
        try:
            self._running[vm.id] = start_process(argv, env=env, stdout=output, stderr=subprocess.STDOUT)
        except OSError as exc:
            _log.warning("guest of VM %s (%s) did not start: %s", vm.name, vm.id, exc)
        finally:
            if output is not subprocess.DEVNULL:
                output.close()

    def stop(self, vm_id: str) -> None:
        proc = self._running.pop(vm_id, None)
        if proc is None:
            return
        stop_group(proc.pid, self.grace, reap=proc.poll)
        proc.wait()

    def stop_all(self) -> None:
        for vm_id in list(self._running):
            self.stop(vm_id)


#: What builds an extension for one endpoint (an entry point of EXTENSION_GROUP, or given to the constructor).
ExtensionFactory = Callable[["LocalCloudStack"], CloudStackExtension]


@functools.lru_cache(maxsize=1)
def installed_extensions() -> tuple[tuple[str, ExtensionFactory | None, str], ...]:
    """The factories of the entry-point group EXTENSION_GROUP (read once per process): (name,
    factory, "") or, for one that cannot be loaded, (name, None, why)."""
    from importlib.metadata import entry_points  # at start only: the import path stays light

    found: list[tuple[str, ExtensionFactory | None, str]] = []
    for point in sorted(entry_points(group=EXTENSION_GROUP), key=lambda point: point.name):
        try:
            found.append((point.name, point.load(), ""))
        except Exception as exc:  # noqa: BLE001 - one broken package must not stop the endpoint
            found.append((point.name, None, f"{point.value}: {type(exc).__name__}: {exc}"))
    return tuple(found)


class LocalCloudStack:
    """A CloudStack endpoint on 127.0.0.1 (`endpoint`: `http://127.0.0.1:PORT/client/api`) with
    one key pair (`api_key`, `secret`; generated when not given).

    `extensions`: factories of the extra commands to serve (tests give them here); None: those
    installed in the entry-point group `crhelper.local.cloudstack` (the boot-group API), loaded
    when the endpoint starts. `extensions=()` serves the built-in commands only."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None,
                 secret: str | None = None, settings: CloudStackSettings | None = None,
                 clock: Callable[[], float] = time.time, require_expires: bool = False,
                 guest_log_dir: str | None = None, extensions: Sequence[ExtensionFactory] | None = None) -> None:
        self.api_key = api_key or secrets.token_urlsafe(32)
        self.secret = secret or secrets.token_urlsafe(32)
        self.state = CloudStackState(settings or CloudStackSettings(), clock)
        self.api = CloudStackApi(self.state, {self.api_key: Credentials(self.api_key, self.secret)},
                                 require_expires=require_expires)
        self.guests = GuestProcesses(self.state.settings.guest_stop_grace, guest_log_dir)
        self._address = (host, port)
        self._server: _CloudStackHttpServer | None = None
        self._serving: ServerThread | None = None
        self._apply_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._ticker: threading.Thread | None = None
        self._factories = None if extensions is None else list(extensions)
        #: The extensions serving now (built at start, closed at stop).
        self.extensions: list[CloudStackExtension] = []

    def __repr__(self) -> str:  # the secret stays out
        return f"LocalCloudStack(endpoint={self.endpoint if self._server else None!r}, api_key={self.api_key!r})"

    # ---------------------------------------------------------------------------- lifecycle
    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("LocalCloudStack is not started; call start() first")
        return f"http://{self._server.host}:{self._server.port}{API_PATH}"

    def start(self) -> "LocalCloudStack":
        if self._server is not None:
            raise RuntimeError("LocalCloudStack is already started")
        self._load_extensions()
        server = _CloudStackHttpServer(self._address, _Handler)
        server.owner = self
        self._server = server
        self._stopping.clear()
        self._ticker = threading.Thread(target=self._tick_forever, name="cloudstack-ticker", daemon=True)
        self._ticker.start()
        self._serving = ServerThread(server, "cloudstack-local-http").start()
        return self

    def stop(self) -> None:
        """Stop serving and the ticker, close the extensions (their jobs end), then kill every
        guest process."""
        if self._server is None or self._serving is None:
            return
        self._serving.stop_accepting()
        self._stopping.set()
        self._wake.set()
        if self._ticker is not None:
            self._ticker.join(5.0)
        self._close_extensions()
        self._serving.stop()
        with self._apply_lock:
            self.guests.stop_all()
        self._server = self._serving = self._ticker = None

    def _load_extensions(self) -> None:
        """The given factories (their errors raise), else the installed ones (an error is logged
        and the endpoint serves without that extension)."""
        if self._factories is not None:
            for given in self._factories:
                self._add_extension(given(self))
            return
        for name, factory, why in installed_extensions():
            try:
                if factory is None:
                    raise RuntimeError(why)
                self._add_extension(factory(self))
            except Exception as exc:  # noqa: BLE001 - one broken package must not stop the endpoint
                _log.error("cloudstack extension %s not served: %s", name, exc)

    def _add_extension(self, extension: CloudStackExtension) -> None:
        self.api.extend(extension)
        self.extensions.append(extension)
        _log.info("cloudstack extension %s serves %d command(s)", extension.name, len(extension.commands))

    def _close_extensions(self) -> None:
        """End the extensions' work (their running jobs) and stop serving their commands."""
        for extension in self.extensions:
            self.api.retract(extension)
            try:
                extension.close()
            except Exception:  # noqa: BLE001 - the endpoint still stops
                _log.error("cloudstack extension %s did not close cleanly", extension.name, exc_info=True)
        self.extensions = []

    def __enter__(self) -> "LocalCloudStack":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------------------------ serving
    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> ApiResponse:
        """One HTTP request; power events it caused are acted on before it is answered."""
        response = self.api.handle(method, target, headers, body)
        self.advance()
        return response

    def advance(self) -> None:
        """Take due steps and start or kill guests accordingly (the ticker does this on its own;
        tests on an injected clock call it after moving the clock)."""
        with self._apply_lock:
            self.state.advance()
            for event in self.state.drain_events():
                self._apply(event)
        self._wake.set()

    def _apply(self, event: PowerEvent) -> None:
        if event.running:
            self.guests.start(self.state.snapshot(event.vm_id))
        else:
            self.guests.stop(event.vm_id)

    def _tick_forever(self) -> None:
        while not self._stopping.is_set():
            try:
                self.advance()
            except Exception:  # a guest that cannot be stopped must not end the ticker
                _log.error("cloudstack ticker: acting on a power event failed", exc_info=True)
            self._wake.clear()
            due = self.state.next_due()
            self._wake.wait(1.0 if due is None else min(max(due - self.state.clock(), 0.0), _TICK_CAP_SECONDS))

    # ------------------------------------------------------------------------------ helpers
    def client(self, **kwargs: Any) -> Any:
        """A `cs.CloudStack` on this endpoint with its key pair (`key`/`secret` may be overridden:
        a wrong secret, or None for unsigned requests); `cs` is imported here only."""
        import cs

        return cs.CloudStack(**{"endpoint": self.endpoint, "key": self.api_key, "secret": self.secret, **kwargs})

    def add_vm(self, name: str, *, state: str = STOPPED, hypervisor: str = "KVM", group: str | None = None,
               guest: Sequence[str] | str | None = None, displayname: str | None = None,
               template_type: str = "USER", vm_type: str | None = None,
               autoscale_group: str | None = None) -> VirtualMachine:
        """A new VM (Stopped, or Running with its guest started); `group` names an instance group
        (made when new); `template_type`, `vm_type`, `autoscale_group` as in `CloudStackState.add_vm`.
        Returns a snapshot: `id`, `ip` (127.0.0.N), ..."""
        vm = self.state.add_vm(name, state=state, hypervisor=hypervisor, group=group, guest=guest,
                               displayname=displayname, template_type=template_type, vm_type=vm_type,
                               autoscale_group=autoscale_group)
        if self._server is not None:
            self.advance()
        return replace(vm)

    def add_group(self, name: str) -> InstanceGroup:
        return replace(self.state.add_group(name))

    def vm(self, vm_id: str) -> VirtualMachine:
        """A VM as it is now."""
        return self.state.snapshot(vm_id)

    def wait_for_state(self, vm_id: str, state: str = RUNNING, timeout: float = 10.0) -> VirtualMachine:
        deadline = time.monotonic() + timeout
        while True:
            vm = self.vm(vm_id)
            if vm.state == state:
                return vm
            if time.monotonic() >= deadline:
                raise TimeoutError(f"VM {vm.name} is {vm.state}, not {state}, after {timeout:g} s")
            time.sleep(0.01)

    def guest_pid(self, vm_id: str) -> int | None:
        """The pid (and process group) of a VM's running guest, None when there is none."""
        with self._apply_lock:
            return self.guests.pid(vm_id)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request so far, in arrival order."""
        return list(self.api.recorded)

    def calls(self, command: str) -> list[RecordedRequest]:
        return [request for request in self.requests if request.command == command]

    def fail_next(self, command: str, times: int = 1, errorcode: int = 530, errortext: str = "injected failure",
                  cserrorcode: int = 4250) -> None:
        """The next `times` calls of `command` are answered with this error."""
        self.state.fail_next(command, times, errorcode, errortext, cserrorcode)

    def fail_jobs(self, command: str, times: int = 1, errorcode: int = 530,
                  errortext: str = "injected job failure") -> None:
        """The next `times` jobs of `command` end with jobstatus 2 and this error."""
        self.state.fail_jobs(command, times, errorcode, errortext)


def _parse_vm(value: str) -> tuple[str, str | None, str | None]:
    spec, sep, command = value.partition("=")
    name, at, group = spec.partition("@")
    if not name.strip() or (at and not group.strip()) or (sep and not command.strip()):
        raise argparse.ArgumentTypeError(f"--vm {value!r} must look like 'NAME[@GROUP][=GUEST COMMAND]'")
    return name.strip(), group.strip() or None, command.strip() or None


def _arg_parser() -> argparse.ArgumentParser:
    defaults = CloudStackSettings.from_env(os.environ)
    parser = argparse.ArgumentParser(prog="python -m crhelper.local.cloudstack_server",
                                     description="Local Apache CloudStack API endpoint (/client/api).")
    parser.add_argument("--vm", action="append", type=_parse_vm, default=[], metavar="NAME[@GROUP][=COMMAND]",
                        help="a Stopped VM, optionally in an instance group, with a guest command run by the shell")
    parser.add_argument("--running", action="store_true", help="the --vm VMs start Running")
    parser.add_argument("--hypervisor", default="KVM")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--start-seconds", type=float, default=defaults.start_seconds)
    parser.add_argument("--stop-seconds", type=float, default=defaults.stop_seconds)
    parser.add_argument("--pending-polls", type=int, default=defaults.pending_polls)
    parser.add_argument("--require-expires", action="store_true",
                        help="refuse unversioned requests and expires more than 15 min ahead")
    parser.add_argument("--no-extensions", action="store_true",
                        help=f"serve the built-in commands only, not those of the {EXTENSION_GROUP} entry points "
                             "(the boot-group API)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _arg_parser().parse_args(argv)
    key, secret = os.environ.get(KEY_ENV, ""), os.environ.get(SECRET_ENV, "")
    if not key or not secret:
        print(f"no key pair for callers to sign with: set {KEY_ENV} and {SECRET_ENV}", file=sys.stderr)
        return 2
    settings = replace(CloudStackSettings.from_env(os.environ), start_seconds=args.start_seconds,
                       stop_seconds=args.stop_seconds, pending_polls=args.pending_polls)
    cloud = LocalCloudStack(host=args.host, port=args.port, api_key=key, secret=secret, settings=settings,
                            require_expires=args.require_expires, extensions=() if args.no_extensions else None)
    with stop_requested() as stop, cloud:
        for name, group, command in args.vm:
            vm = cloud.add_vm(name, group=group, guest=command, hypervisor=args.hypervisor,
                              state=RUNNING if args.running else STOPPED)
            print(f"VM {vm.name} id {vm.id} ip {vm.ip}", flush=True)
        print(f"CloudStack endpoint {cloud.endpoint}", flush=True)
        for extension in cloud.extensions:
            print(f"extension {extension.name}: {', '.join(sorted(extension.commands))}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
