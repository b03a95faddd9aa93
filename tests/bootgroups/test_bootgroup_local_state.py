"""The provider's own state (SQLite under $CRHELPER_HOME/bootgroups) and the local backend's checks
against real sockets and a real guest agent."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from crhelper.testing import wait_until
from handlers.bootgroups import guest_agent
from handlers.bootgroups.backend_local import LocalBackend, agent_address, process_argv, process_env
from handlers.bootgroups.events import CREATE, Event
from handlers.bootgroups.model import ERROR, READY
from handlers.bootgroups.state import (
    MAX_EVENTS, GroupRecord, InstanceRecord, SqliteGroupStore, StateConflict, default_path, open_group_store,
)


@pytest.fixture
def store() -> SqliteGroupStore:
    return SqliteGroupStore(default_path())


def test_the_store_lives_under_the_home_and_round_trips_a_group(store: SqliteGroupStore, tmp_path: Path) -> None:
    assert store.path.parent.name == "bootgroups" and store.path.exists()
    store.create_group(GroupRecord("g1", "web", power_changes={"i-1": 12.5}), {"instance:i-1": "Members[0].Instance"})
    found = store.find_group("web")
    assert found is not None and found.group_id == "g1" and found.power_changes == {"i-1": 12.5}
    assert open_group_store(f"sqlite:///{tmp_path / 'other.sqlite'}").list_groups() == []
    with pytest.raises(ValueError, match="CRHELPER_BOOTGROUP_STORE: 'oss://x' is not sqlite:///"):
        open_group_store("oss://x")


def test_claims_keep_one_group_per_item_and_names_unique_until_released(store: SqliteGroupStore) -> None:
    store.create_group(GroupRecord("g1", "first"), {"instance:i-1": "Members[0].Instance", "group:web": "Members[1].InstanceGroup"})
    with pytest.raises(StateConflict, match="instance 'i-1' is already a member of boot group 'first'") as caught:
        store.create_group(GroupRecord("g2", "second"), {"instance:i-1": "Members[3].Instance"})
    assert caught.value.path == "Members[3].Instance"
    with pytest.raises(StateConflict, match="already named 'first'"):
        store.create_group(GroupRecord("g2", "first"), {})
    assert store.get_group("g2") is None  # nothing of a refused write stays
    assert store.claims(["instance:i-1", "group:web", "instance:i-9"]) == {"instance:i-1": "first", "group:web": "first"}
    assert store.claims(["instance:i-1"], besides="g1") == {}
    first = store.get_group("g1")
    assert first is not None
    store.reclaim(first, {"group:web": "Members[0].InstanceGroup"})  # i-1 released by the update
    store.create_group(GroupRecord("g2", "second"), {"instance:i-1": "Members[0].Instance"})
    store.remove_group("g1")
    assert store.claims(["group:web"]) == {} and store.names() == ["second"]


def test_a_late_save_does_not_bring_a_removed_group_back(store: SqliteGroupStore) -> None:
    store.create_group(GroupRecord("g-late", "late"), {"instance:i-9": "Members[0].Instance"})
    record = store.get_group("g-late")
    assert record is not None
    store.remove_group("g-late")
    store.save_group(record)  # a checkpoint of a run still going when the stack deleted the group
    assert store.get_group("g-late") is None and store.list_groups() == []
    assert store.claims(["instance:i-9"]) == {}


def test_concurrent_creates_claiming_one_instance_let_exactly_one_win(store: SqliteGroupStore) -> None:
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def create(index: int) -> None:
        mine = SqliteGroupStore(store.path)  # its own connections, as another process would have
        barrier.wait()
        try:
            mine.create_group(GroupRecord(f"g{index}", f"group-{index}"), {"instance:i-shared": "Members[0].Instance"})
            outcomes.append("won")
        except StateConflict:
            outcomes.append("refused")

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused"] * 7 + ["won"]
    assert len(store.list_groups()) == 1


def test_events_are_kept_in_order_and_bounded(store: SqliteGroupStore) -> None:
    store.append_events("g1", [Event(CREATE, float(i), f"e{i}") for i in range(MAX_EVENTS + 5)])
    events = store.events("g1")
    assert len(events) == MAX_EVENTS and events[0].message == "e5" and events[-1].message == f"e{MAX_EVENTS + 4}"
    assert [e.message for e in store.events("g1", limit=2)] == [f"e{MAX_EVENTS + 3}", f"e{MAX_EVENTS + 4}"]


def listening_socket() -> socket.socket:
    server = socket.create_server(("127.0.0.1", 0))
    return server


def test_port_check_and_ping_are_real_network_checks(store: SqliteGroupStore) -> None:
    with listening_socket() as server:
        port = server.getsockname()[1]
        store.put_instance(InstanceRecord("i-1", ["true"], host="127.0.0.1", ports=[port]))
        backend = LocalBackend(store)
        ready = backend.check("PortCheck", "i-1", {"port": str(port)}, 1.0)
        assert ready.status == READY and f"127.0.0.1:{port} accepted" in ready.message
        pinged = backend.check("Ping", "i-1", {}, 1.0)
        assert pinged.status == READY
        assert "ICMP echo reply" in pinged.message or "TCP fallback" in pinged.message  # says which mechanism ran
    refused = backend.check("PortCheck", "i-1", {"port": str(port)}, 1.0)
    assert refused.status == ERROR and refused.message == f"connection refused by 127.0.0.1:{port}"
    no_time = backend.check("PortCheck", "i-1", {"port": str(port)}, 0.0)
    assert no_time.status == ERROR and "no time left" in no_time.message
    no_agent = backend.check("GuestAgentLiveness", "i-1", {}, 1.0)
    assert no_agent.status == ERROR and "runs no guest agent" in no_agent.message
    assert backend.vm_state("i-nope").state == "Missing"


def test_an_instance_process_is_told_its_id_host_and_ports(store: SqliteGroupStore) -> None:
    record = InstanceRecord("i-2", ["echo hi"], shell=True, host="127.0.0.9", ports=[80, 81], environment={"A": "b"},
                            guest_agent=True, agent_address="agent-x")
    argv = process_argv(record)
    assert argv[:3] == [sys.executable, "-m", "handlers.bootgroups.guest_agent"] and argv[-3:] == ["--shell", "--", "echo hi"]
    env = process_env(record)
    assert (env["CRHELPER_INSTANCE_ID"], env["CRHELPER_INSTANCE_HOST"], env["CRHELPER_INSTANCE_PORT"],
            env["CRHELPER_INSTANCE_PORTS"], env["A"]) == ("i-2", "127.0.0.9", "80", "80,81", "b")
    assert process_argv(InstanceRecord("i-3", ["echo hi"], shell=True)) == ["/bin/sh", "-c", "echo hi"]
    assert agent_address("/h", "i-2") != agent_address("/other", "i-2")


@pytest.mark.slow
def test_the_guest_agent_answers_while_its_instance_lives() -> None:
    address = agent_address("/test", "agent-test")
    agent = subprocess.Popen([sys.executable, "-m", "handlers.bootgroups.guest_agent", "--address", address, "--",
                              sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        wait_until(lambda: guest_agent.ping(address, 0.5)[0], timeout=10, what="the agent answers")
        assert guest_agent.ping(address, 0.5) == (True, "the guest agent answered guest-ping")
        agent.terminate()
        assert agent.wait(timeout=10) != 0
    finally:
        agent.kill()
    alive, seen = guest_agent.ping(address, 0.5)
    assert not alive and seen.startswith("no guest agent answers")
