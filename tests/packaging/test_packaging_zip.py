"""The pure parts of `crhelper package`: deterministic zips, FC's CRC-64, the file plan, wheel
tags for the target, size limits, and the command's help. No subprocess, no index."""

from __future__ import annotations

import argparse
import io
import os
import random
import zipfile
from pathlib import Path

import pytest

from crhelper.cli.main import build_parser
from crhelper.packaging import PackagingError
from crhelper.packaging.checksums import crc64, crc64_update, digests
from crhelper.packaging.limits import base64_size, fits_inline, require_template_fits, size_warnings
from crhelper.packaging.plan import (bytecode_name, dependency_files, locate_provider, merge, requirements_for,
                                     tree_files)
from crhelper.packaging.targets import RUNTIMES, runtime
from crhelper.packaging.wheels import missing_dependency
from crhelper.packaging.zipfile_writer import FIXED_DATE_TIME, write_zip

FILES = {"pkg/__init__.py": b"", "pkg/mod.py": b"VALUE = 1\n", "pkg/data/table.json": b"{}\n", "tool.sh": b"#!/bin/sh\n",
         "pkg/native.so": b"\x7fELF" + bytes(range(256))}


def _tree(root: Path, order: list[str], umask: int, mtime: float) -> Path:
    previous = os.umask(umask)
    try:
        for name in order:
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(FILES[name])
            if name.endswith((".sh", ".so")):
                os.chmod(path, 0o777 & ~umask)
            os.utime(path, (mtime, mtime))
        (root / "pkg" / "__pycache__").mkdir()
        (root / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"host bytecode")
        (root / "pkg" / "stale.pyc").write_bytes(b"old")
        (root / ".git").mkdir()
        (root / ".git" / "HEAD").write_bytes(b"ref")
    finally:
        os.umask(previous)
    return root


def _zip_of(root: Path) -> bytes:
    buffer = io.BytesIO()
    write_zip(merge({"tree": tree_files(root, "")}), buffer)
    return buffer.getvalue()


def test_two_trees_differing_in_mtimes_umask_and_creation_order_zip_to_identical_bytes(tmp_path: Path) -> None:
    names = sorted(FILES)
    first = _zip_of(_tree(tmp_path / "a", names, 0o022, 1_700_000_000))
    second = _zip_of(_tree(tmp_path / "b", list(reversed(names)), 0o077, 1_200_000_000.5))
    assert first == second
    archive = zipfile.ZipFile(io.BytesIO(first))
    infos = archive.infolist()
    assert [i.filename for i in infos] == sorted(FILES)  # sorted, no directories, no __pycache__/.pyc/.git
    assert all(i.date_time == FIXED_DATE_TIME for i in infos)
    modes = {i.filename: i.external_attr >> 16 for i in infos}
    assert modes["tool.sh"] == modes["pkg/native.so"] == 0o100755 and modes["pkg/mod.py"] == 0o100644
    assert all(i.compress_type == zipfile.ZIP_DEFLATED and i.extra == b"" for i in infos)
    assert crc64(first) == crc64(second)


def test_archive_names_must_be_relative_posix_paths() -> None:
    from crhelper.packaging.zipfile_writer import Entry

    for bad in ("/etc/passwd", "a\\b.py", "folder/"):
        with pytest.raises(ValueError, match="relative file path"):
            write_zip({bad: Entry(data=b"")}, io.BytesIO())


def _crc64_bitwise(data: bytes) -> int:
    """The textbook bit-at-a-time CRC-64/XZ, to check the table-driven one against."""
    crc = 0xFFFFFFFFFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xC96C5795D7870F42 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFFFFFFFFFF


def test_crc64_is_ecma182_as_oss_and_fc_compute_it() -> None:
    assert crc64(b"123456789") == 0x995DC9BBDF1939FA  # CRC-64/XZ check value
    assert crc64(b"") == 0
    rng = random.Random(15)
    for size in list(range(0, 20)) + [1000, 4099]:
        data = rng.randbytes(size)
        assert crc64(data) == _crc64_bitwise(data), size
        cut = size // 3
        assert crc64_update(crc64_update(0, data[:cut]), data[cut:]) == crc64(data)
    sha, crc = digests(io.BytesIO(b"123456789"), chunk=4)
    assert crc == 0x995DC9BBDF1939FA and sha.startswith("15e2b0d3c338")


