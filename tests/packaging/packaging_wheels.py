"""Tiny wheels built on disk, so packaging tests install with `--no-index --find-links` and never
reach an index: a wheel is a zip with `<name>-<version>.dist-info/{METADATA,WHEEL,RECORD}`."""

from __future__ import annotations

import base64
import hashlib
import tarfile
import io
import zipfile
from pathlib import Path


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(folder: Path, name: str, version: str, tag: str, files: dict[str, str],
                requires: tuple[str, ...] = ()) -> Path:
    """Write `<name>-<version>-<tag>.whl` holding `files` (path -> text) into `folder`."""
    distribution = name.replace("-", "_")
    info = f"{distribution}-{version}.dist-info"
    contents = {path: text.encode() for path, text in files.items()}
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    contents[f"{info}/METADATA"] = metadata.encode()
    pure = "true" if tag.endswith("-none-any") else "false"
    contents[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: packaging-tests\nRoot-Is-Purelib: {pure}\n"
                                 f"Tag: {tag}\n").encode()
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in contents.items())
    contents[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = folder / f"{distribution}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, data in contents.items():
            wheel.writestr(member, data)
    return path


def build_sdist(folder: Path, name: str, version: str) -> Path:
    """An sdist only (no wheel): what `--only-binary=:all:` must refuse."""
    path = folder / f"{name}-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        data = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        member = tarfile.TarInfo(f"{name}-{version}/PKG-INFO")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    return path


def wheelhouse(folder: Path, versions: tuple[str, ...] = ("3.12",)) -> Path:
    """Stand-ins for this library's dependencies: `pydantic` as a native wheel for each CPython
    version (and a cp311 one that must never be chosen), `PyYAML` and `msgspec` pure."""
    folder.mkdir(parents=True, exist_ok=True)
    for version in (*versions, "3.11"):
        nodot = version.replace(".", "")
        build_wheel(folder, "pydantic", "2.99.0", f"cp{nodot}-cp{nodot}-manylinux_2_17_x86_64",
                    {"pydantic/__init__.py": f"BUILT_FOR = 'cp{nodot}'\n"})
    build_wheel(folder, "PyYAML", "6.99.0", "py3-none-any", {"yaml/__init__.py": "VERSION = '6.99.0'\n"})
    build_wheel(folder, "msgspec", "0.99.0", "py3-none-any", {"msgspec/__init__.py": "class Struct: pass\n"})
    return folder
