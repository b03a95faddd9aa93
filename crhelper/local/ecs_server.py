"""A local Alibaba ECS endpoint (API 2014-05-26) that the official `alibabacloud-ecs20140526` SDK
talks to, with instances that really move and really run.

    with LocalECS(timings=EcsTimings.uniform(0.05)) as ecs:
        instance_id = ecs.add_instance("web", user_data="exec python3 -m http.server 8080 --bind $HOST")
        ecs.client().start_instances(StartInstancesRequest(region_id=ecs.region, instance_id=[instance_id]))

Every request's signature is verified (ACS3-HMAC-SHA256, the 7.x default, or RPC HMAC-SHA1 with
`Config(signature_algorithm="v2")`). Instances go Pending → Starting → Running and Running →
Stopping → Stopped after configurable delays; each has its own 127.0.0.N address and sandbox,
its UserData runs as a process group while it is Running (`ecs_guest`), and RunCommand runs for
real (`ecs_assistant`; a repeated ClientToken runs nothing again, Tag.N marks the invocation for
DescribeInvocations' filter). A Stopped instance takes a new type (ModifyInstanceSpec) or image
(ReplaceSystemDisk). Its disks are RunInstances' SystemDisk and DataDisk.N, listed by DescribeDisks
and grown by ResizeDisk (larger only; online on a Running instance). Tests queue faults
(`inject_fault`) and read what was asked (`requests`).

Standalone: `python -m crhelper.local.ecs_server --instance web --instance db:Running`, with the
access key taken from ALIBABA_CLOUD_ACCESS_KEY_ID / ALIBABA_CLOUD_ACCESS_KEY_SECRET.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Mapping, Sequence

from crhelper.cloud.credentials import AcceptedKeys, Credentials, missing_hint
from crhelper.cloud.signing.alibaba import MAX_CLOCK_SKEW_SECONDS
from crhelper.cloud.signing.core import WireRequest
from crhelper.cloud.signing.replay import nonce_cache
from crhelper.local.ecs_api import EcsApi, Fault, RecordedRequest
from crhelper.local.ecs_assistant import CommandRunner
from crhelper.local.ecs_guest import GuestHost
from crhelper.local.ecs_state import (
    RUNNING, STOPPED, EcsTimings, Fleet, Instance, InstanceSpec, Invocation,
)
from crhelper.logs import get_logger
from crhelper.paths import state_dir
from crhelper.servers import ApiRequestHandler, ApiResponse, LocalHTTPServer, ServerThread
from crhelper.signals import stop_requested

__all__ = ["LocalECS", "EcsTimings", "main"]

_log = get_logger("local.ecs")
#: Longest the background clock sleeps when nothing is due (a request wakes it sooner).
_IDLE_TICK = 0.25
_MAX_BODY = 1 << 20


class _EcsHttpServer(LocalHTTPServer):
    api: EcsApi
    on_request: Callable[[], None]


class _EcsRequestHandler(ApiRequestHandler):
    """HTTP to `EcsApi.handle` and back."""

    server: _EcsHttpServer

    def _dispatch(self) -> None:
        length = self.headers.get("Content-Length", "0") or "0"
        if not length.isdigit() or int(length) > _MAX_BODY:
            self.close_connection = True
            response = ApiResponse(400, {"Content-Type": "application/json"},
                                   b'{"Code":"InvalidParameter","Message":"Content-Length must be an integer up to 1 MiB."}')
        else:
            body = self.rfile.read(int(length)) if int(length) else b""
            response = self.server.api.handle(WireRequest.of(self.command, self.path, self.headers, body))
            self.server.on_request()
        self.write_response(response)

    do_GET = do_POST = _dispatch

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        _log.debug("%s %s", self.command, self.path.partition("?")[0])


class _Clockwork:
    """Applies due transitions in the background, so instances boot even when nobody polls."""

    def __init__(self, api: EcsApi) -> None:
        self._api = api
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ecs-local-clock", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stopping:
            try:
                self._api.sync()
            except Exception:  # a bug here must not stop the clock
                _log.error("local ECS: applying transitions failed", exc_info=True)
            due = self._api.fleet.next_due()
            delay = _IDLE_TICK if due is None else min(_IDLE_TICK, max(0.002, due - self._api.fleet.clock()))
            self._wake.wait(delay)
            self._wake.clear()


class LocalECS(AcceptedKeys):
    """ECS on 127.0.0.1 for one account and region; `start()`/`stop()` or `with`.

    `access_keys` maps AccessKey IDs to secrets callers may sign with (one pair is generated when
    omitted). `sandbox_root` holds a folder per instance (a temporary folder, removed at stop,
    when None; `LocalECS.persistent()` uses `$CRHELPER_HOME/ecs`). `kill_grace` is how long a
    stopped instance's processes get between SIGTERM and SIGKILL."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, access_keys: Mapping[str, str] | None = None,
                 region: str = "cn-hangzhou", zone: str = "", timings: EcsTimings = EcsTimings(),
                 sandbox_root: str | os.PathLike[str] | None = None, kill_grace: float = 1.0,
                 capacity: int = 10_000, refuse_replays: bool = True,
                 max_clock_skew: float = MAX_CLOCK_SKEW_SECONDS, clock: Callable[[], float] = time.time) -> None:
        self._accept_keys(access_keys)
        self._address = (host, port)
        self.fleet = Fleet(region_id=region, zone_id=zone, timings=timings, clock=clock, capacity=capacity)
        self.guest = GuestHost(sandbox_root, kill_grace=kill_grace)
        self._runner = CommandRunner(self.fleet, self.guest)
        nonces = nonce_cache(max_clock_skew) if refuse_replays else None
        self.api = EcsApi(self.fleet, self._keys, effects=self.guest.apply, launch=self._runner.launch,
                          nonces=nonces, max_clock_skew=max_clock_skew)
        self._server: _EcsHttpServer | None = None
        self._serving: ServerThread | None = None
        self._clockwork: _Clockwork | None = None

    @classmethod
    def persistent(cls, **kwargs: Any) -> "LocalECS":
        """Sandboxes under `$CRHELPER_HOME/ecs/<instance>`, kept after stop."""
        return cls(sandbox_root=state_dir("ecs", create=True), **kwargs)

    # ------------------------------------------------------------------ lifecycle
    @property
    def region(self) -> str:
        return self.fleet.region_id

    @property
    def endpoint(self) -> str:
        """`host:port`, as the SDK's `Config.endpoint` takes it (no scheme)."""
        if self._server is None:
            raise RuntimeError("LocalECS is not started; call start() first")
        return f"{self._server.host}:{self._server.port}"

    def start(self) -> "LocalECS":
        if self._server is not None:
            raise RuntimeError("LocalECS is already started")
        self.guest.start()
        server = _EcsHttpServer(self._address, _EcsRequestHandler)
        self._clockwork = _Clockwork(self.api)
        server.api, server.on_request = self.api, self._clockwork.wake
        self._server = server
        self._clockwork.start()
        self._serving = ServerThread(server, "ecs-local-http").start()
        return self

    def stop(self) -> None:
        """Stop serving, stop the clock, kill every instance's processes."""
        if self._server is None or self._serving is None:
            return
        self._serving.stop_accepting()
        if self._clockwork is not None:
            self._clockwork.stop()
        self.guest.stop()
        self._runner.wait_idle(5.0)
        self._serving.stop()
        self._server = self._serving = self._clockwork = None

    def __enter__(self) -> "LocalECS":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def client(self, **config: Any) -> Any:
        """An `alibabacloud_ecs20140526` Client signed with the primary key, over http; `config`
        overrides Config fields (`signature_algorithm="v2"` for RPC signing)."""
        from alibabacloud_ecs20140526.client import Client
        from alibabacloud_tea_openapi import models as open_api_models

        settings = {"access_key_id": self.access_key_id, "access_key_secret": self.access_key_secret,
                    "endpoint": self.endpoint, "protocol": "http", "region_id": self.region, **config}
        return Client(open_api_models.Config(**settings))

    # ------------------------------------------------------------------ test helpers
    def add_instance(self, name: str = "", *, status: str = STOPPED, user_data: str | bytes | None = None,
                     tags: Mapping[str, str] | None = None, cloud_assistant: bool = True,
                     instance_id: str | None = None) -> str:
        """An instance, Stopped (or Running: its UserData starts now). `user_data` is the script itself."""
        script = user_data.encode("utf-8") if isinstance(user_data, str) else user_data
        spec = InstanceSpec(instance_name=name, host_name=name, cloud_assistant=cloud_assistant,
                            user_data=base64.b64encode(script).decode("ascii") if script else "",
                            tags=tuple((tags or {}).items()))
        with self.fleet.lock:
            added = self.fleet.add(spec, status, instance_id).instance_id
        if self._server is not None:
            self.api.sync()
        return added

    def instance(self, instance_id: str) -> Instance:
        """A snapshot, up to date."""
        self.api.sync()
        with self.fleet.lock:
            return replace(self.fleet.get(instance_id))

    def status(self, instance_id: str) -> str:
        return self.instance(instance_id).status

    def wait_for_status(self, instance_id: str, status: str, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while self.status(instance_id) != status:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def set_cloud_assistant(self, instance_id: str, installed: bool) -> None:
        """The agent flag DescribeCloudAssistantStatus reports and RunCommand requires."""
        with self.fleet.lock:
            self.fleet.set_cloud_assistant(instance_id, installed)

    def tag_instance(self, instance_id: str, tags: Mapping[str, str]) -> None:
        """Tag an instance as a managing service would: ACK's `ack.aliyun.com`, or Auto Scaling's
        `acs:autoscaling:scalingGroupId` (a system tag, which RunInstances refuses from callers)."""
        with self.fleet.lock:
            self.fleet.tag(instance_id, tags)

    def invocation(self, invoke_id: str) -> Invocation:
        with self.fleet.lock:
            return self.fleet.invocation(invoke_id)

    def wait_commands(self, timeout: float = 10.0) -> bool:
        """Wait until every RunCommand has finished; False on timeout."""
        return self._runner.wait_idle(timeout)

    def inject_fault(self, action: str, *, status: int = 500, code: str = "InternalError",
                     message: str = "The request processing has failed due to some unknown error.",
                     times: int = 1, retry_after: int | None = None) -> None:
        """Answer the next `times` calls of `action` (`*`: any) with this error, after their signature
        is verified; `retry_after` adds `x-acs-retry-after` (the SDK raises ThrottlingException)."""
        self.api.inject(Fault(action, status, code, message, times, retry_after))

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request so far, in arrival order, refused ones included."""
        return self.api.records()

    def clear_requests(self) -> None:
        self.api.clear_records()

    def sandbox(self, instance_id: str) -> Path:
        return self.guest.sandbox(instance_id)

    def boot_pid(self, instance_id: str) -> int | None:
        """The pid (and process group) of the instance's running UserData, if any."""
        proc = self.guest.boot_process(instance_id)
        return None if proc is None else proc.pid


def _parse_instance(value: str) -> tuple[str, str]:
    name, _, status = value.partition(":")
    status = status or STOPPED
    if not name or status not in (STOPPED, RUNNING):
        raise argparse.ArgumentTypeError(f"--instance {value!r} must look like NAME or NAME:Running / NAME:Stopped")
    return name, status


def _arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m crhelper.local.ecs_server",
                                     description="Local Alibaba ECS endpoint (API 2014-05-26).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--region", default="cn-hangzhou")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds each transitory status lasts")
    parser.add_argument("--kill-grace", type=float, default=1.0, help="seconds between SIGTERM and SIGKILL on stop")
    parser.add_argument("--instance", action="append", type=_parse_instance, default=[], metavar="NAME[:STATUS]",
                        help="an instance to create at start (Stopped unless :Running)")
    parser.add_argument("--user-data", type=Path, default=None, metavar="FILE",
                        help="shell script every --instance runs while Running")
    parser.add_argument("--persistent", action="store_true", help="sandboxes under $CRHELPER_HOME/ecs (kept)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _arg_parser().parse_args(argv)
    caller = Credentials.from_env()
    if caller is None:
        print(f"no access key for callers to sign with: {missing_hint()}", file=sys.stderr)
        return 2
    script = args.user_data.read_bytes() if args.user_data else None
    options: dict[str, Any] = dict(host=args.host, port=args.port, region=args.region,
                                   access_keys={caller.access_key_id: caller.access_key_secret},
                                   timings=EcsTimings.uniform(args.delay), kill_grace=args.kill_grace)
    ecs = LocalECS.persistent(**options) if args.persistent else LocalECS(**options)
    with stop_requested() as stop, ecs:
        print(f"ECS endpoint {ecs.endpoint} region {ecs.region}", flush=True)
        for name, status in args.instance:
            instance = ecs.instance(ecs.add_instance(name, status=status, user_data=script))
            print(f"instance {instance.instance_id} {name} {instance.private_ip} {instance.status}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
