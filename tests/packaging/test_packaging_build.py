"""`crhelper package` end to end: real pip subprocesses installing tiny wheels from a folder
(`--no-index --find-links`, never an index), the target interpreter compiling and then loading
the bytecode from a read-only folder, the command line's output."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from typing import Callable
from pathlib import Path

import pytest

from crhelper.cli.main import main
from crhelper.packaging import PackagingError
from crhelper.packaging.build import PackageOptions, PackageResult, build
from crhelper.packaging.checksums import crc64
from crhelper.packaging.targets import runtime
from packaging_wheels import build_sdist, wheelhouse

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
#: A provider that needs no third-party import, so the stand-in wheels are enough to load it.
PROVIDER = '''
from crhelper import Provider, Result

provider = Provider()

@provider.create("Custom::Echo")
def create(props: dict, request) -> Result:
    return Result(physical_id="echo", data={"Echo": props.get("Text", "")})
'''


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("inputs")
    (root / "echo.py").write_text(PROVIDER, encoding="utf-8")
    return root / "echo.py", wheelhouse(root / "wheels", ("3.10", "3.12"))


def _build(provider: Path, wheels: Path, output: Path, name: str = "python3.12", **extra: object) -> PackageResult:
    options = PackageOptions(spec=f"{provider}:provider", runtime=runtime(name), output=output,
                             find_links=(str(wheels),), no_index=True, **extra)  # type: ignore[arg-type]
    return build(options)


@pytest.fixture(scope="module")
def built_312(inputs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory,
              required_python: Callable[[str], str]) -> PackageResult:
    required_python("3.12")
    provider, wheels = inputs
    return _build(provider, wheels, tmp_path_factory.mktemp("first") / "echo.zip")


def test_two_builds_give_the_same_bytes_with_cp312_wheels_chosen_on_this_machine(
        inputs: tuple[Path, Path], built_312: PackageResult, tmp_path: Path) -> None:
    provider, wheels = inputs
    previous = os.umask(0o077)
    try:  # another umask, another output folder, the inputs touched
        os.utime(provider, (1_000_000_000, 1_000_000_000))
        again = _build(provider, wheels, tmp_path / "again.zip")
    finally:
        os.umask(previous)
    first = built_312.output.read_bytes()
    assert again.output.read_bytes() == first
    assert (again.sha256, again.crc64, again.size) == (built_312.sha256, built_312.crc64, len(first))
    assert crc64(first) == built_312.crc64
    names = zipfile.ZipFile(built_312.output).namelist()
    assert {"index.py", "echo.py", "crhelper/fc.py", "yaml/__init__.py", "pydantic/__init__.py"} <= set(names)
    assert not [n for n in names if n.endswith("RECORD") or n.startswith("bin/") or "cpython-311" in n]
    archive = zipfile.ZipFile(built_312.output)
    assert archive.read("pydantic-2.99.0.dist-info/WHEEL").decode().count("Tag: cp312-cp312-manylinux_2_17_x86_64") == 1
    assert archive.read("pydantic/__init__.py") == b"BUILT_FOR = 'cp312'\n"
    assert {w.name: w.tags for w in built_312.wheels} == {"pydantic": ("cp312-cp312-manylinux_2_17_x86_64",),
                                                          "PyYAML": ("py3-none-any",)}
    assert built_312.environment == {"CRHELPER_PROVIDER": "echo:provider"} and built_312.handler == "index.handler"


def test_the_target_interpreter_loads_the_shipped_bytecode_from_a_read_only_folder(
        built_312: PackageResult, tmp_path: Path, required_python: Callable[[str], str]) -> None:
    python = required_python("3.12")
    code = tmp_path / "code"
    zipfile.ZipFile(built_312.output).extractall(code)
    names = set(zipfile.ZipFile(built_312.output).namelist())
    assert {"__pycache__/index.cpython-312.pyc", "__pycache__/echo.cpython-312.pyc",
            "crhelper/__pycache__/fc.cpython-312.pyc"} <= names
    for path in sorted(code.rglob("*"), reverse=True):
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    probe = ("import index, os; from crhelper.loading import load_provider; "
             "p = load_provider(os.environ['CRHELPER_PROVIDER']); print(type(p).__name__, callable(index.handler))")
    try:
        done = subprocess.run([python, "-E", "-s", "-v", "-c", probe], cwd=code, capture_output=True, text=True, timeout=60,
                              env={"CRHELPER_PROVIDER": "echo:provider", "PATH": os.environ.get("PATH", "")})
    finally:
        for path in code.rglob("*"):
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "Provider True"
    loaded = [line for line in done.stderr.splitlines() if line.startswith(f"# code object from '{code}")]
    assert f"# code object from '{code}/__pycache__/echo.cpython-312.pyc'" in loaded
    assert len(loaded) >= 5  # crhelper's modules too, not recompiled: the folder is read-only
    assert "can't write" not in done.stderr or f"{code}" not in done.stderr


def test_a_dependency_without_a_wheel_fails_naming_it(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    provider, wheels = inputs
    sdists = tmp_path / "sdists"
    sdists.mkdir()
    build_sdist(sdists, "nowheel", "1.0")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("nowheel==1.0\n")
    options = PackageOptions(spec=f"{provider}:provider", runtime=runtime("python3.12"), output=tmp_path / "x.zip",
                             requirement_files=(requirements,), find_links=(str(wheels), str(sdists)), no_index=True)
    with pytest.raises(PackagingError) as failure:
        build(options)
    assert failure.value.problem.startswith("no wheel of nowheel==1.0 for FC python3.12 (manylinux2014_x86_64, cp312")
    assert not (tmp_path / "x.zip").exists()


def test_json_output_for_python310_names_handler_environment_and_checksums(
        inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    provider, wheels = inputs
    output = tmp_path / "out" / "echo.zip"
    code = main(["package", str(provider), "--runtime", "python3.10", "--output", str(output), "--no-index",
                 "--find-links", str(wheels), "--extra", "fast", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    document = json.loads(captured.out)
    data = output.read_bytes()
    assert document["crc64"] == str(crc64(data)) and document["size"] == len(data)
    assert document["handler"] == "index.handler" and document["environment"] == {"CRHELPER_PROVIDER": "echo:provider"}
    assert document["requirements"][-1] == "msgspec>=0.18"
    assert [w["tags"] for w in document["wheels"] if w["name"] == "pydantic"] == [["cp310-cp310-manylinux_2_17_x86_64"]]
    assert {w["name"] for w in document["wheels"]} == {"pydantic", "PyYAML", "msgspec"}
    assert document["inline"]["fits_ros_template"] is False and document["warnings"] == [] or document["bytecode"] is None
    failed = main(["package", str(provider), "--extra", "nope", "--json"])
    error = json.loads(capsys.readouterr().out)
    assert failed == 2 and error["error"]["problem"].startswith("no extra named 'nope'")


def test_without_the_target_interpreter_it_says_so_and_ships_source_only(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    provider, wheels = inputs
    env = {**os.environ, "PATH": "/usr/bin:/bin", "PYENV_ROOT": str(tmp_path / "no-pyenv"), "HOME": str(tmp_path),
           "CRHELPER_HOME": str(tmp_path / "home"), "PYTHONPATH": f"{REPO}"}
    done = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "package", str(provider), "--runtime", "python3.12",
                           "--output", str(tmp_path / "src.zip"), "--no-index", "--find-links", str(wheels)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "python3.12 is not on this machine (PATH, pyenv): source only" in done.stderr
    assert "bytecode  none: source only" in done.stdout
    assert not [n for n in zipfile.ZipFile(tmp_path / "src.zip").namelist() if n.endswith(".pyc")]
