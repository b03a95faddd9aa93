"""The wire side of the local CloudStack: `/client/api` requests in, `<command>response` JSON out.

Every request is verified first (`crhelper.cloud.signing.cloudstack`: Java-faithful encoding, so
a `~` signed by `cs` fails as it does on a real server; v3 `expires`); a failure is CloudStack's one
401. Then the command runs against `CloudStackState`; a bad parameter is a 431 naming it, an
unknown command a 432, both with `cserrorcode`. No sockets here: the server hands in what it read.
Extensions (`CloudStackExtension`) add commands beside the built-in ones and go through the same
verification, fault injection and wrapping.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing import cloudstack as signing
from crhelper.cloud.signing.core import SignatureRejected, WireRequest
from crhelper.servers import ApiResponse
from crhelper.local.cloudstack_state import (
    PARAM_ERROR, UNSUPPORTED_ACTION, ApiError, CloudStackState, VirtualMachine, invalid_parameter)
from crhelper.logs import get_logger

API_PATH = "/client/api"
CONTENT_TYPE = "application/json; charset=UTF-8"
#: CloudStack's `default.page.size`: the largest `pagesize`, and `cs`'s `fetch_list` page.
MAX_PAGE_SIZE = 500

_log = get_logger("local.cloudstack")

Parameters = Mapping[str, str]
#: A command: the request's parameters (signature apart) -> the object inside `<command>response`.
Command = Callable[[Parameters], dict[str, Any]]


def _close_nothing() -> None:
    return None


@dataclass(frozen=True)
class CloudStackExtension:
    """Commands a package adds to the local endpoint: what a callable of the entry-point group
    `crhelper.local.cloudstack` returns when `LocalCloudStack` starts (the boot-group API, issue
    12). `close` is called when the endpoint stops (end running jobs)."""

    name: str
    commands: Mapping[str, Command]
    close: Callable[[], None] = _close_nothing


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the endpoint understood it: decoded parameters (`signature` apart), the
    status it got, and why a rejected one was rejected."""

    method: str
    command: str
    parameters: dict[str, str]
    signature: str
    status: int
    reason: str = ""
    time: float = 0.0


# Parameter readers shared by the built-in commands and the extensions' (each error a 431 naming it).

def required_parameter(params: Parameters, name: str, command: str) -> str:
    value = params.get(name, "")
    if not value:
        raise invalid_parameter(f"Unable to execute API command {command.lower()} due to missing parameter {name}")
    return value


def boolean_parameter(params: Parameters, name: str, default: bool = False) -> bool:
    value = params.get(name, "").lower()
    if value == "":
        return default
    if value not in ("true", "false"):
        raise invalid_parameter(f"{name}: must be true or false, got {params[name][:40]!r}")
    return value == "true"


def whole_parameter(params: Parameters, name: str, minimum: int | None = None) -> int | None:
    """A whole number (None when absent); below `minimum` is refused."""
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    digits = raw[1:] if raw.startswith("-") else raw
    if not (digits.isascii() and digits.isdigit()):
        raise invalid_parameter(f"{name}: must be a whole number, got {raw[:40]!r}")
    value = int(raw)
    if minimum is not None and value < minimum:
        raise invalid_parameter(f"{name}: must be at least {minimum}, got {value}")
    return value


def page_of(items: list[dict[str, Any]], params: Parameters, key: str) -> dict[str, Any]:
    """CloudStack's list answer: `count` (of all matches) and one page of `key`; `{}` when nothing
    matches; only `count` for a page past the end."""
    page, size = whole_parameter(params, "page", 1), whole_parameter(params, "pagesize", -1)
    if page is not None and size is None:
        raise invalid_parameter('"pagesize" parameter is required when "page" is specified')
    if size is not None and (size == 0 or size > MAX_PAGE_SIZE):
        raise invalid_parameter(f"pagesize: must be -1 (all) or 1 to {MAX_PAGE_SIZE}, got {size}")
    if not items:
        return {}
    chosen = items
    if size is not None and size != -1:
        start = ((page or 1) - 1) * size
        chosen = items[start:start + size]
    return {"count": len(items), key: chosen} if chosen else {"count": len(items)}


def _like(needle: str, *haystacks: str) -> bool:
    """SQL `LIKE '%needle%'` in CloudStack's case-insensitive collation."""
    return any(needle.lower() in hay.lower() for hay in haystacks)


