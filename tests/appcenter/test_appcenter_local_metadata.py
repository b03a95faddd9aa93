"""The local backend's metadata through its real metad endpoints: every node's tree published in one
call with the fields only this platform knows (MAC, machine), /self/cmd while a command runs, the
text form, a package without roles laid out as confd templates read it; the nodes' processes
started, stopped and released in single supervisor requests; a backend of another process (a
resumed executor) starts a missing metad, and waits for it to listen, before a command."""

from __future__ import annotations

import json
import socket
import time
import urllib.request

import pytest

from appcenter_support import cluster_of
from crhelper.local.supervisor import LIVE, SupervisorClient
from handlers.appcenter import metadata
from handlers.appcenter.backend_local import LocalNodeBackend, node_mac
from handlers.appcenter.backends import CommandResult, NodeSpec

pytestmark = pytest.mark.slow

CLUSTER = "cl-localmeta"


def get(url: str, accept: str | None = None, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    while True:
        try:
            with urllib.request.urlopen(request, timeout=3) as answer:
                return str(answer.read().decode())
        except OSError:  # not listening yet (URLError is an OSError), or 404 before the first publication
            assert time.monotonic() < deadline, url
            time.sleep(0.05)


def test_trees_are_published_together_with_platform_fields_and_the_running_command(
        supervisor: SupervisorClient) -> None:
    backend = LocalNodeBackend.from_env()
    names = ["zk_node-1", "zk_node-2", "zk_node-3"]
    infos = backend.create_nodes(CLUSTER, [NodeSpec(node_id=name, role="zk_node", sid=int(name[-1]),
                                                    placement={"owner": "stack/App"}) for name in names])
    hosts = [{"node_id": f"cln-{name}", "instance_id": infos[name].instance_id, "ip": infos[name].ip,
              "role": "zk_node", "sid": name[-1]} for name in names]
    zookeeper = cluster_of("zookeeper")
    trees = {name: metadata.self_tree(entry, hosts, {"cluster_id": CLUSTER}, {"port": 2181}, definition=zookeeper)
             for name, entry in zip(names, hosts)}
    backend.publish_metadata_many(CLUSTER, trees)

    first = f"http://{infos['zk_node-1'].ip}:{metadata.METAD_PORT}"
    seen = json.loads(get(f"{first}/self/hosts"))
    metads = [status for status in supervisor.list() if status.name.startswith("acmd-")]
    assert len(metads) == 3 and all(status.state in LIVE for status in metads)
    assert sorted(seen) == sorted(info.instance_id for info in infos.values())  # no role level (B7)
    own = json.loads(get(f"{first}/self/host"))
    assert own["mac"] == node_mac(backend.home, CLUSTER, "zk_node-1") and own["mac"].startswith("02:")
    assert own["physical_machine"] == socket.gethostname() and own["ip"] == infos["zk_node-1"].ip
    assert len({entry["mac"] for entry in seen.values()}) == 3
    text = get(f"{first}/self/hosts", accept="text/plain").splitlines()
    assert f"/{infos['zk_node-3'].instance_id}/ip\t{infos['zk_node-3'].ip}" in text
    assert get(f"{first}/{CLUSTER}/env/port") == "2181"
    on_disk = json.loads((backend.node_dir(CLUSTER, "zk_node-2") / "metadata.json").read_text())
    assert on_disk["host"]["mac"] == node_mac(backend.home, CLUSTER, "zk_node-2")

    script = ('"$APPCENTER_PYTHON" -c "import os, urllib.request; '
              'print(urllib.request.urlopen(os.environ[\'METAD_URL\'] + \'/self/cmd/id\').read().decode())"')
    backend.start_command(CLUSTER, "inv-look", names[:2], f"{script}; sleep 0.3", timeout=20, env={})
    running = json.loads(get(f"{first}/self/cmd", accept="application/json"))
    assert running["id"] == "inv-look" and running["timeout"] == "20" and "sleep 0.3" in running["cmd"]
    deadline = time.monotonic() + 20
    while not all(backend.command_results(CLUSTER, "inv-look").values()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    results = backend.command_results(CLUSTER, "inv-look")
    assert results == {name: CommandResult(0, "inv-look") for name in names[:2]}  # each saw its own /self/cmd
    assert not [status for status in supervisor.list() if status.name.startswith("acx-")]  # forgotten together

    (metad,) = [status for status in supervisor.list() if status.name.startswith("acmd-")
                and status.argv[status.argv.index("--host") + 1] == infos["zk_node-3"].ip]
    supervisor.stop(metad.name, grace=0.2, forget=True)  # zk_node-3's endpoint is gone
    other = LocalNodeBackend.from_env()  # as a resumed executor in another process builds it
    other.start_command(CLUSTER, "inv-three", ["zk_node-3"], script, timeout=20, env={})
    deadline = time.monotonic() + 20
    while not all(other.command_results(CLUSTER, "inv-three").values()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert other.command_results(CLUSTER, "inv-three") == {"zk_node-3": CommandResult(0, "inv-three")}

    backend.stop_nodes(CLUSTER, names)  # every node's processes in one request
    assert all(not status.running for status in supervisor.list())
    backend.delete_nodes(CLUSTER, names)
    assert supervisor.list() == [] and not backend.cluster_dir(CLUSTER).exists()
