"""A local Function Compute endpoint that the real SDKs call: FC 2.0 (`fc2`) and FC 3.0
(`alibabacloud-fc20230330`), invocations and management calls.

    with LocalFunctionCompute() as fc:
        fc.register("svc", "fn", "index.handler", timeout=30)
        fc.client().invoke_function("svc", "fn", payload=b"{}")
        fc.register("", "fn3", "index.handler")                # an FC 3.0 function (no service)
        fc.client3().invoke_function("fn3", InvokeFunctionRequest(body=b"{}"))

Functions created through either API run their uploaded code (a zip, or an OSS object read through
`oss_url`), unpacked under `state_dir` (default: a folder of its own under `$CRHELPER_HOME/fc-local`,
made by the first deployed function and removed on stop).

Standalone: `python -m crhelper.local.fc_server [--function svc/fn=index.handler]` (functions can also
be created through either API), with the access key taken from ALIBABA_CLOUD_ACCESS_KEY_ID /
ALIBABA_CLOUD_ACCESS_KEY_SECRET.
"""
from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

from crhelper.cloud.credentials import AcceptedKeys, Credentials, missing_hint
from crhelper.local.fc_api import AsyncSettings, FcApi
from crhelper.local.fc_auth import MAX_CLOCK_SKEW_SECONDS, AccessKey
from crhelper.local.fc_code import CodeLimits, CodeStore, oss_reader, remove_tree
from crhelper.local.fc_manage import Management
from crhelper.local.fc_protocol import FcApiError
from crhelper.local.fc_records import InvocationJournal, InvocationRecord
from crhelper.local.fc_registry import FunctionRegistry, FunctionSpec
from crhelper.local.fc_runner import OutputCallback, ProcessRunner
from crhelper.paths import state_dir as crhelper_state_dir
from crhelper.servers import ApiRequestHandler, ApiResponse, LocalHTTPServer, ServerThread
from crhelper.signals import stop_requested

_log = logging.getLogger(__name__)


def _read_chunked(rfile: Any) -> bytes:
    """A chunked body; FcApiError(400) for a malformed chunk size (else the connection just drops)."""
    chunks: list[bytes] = []
    while True:
        line = rfile.readline()
        try:
            size = int(line.split(b";")[0].strip(), 16)
        except ValueError:
            raise FcApiError(400, "InvalidArgument", "chunked body: chunk size must be hexadecimal") from None
        if size < 0:
            raise FcApiError(400, "InvalidArgument", "chunked body: chunk size must not be negative")
        if size == 0:
            while rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        chunks.append(rfile.read(size))
        rfile.readline()


class _FcHttpServer(LocalHTTPServer):
    """The HTTP side of one LocalFunctionCompute; handlers reach its API through the server."""

    api: FcApi


class _FcRequestHandler(ApiRequestHandler):
    """Translates HTTP to `FcApi.handle` and back."""

    server: _FcHttpServer

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return _read_chunked(self.rfile)
        length = self.headers.get("Content-Length", "0") or "0"
        if not length.isdigit():
            raise FcApiError(400, "InvalidArgument", "header Content-Length must be an integer")
        return self.rfile.read(int(length)) if int(length) else b""

    def _dispatch(self) -> None:
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            headers.setdefault(name.lower(), value)
        try:
            body = self._read_body()
        except FcApiError as err:
            self.close_connection = True
            response = ApiResponse(err.status, {"Content-Type": "application/json"}, err.body())
        else:
            response = self.server.api.handle(self.command, self.path, headers, body)
        self.write_response(response)

    do_POST = do_GET = do_PUT = do_DELETE = do_HEAD = _dispatch

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        _log.debug("%s %s", self.command, urlsplit(self.path).path)


