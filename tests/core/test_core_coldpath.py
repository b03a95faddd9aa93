"""What a Function Compute cold start no longer pays for (issue 18), and what it must keep: `Result`
and `InProgress` stay frozen dataclasses with no generated code, and one Create on the instance's
default store leaves one handler thread and the timer thread behind, no lease thread."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys
import textwrap

import pytest

from crhelper import InProgress, Result
from crhelper.logs import redact_url


def test_result_and_in_progress_are_still_frozen_dataclasses() -> None:
    result = Result(physical_id="id-1", data={"A": 1})
    assert dataclasses.is_dataclass(result)
    assert [f.name for f in dataclasses.fields(Result)] == ["physical_id", "data"]
    assert [f.name for f in dataclasses.fields(InProgress)] == ["state", "delay"]
    assert dataclasses.replace(result, data=None) == Result("id-1")
    assert dataclasses.asdict(result) == {"physical_id": "id-1", "data": {"A": 1}}
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.physical_id = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del result.data  # type: ignore[misc]
    assert InProgress() == InProgress(None, 30.0) != InProgress({"step": 1}, 30.0)
    assert Result("a") != InProgress("a")  # the class is part of equality, as with dataclasses
    assert hash(Result("a")) == hash(Result("a")) and hash(InProgress(delay=5)) == hash(InProgress(None, 5))
    assert repr(result) == "Result(physical_id='id-1', data={'A': 1})"
    assert repr(InProgress({"s": 1}, 5)) == "InProgress(state={'s': 1}, delay=5)"
    assert pickle.loads(pickle.dumps(result)) == result and copy.deepcopy(result) == result
    assert Result.__match_args__ == ("physical_id", "data")


def test_redacted_urls_still_escape_controls_and_surrogates() -> None:
    """The escaping regex is compiled only for a URL that needs it; the result is what it was."""
    assert redact_url("https://ros.aliyuncs.com/path?Signature=x") == "https://ros.aliyuncs.com/path?<redacted>"
    assert redact_url("https://h/a\x7fb\x00c\udc80d") == "https://h/a\\x7fb\\x00c\\udc80d"
    assert redact_url("https://h/a b") == "https://h/a\\x20b"
    assert redact_url("https://h/\u00e9\u2028") == "https://h/\u00e9\u2028"  # printable or not ours to escape


_COLD_CHILD = textwrap.dedent('''
    import http.server, json, sys, threading
    compiled = []

    def audit(event, args):
        if event == "compile":
            # Code that dataclasses generates for a class of ours: the crhelper frame above dataclasses.py.
            frame, generated = sys._getframe(1), False
            while frame is not None and "/crhelper/" not in frame.f_code.co_filename:
                code = frame.f_code
                generated = generated or (code.co_filename.endswith("dataclasses.py") and code.co_name != "<module>")
                frame = frame.f_back
            if frame is not None and generated:
                compiled.append(frame.f_code.co_filename.rpartition("/crhelper/")[2])

    sys.addaudithook(audit)

    class Sink(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        do_POST = do_PUT
        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, name="sink", daemon=True).start()

    from crhelper import Provider, Result
    provider = Provider()

    @provider.create("Custom::Cold")
    def create(props, request):
        return Result(physical_id="cold-1")

    class Function:
        timeout = 60

    class Context:
        request_id = "r-1"
        function = Function()

    url = "http://127.0.0.1:%d/response?sig=x" % server.server_address[1]
    event = {"RequestType": "Create", "ResponseURL": url, "StackId": "stack-1", "RequestId": "req-1",
             "ResourceType": "Custom::Cold", "LogicalResourceId": "Res", "ResourceProperties": {}}
    summary = json.loads(provider.fc_handler(event, Context()))
    print(json.dumps({"status": summary.get("Status"), "compiled": compiled,
                      "threads": sorted(t.name for t in threading.enumerate() if t.name.startswith("crhelper"))}))
''')


@pytest.mark.slow
def test_one_fc_create_leaves_one_handler_thread_and_the_timer_thread(tmp_path) -> None:
    """On the instance's default store (memory://) the store calls need no guard thread of their own
    and a 60 s function's step never lives long enough to need a lease renewal: after one Create only
    the handler thread (reused by the next request) and the shared timer thread remain, and no code
    of ours was compiled at run time (no dataclass was generated on the way)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CRHELPER_HOME": str(tmp_path / ".crhelper"),
           "FC_FUNCTION_NAME": "cold", "FC_REGION": "cn-hangzhou", "PYTHONPATH": ":".join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _COLD_CHILD], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    found = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert found["status"] == "SUCCESS", (found, done.stderr)
    assert found["threads"] == ["crhelper-handler", "crhelper-outbound-deadlines"], found
    ours = {"response.py", "lifecycle.py", "runtime.py", "outbound.py", "logs.py", "provider.py", "dispatch.py"}
    assert not ours & set(found["compiled"]), found["compiled"]


def test_the_system_trust_is_read_lazily_only_from_a_hashed_folder(tmp_path) -> None:
    """OpenSSL's capath needs `<8 lowercase hex>.<digit>` links; a folder of plain PEM files does not do."""
    from crhelper.outbound import _has_hashed_certificates

    (tmp_path / "ACCVRAIZ1.pem").write_text("x")
    (tmp_path / "0123ABCD.0").write_text("x")  # upper case: not a name OpenSSL looks up
    (tmp_path / "0123abcd.01").write_text("x")
    assert not _has_hashed_certificates(str(tmp_path))
    assert not _has_hashed_certificates(str(tmp_path / "missing"))
    (tmp_path / "0123abcd.0").write_text("x")
    assert _has_hashed_certificates(str(tmp_path))
