"""The code cache of the local FC endpoint (`crhelper.local.fc_code.code_cache`): a big package is
unpacked and summed once per $CRHELPER_HOME, and each function's code folder is hard links to it,
so every `crhelper stack` run (its own endpoint) deploys it in a fraction of a second. No sockets."""
from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

import pytest

from crhelper.local.fc_code import (CACHED_PACKAGES, CACHED_ZIP_BYTES, CodeStore, code_cache, code_checksum)
from crhelper.local.fc_protocol import FcApiError


def big_zip(seed: bytes, *extra: tuple[str, bytes]) -> bytes:
    """A zip over CACHED_ZIP_BYTES (stored, incompressible), different for each seed."""
    filler = b"".join(hashlib.sha256(seed + i.to_bytes(4, "big")).digest() for i in range(CACHED_ZIP_BYTES // 32 + 64))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("index.py", b"def handler(event, context):\n    return 'ok'\n")
        archive.writestr("pkg/blob.bin", filler)
        for name, data in extra:
            archive.writestr(name, data)
    data = buffer.getvalue()
    assert len(data) >= CACHED_ZIP_BYTES
    return data


@pytest.mark.slow
def test_a_second_endpoint_links_the_cached_tree_instead_of_unpacking_and_each_copy_stands_alone(tmp_path: Path) -> None:
    data = big_zip(b"one")
    first, second = CodeStore(tmp_path / "run1"), CodeStore(tmp_path / "run2")
    a = first.install("", "bootgroups", data, "code.zipFile")
    b = second.install("", "appcenter", data, "code.zipFile")
    sha256 = hashlib.sha256(data).hexdigest()
    tree = code_cache() / sha256
    assert a.checksum == b.checksum == code_checksum(data)
    assert (code_cache() / f"{sha256}.crc64").read_text() == code_checksum(data)
    for deployed in (a, b):  # the same inodes as the cache's tree: linked, not unpacked again
        assert os.stat(Path(deployed.code_dir) / "pkg" / "blob.bin").st_ino == (tree / "pkg" / "blob.bin").stat().st_ino
        assert (Path(deployed.code_dir) / "index.py").stat().st_mode & 0o777 == 0o444
    first.close()  # one run's endpoint ends: the other's code and the cache stay whole
    assert not Path(a.code_dir).exists()
    assert (Path(b.code_dir) / "pkg" / "blob.bin").read_bytes() == (tree / "pkg" / "blob.bin").read_bytes()
    second.close()
    assert (tree / "index.py").is_file()


@pytest.mark.slow
def test_a_malformed_cached_checksum_is_summed_again() -> None:
    data = big_zip(b"two")
    entry = code_cache() / f"{hashlib.sha256(data).hexdigest()}.crc64"
    entry.parent.mkdir(parents=True)
    entry.write_text("not a number")
    store = CodeStore(code_cache().parent / "run")
    assert store.install("", "f", data, "code.zipFile").checksum == code_checksum(data)
    assert entry.read_text() == code_checksum(data)
    store.close()


@pytest.mark.slow
def test_only_the_most_recently_used_packages_are_kept(tmp_path: Path) -> None:
    store = CodeStore(tmp_path / "run")
    zips = [big_zip(bytes([n])) for n in range(CACHED_PACKAGES + 1)]
    for n, data in enumerate(zips):
        store.install("", f"f{n}", data, "code.zipFile")
    kept = sorted(p.name for p in code_cache().iterdir() if p.is_dir())
    assert kept == sorted(hashlib.sha256(data).hexdigest() for data in zips[-CACHED_PACKAGES:])
    assert not (code_cache() / f"{hashlib.sha256(zips[0]).hexdigest()}.crc64").exists()
    for n in range(CACHED_PACKAGES + 1):  # the functions' own copies are untouched by the eviction
        assert list((tmp_path / "run").glob(f"f{n}/*/index.py"))
    store.close()


@pytest.mark.slow
def test_an_unsafe_big_zip_is_refused_naming_the_field_and_nothing_is_cached(tmp_path: Path) -> None:
    data = big_zip(b"three", ("../evil.py", b"x"))
    with pytest.raises(FcApiError, match="code.ossObjectName: entry '../evil.py' climbs out"):
        CodeStore(tmp_path / "run").install("", "f", data, "code.ossObjectName")
    assert [p.name for p in code_cache().iterdir()] == []


def test_a_small_zip_leaves_no_cache(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("index.py", b"X = 1\n")
    store = CodeStore(tmp_path / "run")
    store.install("", "f", buffer.getvalue(), "code.zipFile")
    assert not code_cache().exists()
    store.close()