class LocalFunctionCompute(AcceptedKeys):
    """FC 2.0 and 3.0 endpoint on 127.0.0.1 running Python handlers in worker processes.

    `access_keys` maps AccessKey IDs to secrets accepted from callers (one pair is generated when
    omitted). Handlers get a separate STS credential (`role_credentials`) as `context.credentials`
    and in ALIBABA_CLOUD_* env vars; the server accepts it too, so handlers can re-invoke
    themselves through CRHELPER_FC_ENDPOINT. `on_output(request, line)` sees every line a worker
    writes (stdout and stderr, merged as in FC's log) as it is written, e.g. to show it live.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 access_keys: Mapping[str, str] | None = None, account_id: str | None = None,
                 region: str = "cn-hangzhou", async_workers: int = 2, max_async_retries: int = 3,
                 async_retry_delay: float = 1.0, code_paths: Sequence[str | os.PathLike[str]] = (),
                 inherit_sys_path: bool = True,
                 max_clock_skew: float = MAX_CLOCK_SKEW_SECONDS,
                 on_output: OutputCallback | None = None,
                 state_dir: str | os.PathLike[str] | None = None, oss_url: str | None = None,
                 code_limits: CodeLimits = CodeLimits()) -> None:
        self._accept_keys(access_keys)
        self.role_credentials = AccessKey("STS." + secrets.token_hex(10),
                                          secrets.token_urlsafe(24), secrets.token_urlsafe(48))
        self._keys[self.role_credentials.access_key_id] = self.role_credentials
        self.account_id = account_id or str(10**15 + secrets.randbelow(9 * 10**15))
        self.region = region
        self._address = (host, port)
        self._async = AsyncSettings(async_workers, max_async_retries, async_retry_delay)
        self._runner_args = (list(code_paths), inherit_sys_path)
        self._on_output = on_output
        self._max_skew = max_clock_skew
        self._registry = FunctionRegistry()
        self._journal = InvocationJournal()
        self._state_dir = Path(state_dir) if state_dir is not None else None
        self._oss = oss_reader(oss_url) if oss_url else None  # a bad URL fails here, naming the rule
        self._code_limits = code_limits
        self._owned_dir: Path | None = None
        self._server: _FcHttpServer | None = None
        self._api: FcApi | None = None
        self._serving: ServerThread | None = None

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("LocalFunctionCompute is not started; call start() first")
        return f"http://{self._server.host}:{self._server.port}"

    def register(self, service: str, function: str, handler: str, timeout: float = 60,
                 memory: int = 128, env: Mapping[str, str] | None = None,
                 initializer: str | None = None) -> FunctionSpec:
        """Add or replace a function (service "" for FC 3.0); allowed before and after start()."""
        spec = FunctionSpec(service, function, handler, timeout, memory, dict(env or {}),
                            initializer)
        self._registry.add(spec)
        return spec

    def start(self) -> "LocalFunctionCompute":
        if self._server is not None:
            raise RuntimeError("LocalFunctionCompute is already started")
        server = _FcHttpServer(self._address, _FcRequestHandler)
        self._server = server
        code_paths, inherit = self._runner_args
        self._api = FcApi(registry=self._registry, keys=self._keys,
                          runner=ProcessRunner(code_paths, inherit, on_output=self._on_output), journal=self._journal,
                          role=self.role_credentials, account_id=self.account_id,
                          region=self.region, endpoint=self.endpoint, management=self._management(),
                          async_settings=self._async, max_clock_skew=self._max_skew)
        server.api = self._api
        self._api.start()
        self._serving = ServerThread(server, "fc-local-http").start()
        return self

    def _management(self) -> Management:
        root = self._state_dir
        if root is None:  # created by the first deployed function only
            root = self._owned_dir = crhelper_state_dir("fc-local") / f"{os.getpid()}-{secrets.token_hex(4)}"
        return Management(self._registry, CodeStore(root / "code", self._code_limits), oss=self._oss,
                          limits=self._code_limits)

    def stop(self) -> None:
        """Stop serving, kill running workers and drop queued async invocations."""
        if self._server is None or self._serving is None:
            return
        # Workers die while their connections are still open, so a caller waiting on a sync
        # invocation gets FC's error answer rather than a reset.
        self._serving.stop_accepting()
        if self._api is not None:
            self._api.stop()
        self._serving.stop(join=None)
        self._server = None
        self._serving = None
        if self._owned_dir is not None:
            remove_tree(self._owned_dir)  # read-only code folders included
            self._owned_dir = None

    def __enter__(self) -> "LocalFunctionCompute":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no async invocation is queued, delayed or running; False on timeout."""
        if self._api is None:
            return True
        return self._api.wait_idle(timeout)

    @property
    def records(self) -> list[InvocationRecord]:
        """Every accepted invocation so far, in arrival order (immutable snapshots)."""
        return self._journal.snapshot()

    def record(self, request_id: str) -> InvocationRecord:
        return self._journal.get(request_id)

    def client(self, **kwargs: Any) -> Any:
        """An `fc2.Client` signed with the primary access key."""
        import fc2

        return fc2.Client(endpoint=self.endpoint, accessKeyID=self.access_key_id,
                          accessKeySecret=self.access_key_secret, **kwargs)


    def client3(self, **kwargs: Any) -> Any:
        """An FC 3.0 `alibabacloud_fc20230330` client signed with the primary access key."""
        from alibabacloud_fc20230330.client import Client
        from alibabacloud_tea_openapi.models import Config

        host = urlsplit(self.endpoint).netloc
        return Client(Config(access_key_id=self.access_key_id, access_key_secret=self.access_key_secret,
                             endpoint=host, protocol="http", region_id=self.region, **kwargs))


