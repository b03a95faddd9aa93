"""The mission demo (templates/mission.yaml) as the README runs it: `crhelper stack create` through
the real CLI, traffic through the router the stack started to the tier each route names, then
`crhelper stack delete` and no process of the stack left (a /proc scan, no psutil).

Real parts only: the local FC endpoint runs the three built-in providers; the tiers are real
servers (the database a real SQLite file) under the supervisor daemon; the router is
`crhelper router serve`, started by the boot group as its last tier. Each run has its own
$CRHELPER_HOME (conftest), its own 127.x.y.* addresses and its own domain."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_support import created_outputs, crhelper_json
from crhelper.manifest import installed_manifests
from crhelper.testing import wait_until
from demo_support import get, processes_with, timed

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "mission.yaml"
BINDINGS = REPO / "templates" / "mission.bindings.yaml"
#: Fast process stops and a supervisor daemon that leaves as soon as it owns nothing, so that
#: "nothing left" can include the daemon itself.
FAST = {"CRHELPER_SUPERVISOR_GRACE": "2", "CRHELPER_SUPERVISOR_LINGER": "1"}
crhelper = timed(functools.partial(crhelper_json, env=FAST, timeout=150))


def default_token(template: dict[str, Any], resource: dict[str, Any]) -> str:
    """A resource's ServiceToken with the template's defaults: a literal, or a Ref to a parameter."""
    token = resource["Properties"]["ServiceToken"]
    return str(template["Parameters"][token["Ref"]]["Default"] if isinstance(token, dict) else token)


def test_every_token_of_the_mission_is_bound_to_a_built_in_provider_serving_its_types() -> None:
    template = yaml.safe_load(TEMPLATE.read_text())
    bindings = yaml.safe_load(BINDINGS.read_text())["bindings"]
    tokens = {name: default_token(template, resource) for name, resource in template["Resources"].items()}
    assert set(tokens.values()) == set(bindings)
    manifests = {manifest.handler: manifest for manifest in installed_manifests()}
    for name, resource in template["Resources"].items():
        manifest = manifests[bindings[tokens[name]]]  # a built-in provider
        assert resource["Type"] in manifest.resource_types, (name, resource["Type"], manifest.name)
    for server in ("db.py", "app.py", "web.py", "tier.py"):
        compile((REPO / "samples" / "mission" / server).read_text(), server, "exec")


@pytest.fixture
def fc_sdk() -> None:
    """The bindings' FC tokens run through the local FC endpoint with `fc2` (the `test` extra)."""
    if importlib.util.find_spec("fc2") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("aliyun-fc2 is not installed and CI=true (pip install -e '.[test]')")
        pytest.skip("aliyun-fc2 is not installed (pip install -e '.[test]')")


@pytest.fixture
def bindings(tmp_path: Path) -> Path:
    """The template's own bindings, with the fast stops above in the functions' environment."""
    document = yaml.safe_load(BINDINGS.read_text())
    document["environment"] = {**document.get("environment", {}), **FAST}
    path = tmp_path / "mission.bindings.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_mission_stack_serves_each_tier_through_its_route_and_leaves_no_process_after_delete(
        fc_sdk: None, bindings: Path) -> None:
    prefix = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    stack, domain = f"mission-{random.randrange(16 ** 6):06x}", f"m{random.randrange(16 ** 6):06x}.localhost"
    home = os.environ["CRHELPER_HOME"]
    created = crhelper("stack", "create", str(TEMPLATE), "--stack", stack, "--bindings", str(bindings),
                       "-p", f"Python={sys.executable}", "-p", f"HostPrefix={prefix}", "-p", f"RouterHost={prefix}.9",
                       "-p", f"Domain={domain}")
    outputs = created_outputs(created)
    assert outputs["Router"] == f"{prefix}.9:8080"
    (db,), (app,), (web,), (router,) = (tier["Members"] for tier in outputs["Tiers"])
    assert [tier["Order"] for tier in outputs["Tiers"]] == [0, 1, 2, 3]
    assert outputs["Readiness"] == {db: "Ready", app: "Ready", web: "Ready", router: "Ready"}

    # Traffic flows at once: no wait between the create's end and the first request.
    status, headers, body = get(outputs["Router"], domain, "/")
    assert (status, headers["x-mission-tier"], headers["x-mission-instance"]) == (200, "web", web), body
    assert f"served by the web tier ({web})".encode() in body
    for visit in (1, 2):
        status, headers, body = get(outputs["Router"], domain, "/api/")
        assert (status, headers["x-mission-tier"], headers["x-mission-instance"]) == (200, "app", app), body
        answer = json.loads(body)
        assert answer["visits"] == visit and answer["database"]["instance"] == db, answer
    assert get(outputs["Router"], "elsewhere.localhost", "/")[0] == 404  # only the stack's domain is routed
    with sqlite3.connect(Path(home) / "mission" / f"{db}.sqlite") as database:  # the db tier's real file
        assert database.execute("SELECT count(*), min(path) FROM visits").fetchone() == (2, "/api/")

    cluster = outputs["ClusterEndpoints"]["http"]
    status, _, body = get(cluster, "x", "/")
    assert status == 200 and json.loads(body)["greeting"] == f"hello from {stack}", body

    running = processes_with(f"MISSION_STACK={stack}")
    assert len(running) >= 4, running  # the three tiers and the router (the scan can see them)
    nodes = processes_with(f"APPCENTER_CLUSTER_CLUSTER_ID={outputs['ClusterId']}")
    assert any("server.py" in command for command in nodes.values()), nodes  # the cluster's node servers

    deleted = crhelper("stack", "delete", "--stack", stack)
    assert deleted["Stack"]["status"] == "DELETE_COMPLETE", json.dumps(deleted)[-3000:]
    assert processes_with(f"MISSION_STACK={stack}") == {}  # the tiers and the router: stopped by the delete
    assert processes_with(f"APPCENTER_CLUSTER_CLUSTER_ID={outputs['ClusterId']}") == {}  # the nodes released
    wait_until(lambda: not processes_with(f"CRHELPER_HOME={home}"), timeout=15, interval=0.2,
               what=f"every process of the stack's home gone (left: {processes_with(f'CRHELPER_HOME={home}')})")
    registry = Path(home) / "router" / "services.json"  # what `crhelper router services` lists
    assert json.loads(registry.read_text()) == {}  # each tier unregistered its service when it stopped


@pytest.mark.slow
def test_a_relative_working_directory_is_the_template_folders_and_refused_without_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What lets mission.yaml run the servers it ships beside it (`WorkingDirectory: ../samples/mission`)."""
    from crhelper import Failure
    from handlers.bootgroups.provider import resolve_working_directory

    monkeypatch.setenv("CRHELPER_TEMPLATE_DIR", str(TEMPLATE.parent))
    assert resolve_working_directory("../samples/mission") == str(REPO / "samples" / "mission")
    assert resolve_working_directory("/srv/app") == "/srv/app"
    assert resolve_working_directory(None) is None
    monkeypatch.delenv("CRHELPER_TEMPLATE_DIR")
    with pytest.raises(Failure, match="WorkingDirectory: must be an absolute path, or relative to the template's folder"):
        resolve_working_directory("rel")
