"""The one provider loader (`crhelper.loading`): every spec form, errors that say what to do next,
the current directory importable only when the caller asks, and the light FC entry re-exporting it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import crhelper.fc
from crhelper import Provider
from crhelper import loading
from crhelper.loading import IMPORT_HINT, ProviderSpecError, lazy_handler, load_provider
from crhelper.testing import make_event

REPO = Path(__file__).resolve().parents[2]

SOURCE = textwrap.dedent("""
    from crhelper import Provider, Result
    provider = Provider()
    provider.create("Custom::Main")(lambda props, request: Result(physical_id="main"))
    other = Provider()
    other.create("Custom::Other")(lambda props, request: Result(physical_id="other"))
    number = 7
""")


@pytest.fixture
def sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "loading_sample_mod.py"
    path.write_text(SOURCE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "loading_sample_mod", raising=False)
    return path


@pytest.mark.parametrize("form, types", [
    ("loading_sample_mod:provider", ["Custom::Main"]),
    ("loading_sample_mod.other", ["Custom::Other"]),
    ("{path}", ["Custom::Main"]),
    ("{path}:other", ["Custom::Other"]),
])
def test_every_spec_form_loads_its_provider(sample: Path, form: str, types: list[str]) -> None:
    provider = load_provider(form.format(path=sample))
    assert isinstance(provider, Provider) and provider.types == types


def test_a_module_spec_returns_the_modules_own_object(sample: Path) -> None:
    provider = load_provider("loading_sample_mod:provider")
    assert provider is sys.modules["loading_sample_mod"].provider


@pytest.mark.parametrize("spec, problem, next_step", [
    ("no_such_module_xyz:provider", "no module named 'no_such_module_xyz'", IMPORT_HINT),
    ("samples/nope.py:provider", "no such file: samples/nope.py", "check the path"),
    ("not a spec", f"provider spec 'not a spec' is not {loading.SPEC_FORMS}", "e.g. samples.greeting:provider"),
    ("loading_sample_mod:missing", "module 'loading_sample_mod' has no attribute 'missing'", "loading_sample_mod:provider"),
    ("loading_sample_mod:number", "'loading_sample_mod:number' is a int, not a crhelper Provider", "Provider()"),
])
def test_spec_errors_name_the_problem_and_the_next_step(sample: Path, monkeypatch: pytest.MonkeyPatch,
                                                        spec: str, problem: str, next_step: str) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(ProviderSpecError) as raised:
        load_provider(spec)
    assert raised.value.problem == problem
    assert next_step in raised.value.next_step
    assert str(raised.value) == f"{problem}; next: {raised.value.next_step}"


def test_a_missing_dependency_keeps_its_own_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_a_dependency.py").write_text("import dependency_that_is_not_installed_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as raised:
        load_provider("needs_a_dependency:provider")
    assert not isinstance(raised.value, ProviderSpecError)
    assert raised.value.name == "dependency_that_is_not_installed_xyz"
    assert "needs_a_dependency" not in sys.modules


def test_the_current_directory_is_importable_only_when_the_caller_asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cwd_only_provider.py").write_text(SOURCE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_only_provider", raising=False)
    with pytest.raises(ProviderSpecError, match="no module named 'cwd_only_provider'"):
        load_provider("cwd_only_provider:provider")
    assert str(tmp_path) not in sys.path
    assert load_provider("cwd_only_provider:provider", cwd_importable=True).types == ["Custom::Main"]
    assert sys.path[0] == str(tmp_path)


def test_the_lazy_entry_answers_a_failed_import_and_logs_its_traceback(response_server, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "explodes_at_import.py").write_text("def boom():\n    raise RuntimeError('no config file')\nboom()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    handler = lazy_handler("explodes_at_import:provider")
    for _ in range(2):  # imported once, answered every time
        event = response_server.attach(make_event("Create", "Custom::Any"))
        returned = json.loads(handler(json.dumps(event), None))
        assert returned["Reason"] == "provider failed to initialise: RuntimeError: no config file"
        assert response_server.wait_for(event["RequestId"]) == returned
    logged = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    failures = [entry for entry in logged if entry["message"] == "provider import failed"]
    assert len(failures) == 1 and "in boom" in failures[0]["traceback"]


def test_the_lazy_entry_loads_a_file_spec_from_the_environment(response_server, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "file_spec_provider.py"
    path.write_text(SOURCE, encoding="utf-8")
    monkeypatch.setenv(loading.PROVIDER_ENV, f"{path}:other")
    event = response_server.attach(make_event("Create", "Custom::Other"))
    lazy_handler()(json.dumps(event), None)
    assert response_server.wait_for(event["RequestId"])["PhysicalResourceId"] == "other"


def test_crhelper_fc_is_the_light_public_face_of_the_loader() -> None:
    assert crhelper.fc.load_provider is load_provider
    assert crhelper.fc.lazy_handler is lazy_handler
    assert crhelper.fc.ProviderSpecError is ProviderSpecError
    assert crhelper.fc.answer_without_provider is loading.answer_without_provider
    assert isinstance(crhelper.fc.handler, loading.LazyHandler) and crhelper.fc.handler.spec is None


@pytest.mark.slow
def test_the_fc_cold_path_imports_no_sdk_and_nothing_of_the_command_line() -> None:
    script = ("import sys; start = set(sys.modules); import crhelper.fc; "
              "print('\\n'.join(sorted(set(sys.modules) - start)))")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    outside = [m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "crhelper"]
    assert outside == []
    assert not [m for m in loaded if m.startswith(("crhelper.cli", "crhelper.emulator", "crhelper.manifest",
                                                    "crhelper.contract", "crhelper.local"))]


@pytest.mark.parametrize("source, problem, next_step", [
    ("x = (\n", "bad_at_import.py:1: SyntaxError: '(' was never closed", "fix the syntax at that line"),
    # raised inside crhelper (the registry): the user's line is named, not the library's
    ("from crhelper import Provider\nprovider = Provider()\n\nprovider.create('Bad')(print)\n",
     "bad_at_import.py:4: ValueError: resource type must be", "`python bad_at_import.py` shows the traceback"),
    ("import json\nimport not_installed_dependency_xyz\n",
     "bad_at_import.py:2: ModuleNotFoundError: No module named 'not_installed_dependency_xyz'",
     "install the package that provides 'not_installed_dependency_xyz'"),
])
def test_a_failed_import_is_described_in_one_line_with_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     source: str, problem: str, next_step: str) -> None:
    (tmp_path / "bad_at_import.py").write_text(source, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception) as raised:
        load_provider("bad_at_import.py")
    described, hint = loading.describe_load_failure("bad_at_import.py", raised.value)
    assert described.startswith(problem) and "\n" not in described
    assert next_step in hint


def test_a_spec_error_is_described_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(ProviderSpecError) as raised:
        load_provider("samples/greeting.py:missing")
    assert loading.describe_load_failure("samples/greeting.py:missing", raised.value) == (
        raised.value.problem, raised.value.next_step)