@dataclass
class CloudStackApi:
    """Verify, dispatch, wrap; every request (rejected ones too) is recorded for tests."""

    state: CloudStackState
    keys: Mapping[str, Credentials]
    require_expires: bool = False
    recorded: list[RecordedRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self._commands: dict[str, Callable[[Parameters], dict[str, Any]]] = {
            "startVirtualMachine": self._start, "stopVirtualMachine": self._stop,
            "rebootVirtualMachine": self._reboot, "queryAsyncJobResult": self._query,
            "listVirtualMachines": self._list_vms, "listInstanceGroups": self._list_groups,
            "listAsyncJobs": self._list_jobs,
        }
        self._extra: dict[str, Command] = {}

    def extend(self, extension: CloudStackExtension) -> None:
        """Serve `extension`'s commands too; a name that is served already is refused (ValueError)."""
        with self._lock:
            taken = sorted(name for name in extension.commands if name in self._commands or name in self._extra)
            if taken:
                raise ValueError(f"extension {extension.name!r}: command(s) {', '.join(taken)} are served already")
            self._extra.update(extension.commands)

    def retract(self, extension: CloudStackExtension) -> None:
        """Stop serving `extension`'s commands (the endpoint stopped)."""
        with self._lock:
            for name in extension.commands:
                self._extra.pop(name, None)

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> ApiResponse:
        request = WireRequest.of(method, target, headers, body)
        if request.path.rstrip("/") != API_PATH:
            return ApiResponse(404, {"Content-Type": "text/plain; charset=UTF-8"},
                               f"not found: the API is at {API_PATH}\n".encode())
        command, params, signature, reason = "", {}, "", ""
        try:
            params = signing.request_parameters(request)
            command = params.get("command", "")
            signature = params.pop("signature", "")
            signing.verify(request, self.keys, now=self.state.clock(), require_expires=self.require_expires)
            payload = self._dispatch(command, params)
            status, answer = 200, payload
        except SignatureRejected as rejected:
            _log.info("cloudstack %s refused: %s", command or "request", rejected.reason)
            reason = rejected.reason
            status, answer = rejected.status, ApiError(rejected.status, rejected.message).body()
        except ApiError as error:
            reason = error.errortext
            status, answer = error.errorcode, error.body()
        with self._lock:
            self.recorded.append(RecordedRequest(request.method, command, params, signature, status, reason,
                                                 self.state.clock()))
        wrapper = f"{command.lower()}response" if command else "errorresponse"
        response_headers = {"Content-Type": CONTENT_TYPE}
        if status != 200:
            # HTTP headers are Latin-1: any other character (an error naming "≥ 0") becomes "?"
            text = str(answer.get("errortext", ""))[:200]
            response_headers["X-Description"] = text.encode("latin-1", "replace").decode("latin-1")
        return ApiResponse(status, response_headers, json.dumps({wrapper: answer}).encode("utf-8"))

    def _dispatch(self, command: str, params: Parameters) -> dict[str, Any]:
        handler = self._commands.get(command) or self._extra.get(command)
        if handler is None:
            raise ApiError(UNSUPPORTED_ACTION, "The given command does not exist or it is not available for user"
                           if command else "command: required")
        if params.get("response", "json").lower() != "json":
            raise ApiError(PARAM_ERROR, "response: only response=json is served by the local endpoint")
        fault = self.state.take_fault(command)
        if fault is not None:
            raise fault
        return handler(params)

    # ------------------------------------------------------------------------------ commands
    def _start(self, params: Parameters) -> dict[str, Any]:
        return {"jobid": self.state.start(required_parameter(params, "id", "startVirtualMachine")).id}

    def _stop(self, params: Parameters) -> dict[str, Any]:
        vm_id = required_parameter(params, "id", "stopVirtualMachine")
        return {"jobid": self.state.stop(vm_id, forced=boolean_parameter(params, "forced")).id}

    def _reboot(self, params: Parameters) -> dict[str, Any]:
        return {"jobid": self.state.reboot(required_parameter(params, "id", "rebootVirtualMachine")).id}

    def _query(self, params: Parameters) -> dict[str, Any]:
        return self.state.query(required_parameter(params, "jobid", "queryAsyncJobResult"))

    def _list_vms(self, params: Parameters) -> dict[str, Any]:
        if params.get("id"):
            self.state.vm(params["id"], "listVirtualMachines")  # an unknown id is a 431, not an empty list
        return page_of(self.state.list_vms(lambda vm: _vm_matches(vm, params)), params, "virtualmachine")

    def _list_groups(self, params: Parameters) -> dict[str, Any]:
        groups = self.state.list_groups(
            lambda group: (not params.get("id") or group.id == params["id"])
            and (not params.get("name") or group.name == params["name"])
            and (not params.get("keyword") or _like(params["keyword"], group.name)))
        return page_of(groups, params, "instancegroup")

    def _list_jobs(self, params: Parameters) -> dict[str, Any]:
        return page_of(self.state.list_jobs(), params, "asyncjobs")


def _vm_matches(vm: VirtualMachine, params: Parameters) -> bool:
    """listVirtualMachines' filters: `name` and `keyword` are LIKE searches, `state` is
    case-insensitive (`Present`: not Destroyed), `ids` a comma-separated list."""
    ids = [part for part in params.get("ids", "").split(",") if part]
    wanted_state = params.get("state", "").lower()
    return ((not params.get("id") or vm.id == params["id"]) and (not ids or vm.id in ids)
            and (not params.get("name") or _like(params["name"], vm.name))
            and (not wanted_state or wanted_state == vm.state.lower()
                 or (wanted_state == "present" and vm.state != "Destroyed"))
            and (not params.get("groupid") or vm.group_id == params["groupid"])
            and (not params.get("keyword") or _like(params["keyword"], vm.name, vm.displayname, vm.state)))