def test_pip_leftovers_that_differ_between_builds_are_left_out(tmp_path: Path) -> None:
    for name in ("yaml/__init__.py", "bin/tool", "PyYAML-6.0.dist-info/RECORD", "PyYAML-6.0.dist-info/direct_url.json",
                 "PyYAML-6.0.dist-info/METADATA", "yaml/__pycache__/x.cpython-311.pyc"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert sorted(dependency_files(tmp_path)) == ["PyYAML-6.0.dist-info/METADATA", "yaml/__init__.py"]


def test_a_module_shadowing_a_dependency_is_refused(tmp_path: Path) -> None:
    (tmp_path / "yaml.py").write_text("")
    with pytest.raises(PackagingError, match="yaml.py comes from both provider and the dependencies"):
        merge({"provider": {"yaml.py": tmp_path / "yaml.py"}, "the dependencies": {"yaml.py": tmp_path / "yaml.py"}})


def test_providers_are_found_without_importing_them(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text("raise SystemExit('imported')\n")
    source = locate_provider(f"{tmp_path / 'mine.py'}:things", [])
    assert source.files == {"mine.py": tmp_path / "mine.py"} and source.provider_env == "mine:things"
    package = tmp_path / "shop"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit('imported')\n")
    (package / "sub" / "orders.py").write_text("")
    found = locate_provider("shop.sub.orders:provider", [str(tmp_path)])
    assert sorted(found.files) == ["shop/__init__.py", "shop/sub/orders.py"]
    assert found.provider_env == "shop.sub.orders:provider"
    with pytest.raises(PackagingError, match="'shop.sub.missing' is not in"):
        locate_provider("shop.sub.missing:provider", [str(tmp_path)])
    with pytest.raises(PackagingError, match="module 'nowhere' of provider"):
        locate_provider("nowhere.mod:provider", [str(tmp_path)])


def test_requirements_are_the_library_s_plus_the_extras_asked_for() -> None:
    requires = ["pydantic>=2.5", "PyYAML>=6.0", 'msgspec>=0.18; extra == "fast"', 'aiohttp>=3.9; extra == "router"',
                'msgspec>=0.18; extra == "all"', 'tomli; python_version < "3.11"']
    assert requirements_for(requires, ()) == ["pydantic>=2.5", "PyYAML>=6.0", 'tomli; python_version < "3.11"']
    assert requirements_for(requires, ("fast", "all"))[-1] == "msgspec>=0.18"  # once
    with pytest.raises(PackagingError, match=r"no extra named 'nope' \(known: all, fast, router\)"):
        requirements_for(requires, ("nope",))


def test_target_tags_are_the_runtime_s_not_this_machine_s() -> None:
    py312 = runtime("python3.12")
    options = py312.pip_options()
    for flag, value in (("--python-version", "3.12"), ("--implementation", "cp"), ("--abi", "cp312")):
        assert options[options.index(flag) + 1] == value
    assert "--only-binary=:all:" in options and "--no-compile" in options
    assert [options[i + 1] for i, o in enumerate(options) if o == "--platform"] == ["manylinux2014_x86_64",
                                                                                   "manylinux_2_17_x86_64"]
    assert py312.accepts("cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64")
    assert py312.accepts("py3-none-any") and py312.accepts("cp38-abi3-manylinux2014_x86_64")
    for wrong in ("cp311-cp311-manylinux_2_17_x86_64", "cp312-cp312-linux_x86_64", "cp312-cp312-manylinux_2_28_x86_64",
                  "cp312-cp312-macosx_11_0_arm64", "cp313-abi3-manylinux2014_x86_64", "garbage"):
        assert not py312.accepts(wrong), wrong
    assert runtime("python3.10").abi == "cp310" and sorted(RUNTIMES) == ["python3.10", "python3.12"]
    with pytest.raises(ValueError, match="not one of python3.10, python3.12"):
        runtime("python3.9")
    assert bytecode_name("pkg/mod.py", "cpython-312") == "pkg/__pycache__/mod.cpython-312.pyc"
    assert bytecode_name("index.py", "cpython-310") == "__pycache__/index.cpython-310.pyc"


def test_pip_s_no_wheel_message_names_the_dependency() -> None:
    output = ("ERROR: Could not find a version that satisfies the requirement nowheel==1.0 (from versions: none)\n"
              "ERROR: No matching distribution found for nowheel==1.0\n")
    assert missing_dependency(output) == "nowheel==1.0"
    assert missing_dependency("ERROR: something else") is None


def test_fc_upload_limit_warns_and_an_oversized_inline_template_is_refused() -> None:
    assert size_warnings(100 * 1024 * 1024) == []
    assert "over FC's 104,857,600-byte upload limit" in size_warnings(100 * 1024 * 1024 + 1)[0]
    assert base64_size(3) == 4 and base64_size(4) == 8
    assert fits_inline(393_216) and not fits_inline(393_217)  # 4/3 of it is the 524,288-byte budget
    require_template_fits(b"x" * 524_288)
    with pytest.raises(PackagingError, match="over ROS's 524,288-byte TemplateBody limit"):
        require_template_fits(b"x" * 524_289)


def test_help_shows_the_options_and_examples() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = commands.choices["package"].format_help()
    for needle in ("--runtime {python3.10,python3.12}", "--find-links", "--no-index", "--extra", "--requirements",
                   "--json", "examples:", "crhelper package samples/greeting.py:provider --runtime python3.12"):
        assert needle in text, needle
    args = parser.parse_args(["package", "samples/greeting.py"])
    assert repr(args.func) == "Body('crhelper.cli.package:run')" and args.runtime == "python3.10"


def test_development_only_library_modules_ship_only_when_shipped_code_imports_them(tmp_path: Path) -> None:
    from crhelper.packaging.imports import needed_library

    sources = {"crhelper/__init__.py": "", "crhelper/fc.py": "from .loading import x\n", "crhelper/loading.py": "",
               "crhelper/py.typed": "", "crhelper/local/__init__.py": "", "crhelper/local/processes.py": "import os\n",
               "crhelper/local/supervisor.py": "def f():\n    from . import processes\n",
               "crhelper/cli/__init__.py": "", "crhelper/cli/main.py": "", "crhelper/testing.py": "",
               "crhelper/emulator/__init__.py": "", "mine.py": "def later():\n    import crhelper.local.supervisor\n"}
    for name, text in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    library = {n: tmp_path / n for n in sources if n.startswith("crhelper/")}
    alone = needed_library(library, [])
    assert sorted(alone) == ["crhelper/__init__.py", "crhelper/fc.py", "crhelper/loading.py", "crhelper/py.typed"]
    with_local = needed_library(library, [("mine.py", tmp_path / "mine.py")])
    assert sorted(set(with_local) - set(alone)) == ["crhelper/local/__init__.py", "crhelper/local/processes.py",
                                                     "crhelper/local/supervisor.py"]


@pytest.mark.slow  # reads and parses the whole library
def test_a_provider_using_the_supervisor_ships_the_daemon_it_starts_by_module_name() -> None:
    """The supervisor starts `python -m crhelper.local.supervisor_daemon`: no import statement names
    it, yet a boot-group package without it cannot start one instance on FC (seen through the
    deployment template)."""
    from crhelper.local.supervisor import DAEMON_MODULE
    from crhelper.packaging.build import library_files
    from crhelper.packaging.imports import LAUNCHED_MODULES, needed_library

    assert DAEMON_MODULE in LAUNCHED_MODULES["crhelper.local.supervisor"]
    provider = Path(__file__).resolve().parents[2] / "handlers" / "bootgroups" / "provider.py"
    shipped = needed_library(library_files(), [("handlers/bootgroups/provider.py", provider)])
    assert {"crhelper/local/supervisor.py", "crhelper/local/supervisor_daemon.py"} <= set(shipped)


@pytest.mark.slow  # reads and parses the whole library
def test_a_provider_importing_only_crhelper_ships_none_of_its_development_only_parts() -> None:
    """On the real library: what runs on FC must not import the CLI, the emulator, the local endpoints,
    packaging or deploy (each would ride along in every package: 4.9 MB grew to 6.1 MB once)."""
    from crhelper.packaging.build import library_files
    from crhelper.packaging.imports import DEVELOPMENT_ONLY, module_name, needed_library

    provider = Path(__file__).resolve().parents[1] / "deploy" / "deploy_hello.py"
    shipped = needed_library(library_files(), [("deploy_hello.py", provider)])
    leaked = sorted(n for n in shipped if n.endswith(".py") and any(
        module_name(n) == part or module_name(n).startswith(part + ".") for part in DEVELOPMENT_ONLY))
    assert leaked == []
    assert {"crhelper/fc.py", "crhelper/loading.py", "crhelper/provider.py"} <= set(shipped)
