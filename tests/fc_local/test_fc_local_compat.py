"""FC 3.0's compatibility names: a function created through the FC 2.0 API is reachable through the
FC 3.0 API as `service$function` (deploy.md §3.5), on the same instances; both real SDKs."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any, Iterator

import pytest
from alibabacloud_fc20230330 import models
from alibabacloud_tea_openapi.exceptions import ClientException
from alibabacloud_tea_util.models import RuntimeOptions

from crhelper.local.fc_server import LocalFunctionCompute

HANDLER = '''import json, os

def handler(event, context):
    return json.dumps({"pid": os.getpid(), "event": event.decode(), "service": context.service.name,
                       "function": context.function.name, "env_service": os.environ.get("FC_SERVICE_NAME")})
'''


@pytest.fixture(scope="module")
def fc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFunctionCompute]:
    with LocalFunctionCompute(state_dir=tmp_path_factory.mktemp("compat-state")) as server:
        yield server


def _invoke3(client: Any, name: str, payload: bytes) -> Any:
    return client.invoke_function_with_options(name, models.InvokeFunctionRequest(body=payload),
                                               models.InvokeFunctionHeaders(), RuntimeOptions())


@pytest.mark.slow
def test_an_fc2_function_is_invoked_through_fc3_as_service_dollar_function(fc: LocalFunctionCompute, tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("index.py", HANDLER)
    (tmp_path / "code.zip").write_bytes(buffer.getvalue())
    fc2 = fc.client()
    fc2.create_service("legacy")
    fc2.create_function("legacy", "greet", "python3.10", "index.handler", codeZipFile=str(tmp_path / "code.zip"),
                        memorySize=128, timeout=10)
    through2 = json.loads(fc2.invoke_function("legacy", "greet", payload=b"two").data)
    fc3 = fc.client3()
    through3 = json.loads(_invoke3(fc3, "legacy$greet", b"three").body.read())
    assert through3["event"] == "three"
    assert (through3["service"], through3["function"], through3["env_service"]) == ("legacy", "greet", "legacy")
    assert through3["pid"] == through2["pid"]  # the 2.0 function's warm instance served the 3.0 call

    for name, code in (("legacy$absent", "FunctionNotFound"), ("nolegacy$greet", "FunctionNotFound")):
        with pytest.raises(ClientException) as missing:
            _invoke3(fc3, name, b"")
        assert (missing.value.status_code, missing.value.code) == (404, code)
