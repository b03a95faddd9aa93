"""The mission demo's second way (issue 16): the three built-in providers deployed as local Function
Compute 3.0 functions by templates/deploy-fc3.yaml from a real `crhelper package` zip (cp312, run
under python3.12 from the function's own code folder), then templates/mission.yaml with that
stack's ServiceToken outputs and no bindings file. Traffic flows to each tier through the router
the boot group started; deleting both stacks leaves none of their processes.

What this run proves beyond tests/demo/test_demo_mission.py: the tiers, the router and the
cluster's nodes belong to the supervisor daemon, not to the FC worker that asked for them (they
outlive the `stack create` process and its code folder), and a later invocation from another
code folder (the delete) finds them again. The boot-group and AppCenter examples (templates/examples/, issue 15) then run through the same
tokens. Tests never reach a package index: the wheels come
from the wheelhouse `.ci/run` downloads (`CRHELPER_WHEELHOUSE_PY312`)."""

from __future__ import annotations

import functools
import json
import os
import random
import socket
import sys
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest

from cli_support import created_outputs, crhelper_json
from crhelper.emulator.cloud_local_oss import oss_root
from crhelper.local.supervisor import LIVE, SupervisorClient
from demo_support import at_once, get, processes_with, timed

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "templates"
crhelper = timed(crhelper_json)


def answers_ok(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=5) as connection:
            return connection.recv(16) == b"ok\n"
    except OSError:
        return False


@pytest.fixture
def daemon_stopped() -> Iterator[None]:
    """The supervisor daemon the functions started lingers 30 s once it owns nothing (the functions'
    environment is the template's): stop it after the test, whatever happened."""
    yield
    SupervisorClient().stop_all(grace=1)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_mission_runs_through_the_fc3_deploy_templates_tokens_with_no_bindings_file(
        wheelhouse: Path, required_python: Callable[[str], str], tmp_path: Path, daemon_stopped: None) -> None:
    required_python("3.12")
    code = oss_root() / "crhelper-code" / "crhelper-providers.zip"
    code.parent.mkdir(parents=True, exist_ok=True)
    built = crhelper("package", "routes", "--extra", "oss", "--runtime", "python3.12", "--no-index",
                     "--find-links", str(wheelhouse), "--output", str(code))
    assert built["runtime"] == "python3.12"
    routes_db = str(tmp_path / "routes.db")
    providers = crhelper("stack", "create", str(TEMPLATES / "deploy-fc3.yaml"), "--stack", "providers",
                         "-p", f"RouterDb={routes_db}", "-p", "StateBucketDeletionForce=true")
    tokens = created_outputs(providers)

    prefix = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    stack, domain = f"mission-{random.randrange(16 ** 6):06x}", f"m{random.randrange(16 ** 6):06x}.localhost"
    created = crhelper("stack", "create", str(TEMPLATES / "mission.yaml"), "--stack", stack,
                       *(arg for name in ("BootGroups", "Routes", "AppCenter")
                         for arg in ("-p", f"{name}ServiceToken={tokens[f'{name}ServiceToken']}")),
                       "-p", f"Python={sys.executable}", "-p", f"HostPrefix={prefix}", "-p", f"RouterHost={prefix}.9",
                       "-p", f"Domain={domain}", "-p", f"RouterDb={routes_db}")
    outputs = created_outputs(created)
    (db,), (app,), (web,), (router,) = (tier["Members"] for tier in outputs["Tiers"])
    assert outputs["Readiness"] == {db: "Ready", app: "Ready", web: "Ready", router: "Ready"}

    status, headers, body = get(outputs["Router"], domain, "/")  # at once: no wait after the create
    assert (status, headers["x-mission-tier"], headers["x-mission-instance"]) == (200, "web", web), body
    for visit in (1, 2):
        status, headers, body = get(outputs["Router"], domain, "/api/")
        assert (status, headers["x-mission-tier"], headers["x-mission-instance"]) == (200, "app", app), body
        answer = json.loads(body)
        assert answer["visits"] == visit and answer["database"]["instance"] == db, answer
    status, _, body = get(outputs["ClusterEndpoints"]["http"], "x", "/")
    assert status == 200 and json.loads(body)["greeting"] == f"hello from {stack}", body

    # the tiers and the nodes belong to the supervisor daemon, which outlived the create's FC worker
    daemons = processes_with(f"CRHELPER_HOME={os.environ['CRHELPER_HOME']}")
    assert any("crhelper.local.supervisor_daemon" in command for command in daemons.values()), daemons
    assert len(processes_with(f"MISSION_STACK={stack}")) >= 4
    assert processes_with(f"APPCENTER_CLUSTER_CLUSTER_ID={outputs['ClusterId']}")

    deleted = crhelper("stack", "delete", "--stack", stack)  # another process, another code folder
    assert deleted["Stack"]["status"] == "DELETE_COMPLETE", json.dumps(deleted)[-3000:]
    assert processes_with(f"MISSION_STACK={stack}") == {}
    assert processes_with(f"APPCENTER_CLUSTER_CLUSTER_ID={outputs['ClusterId']}") == {}
    assert [s.name for s in SupervisorClient().list() if s.state in LIVE] == []  # the daemon owns nothing

    # the boot-group and AppCenter examples (issue 15) through the same tokens, sharing the package and
    # providers; the two stacks are independent, so each pair of commands runs at once
    prefix = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    tiers, app = map(created_outputs, at_once(
        lambda: crhelper("stack", "create", str(TEMPLATES / "examples" / "bootgroups.yaml"), "--stack", "tiers",
                         "-p", f"ServiceToken={tokens['BootGroupsServiceToken']}",
                         "-p", f"Python={sys.executable}", "-p", f"HostPrefix={prefix}"),
        lambda: crhelper("stack", "create", str(TEMPLATES / "examples" / "appcenter.yaml"), "--stack", "app",
                         "-p", f"ServiceToken={tokens['AppCenterServiceToken']}",
                         "-p", f"Package={REPO / 'samples' / 'appcenter-demo'}", "-p", "Greeting=hi fc")))
    assert [tier["Order"] for tier in tiers["Tiers"]] == [0, 1]
    assert answers_ok(f"{prefix}.1", 15432) and answers_ok(f"{prefix}.2", 18080)
    with urllib.request.urlopen(f"http://{app['Endpoints']['http']}/", timeout=10) as answer:
        assert json.loads(answer.read())["greeting"] == "hi fc"
    for done in at_once(*(functools.partial(crhelper, "stack", "delete", "--stack", example) for example in ("tiers", "app"))):
        assert done["Stack"]["status"] == "DELETE_COMPLETE", json.dumps(done)[-3000:]
    assert not answers_ok(f"{prefix}.1", 15432) and not answers_ok(f"{prefix}.2", 18080)
    assert [s.name for s in SupervisorClient().list() if s.state in LIVE] == []
    assert crhelper("stack", "delete", "--stack", "providers")["Stack"]["status"] == "DELETE_COMPLETE"
