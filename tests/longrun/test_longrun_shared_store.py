"""Two providers sharing one store (two functions on one OSS prefix, or one home): a provider's
recovery resumes only operations of the types it handles; another provider's abandoned operation is
left to that provider, which finishes it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crhelper import Provider, Result
from crhelper.testing import make_event

#: Accepts the request (stored before any step runs), then dies at once: the operation is abandoned.
ACCEPT_AND_DIE = textwrap.dedent('''
    import json, os, sys
    from crhelper import Provider
    provider = Provider(store=sys.argv[1])
    provider.create("Custom::Cluster")(lambda props, request: None)
    assert provider.accept(json.load(open(sys.argv[2]))) is not None
    os._exit(0)
''')


@pytest.mark.slow
def test_recovery_leaves_another_providers_operation_to_that_provider(response_server, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    event = response_server.attach(make_event("Create", "Custom::Cluster", {}))
    (tmp_path / "event.json").write_text(json.dumps(event))
    subprocess.run([sys.executable, "-c", ACCEPT_AND_DIE, url, str(tmp_path / "event.json")], check=True, timeout=30)

    clusters, others = Provider(store=url), Provider(store=url)
    clusters.create("Custom::Cluster")(lambda props, request: Result(physical_id="cluster-1"))
    others.create("Custom::Other")(lambda props, request: Result(physical_id="other-1"))
    try:
        assert others.recover() == 0
        assert response_server.responses_for(event["RequestId"]) == []  # not answered "unknown ResourceType"
        assert clusters.recover() == 1
        body = response_server.wait_for(event["RequestId"], timeout=5)
        assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "cluster-1"
        assert len(response_server.responses_for(event["RequestId"])) == 1
    finally:
        clusters.close()
        others.close()
