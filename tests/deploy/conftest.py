"""Fixtures every deploy test module shares (each module starts its own local FC as `fc`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest


@pytest.fixture()
def keys(fc: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`crhelper deploy` finds the local FC's key in the environment, and no profile file of the
    machine's user (HOME is the test's)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("ALIBABA_CLOUD_PROFILE", raising=False)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", fc.access_key_id)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", fc.access_key_secret)


@pytest.fixture()
def invoke_reaches() -> Callable[[Any, str, str], None]:
    """`reach(fc, token, name)`: a Create sent to the ServiceToken's function through the matching SDK
    (FC 3.0 for a function, FC 2.0 for service.function) is answered SUCCESS by deploy_hello.py."""

    def reach(fc: Any, token: str, name: str) -> None:
        from crhelper.servicetoken import FcFunctionToken, parse_service_token
        from crhelper.testing import ResponseServer, make_event

        parsed = parse_service_token(token)
        assert isinstance(parsed, FcFunctionToken)
        with ResponseServer() as responses:
            event = responses.attach(make_event("Create", "Custom::Hello", {"ServiceToken": token, "Name": name}))
            payload = json.dumps(event).encode()
            if parsed.service is None:
                from alibabacloud_fc20230330 import models

                fc.client3().invoke_function(parsed.function, models.InvokeFunctionRequest(body=payload))
            else:
                fc.client().invoke_function(parsed.service, parsed.function, payload=payload)
            answer = responses.wait_for(event["RequestId"])
        assert (answer["Status"], answer["Data"]) == ("SUCCESS", {"Text": f"hi {name}"}), answer

    return reach
