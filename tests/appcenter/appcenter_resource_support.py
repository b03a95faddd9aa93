"""Helpers for the Custom::AppCluster tests: the sample package deployed through the stack emulator
in process, what its nodes ran (the package's journal), the supervisor's processes, the state."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from crhelper.emulator import StackEmulator, StackEvent
from crhelper.emulator.delivery import StackDelivery
from crhelper.emulator.delivery_bindings import Bindings
from crhelper.paths import home
from handlers.appcenter.state import ClusterRecord, SqliteClusterStore, default_path

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "appcenter-demo"
TEMPLATE = REPO / "templates" / "appcenter-demo.yaml"
TOKEN = "acs:fc:cn-hangzhou:123456789:services/crhelper-appcenter/functions/provider"
PROVIDER = "handlers.appcenter.provider:provider"
#: Delays as settings: polls every 20 ms, a stopped process gets 1 s before SIGKILL.
FAST = {"CRHELPER_APPCENTER_POLL_INTERVAL": "0.02", "CRHELPER_SUPERVISOR_POLL": "0.02",
        "CRHELPER_SUPERVISOR_GRACE": "1", "CRHELPER_SUPERVISOR_LINGER": "1"}
PORT = 18080


@dataclass(frozen=True)
class Ran:
    """One line of the journal: a service command a node ran (`extra`: what it saw)."""

    at: float
    service: str
    role: str
    sid: int
    operation: str
    extra: str

    @property
    def node(self) -> str:
        return f"{self.role}-{self.sid}"


def read_journal(path: Path) -> list[Ran]:
    found = []
    for line in path.read_text().splitlines() if path.exists() else []:
        at, service, role, sid, operation, *extra = line.split(" ", 5) + [""]
        found.append(Ran(float(at), service, role, int(sid), operation, " ".join(extra).strip()))
    return sorted(found, key=lambda ran: ran.at)


def properties(journal: Path, inputs: Mapping[str, Any] | None = None, **props: Any) -> dict[str, Any]:
    """The AppCluster properties of the tests: the sample package on the local backend, the journal on."""
    return {"Package": str(SAMPLE), "Version": "1.0.0", "Backend": "local", "Language": "en",
            "Inputs": {"env.journal": str(journal), "env.port": PORT, **(inputs or {})}, **props}


def template(props: Mapping[str, Any], timeout: int = 120) -> str:
    return json.dumps({
        "ROSTemplateFormatVersion": "2015-09-01",
        "Resources": {"App": {"Type": "Custom::AppCluster",
                              "Properties": {"ServiceToken": TOKEN, "Timeout": timeout, "Parameters": dict(props)}}},
        "Outputs": {name: {"Value": {"Fn::GetAtt": ["App", name]}}
                    for name in ("ClusterId", "Roles", "Endpoints", "Nodes", "Version", "State")},
    })


class Stack:
    """One stack in the emulator, each operation delivered in process to the AppCluster provider;
    `journal` is the file the sample package's commands append to."""

    def __init__(self, tmp_path: Path, name: str = "app") -> None:
        self.emulator = StackEmulator(home())
        self.name = name
        self.journal = tmp_path / "journal.log"
        self.events: list[StackEvent] = []

    def close(self) -> None:
        self.emulator.close()

    def _deliver(self) -> StackDelivery:
        return StackDelivery(Bindings({TOKEN: PROVIDER}, mode="inprocess"))

    def create(self, props: Mapping[str, Any], **options: Any) -> str:
        self.events.clear()
        with self._deliver() as deliver:
            return self.emulator.create(self.name, template(props), {}, deliver, on_event=self.events.append,
                                        **options).status

    def update(self, props: Mapping[str, Any]) -> str:
        self.events.clear()
        with self._deliver() as deliver:
            return self.emulator.update(self.name, template(props), {}, deliver, on_event=self.events.append).status

    def delete(self) -> str:
        self.events.clear()
        with self._deliver() as deliver:
            return self.emulator.delete(self.name, deliver, on_event=self.events.append).status

    def outputs(self) -> dict[str, Any]:
        return self.emulator.outputs(self.name)

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events if e.status.endswith("FAILED") and e.logical_id == "App"]

    def ran(self, clear: bool = True) -> list[Ran]:
        """What the nodes ran since the last call."""
        found = read_journal(self.journal)
        if clear and self.journal.exists():
            self.journal.write_text("")
        return found


def store() -> SqliteClusterStore:
    return SqliteClusterStore(default_path())


def the_cluster() -> ClusterRecord:
    (record,) = store().list()
    return record


def copy_package(tmp_path: Path, name: str = "package") -> Path:
    target = tmp_path / name
    shutil.copytree(SAMPLE, target)
    return target


def services(ran: list[Ran], *names: str) -> list[tuple[str, str]]:
    """(service, node) in the order they ran, of the `names` services (all when none given)."""
    return [(r.service, r.node) for r in ran if not names or r.service in names]