def _parse_function(value: str) -> tuple[str, str, str]:
    target, sep, handler = value.partition("=")
    service, slash, function = target.partition("/")
    if not sep or not slash or not service or not function or not handler:
        raise argparse.ArgumentTypeError(
            f"--function {value!r} must look like 'service/function=module:attr'")
    return service, function, handler


def _parse_env(value: str) -> tuple[str, str]:
    name, sep, text = value.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--env {name!r} must look like 'NAME=value'")
    return name, text


def _arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m crhelper.local.fc_server",
                                     description="Local Function Compute endpoint: the FC 2.0 and FC 3.0 APIs.")
    parser.add_argument("--function", action="append", type=_parse_function, default=[],
                        metavar="SERVICE/FUNCTION=MODULE:ATTR",
                        help="a function served from this machine's code (more can be created through the APIs)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60, help="function timeout in seconds")
    parser.add_argument("--memory", type=int, default=128)
    parser.add_argument("--env", action="append", type=_parse_env, default=[],
                        metavar="NAME=VALUE", help="environment variable for every function")
    parser.add_argument("--account-id", default=None)
    parser.add_argument("--region", default="cn-hangzhou")
    parser.add_argument("--code-path", action="append", default=[],
                        help="directory added to the workers' sys.path")
    parser.add_argument("--max-async-retries", type=int, default=3)
    parser.add_argument("--state-dir", default=None,
                        help="where deployed code is unpacked (default: a fresh folder under $CRHELPER_HOME/fc-local)")
    parser.add_argument("--oss-url", default=None, metavar="S3_URL",
                        help="read code objects (code.ossBucketName/ossObjectName) through this S3/OSS endpoint, "
                             "e.g. s3://any?endpoint=http://127.0.0.1:9000&addressing=path")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _arg_parser().parse_args(argv)
    caller = Credentials.from_env()
    if caller is None:
        print(f"no access key for callers to sign with: {missing_hint()}", file=sys.stderr)
        return 2
    fc = LocalFunctionCompute(host=args.host, port=args.port,
                              access_keys={caller.access_key_id: caller.access_key_secret},
                              account_id=args.account_id, region=args.region,
                              max_async_retries=args.max_async_retries, code_paths=args.code_path,
                              state_dir=args.state_dir, oss_url=args.oss_url)
    for service, function, handler in args.function:
        fc.register(service, function, handler, timeout=args.timeout, memory=args.memory,
                    env=dict(args.env))
    with stop_requested() as stop, fc:
        print(f"FC endpoint {fc.endpoint} account {fc.account_id} region {fc.region}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
