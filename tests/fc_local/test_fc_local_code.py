"""Deployed code: safe extraction of a function's zip into its own read-only directory (no sockets)."""
from __future__ import annotations

import io
import stat
import warnings
import zipfile
from pathlib import Path

import pytest

from crhelper.local.fc_code import CodeLimits, CodeStore, UnsafeArchive, code_checksum, decode_zip_field, unpack
from crhelper.local.fc_protocol import FcApiError


def zip_of(*entries: tuple[str, bytes], mode: int | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name)
            if mode is not None:
                info.external_attr = mode << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def test_a_zip_unpacks_into_a_read_only_tree(tmp_path: Path) -> None:
    data = zip_of(("index.py", b"X = 1\n"), ("pkg/__init__.py", b""), ("pkg/mod.py", b"Y = 2\n"))
    size = unpack(data, tmp_path / "code")
    assert size == len(b"X = 1\n") + len(b"Y = 2\n")
    assert (tmp_path / "code" / "pkg" / "mod.py").read_bytes() == b"Y = 2\n"
    assert stat.S_IMODE((tmp_path / "code" / "index.py").stat().st_mode) == 0o444
    assert stat.S_IMODE((tmp_path / "code" / "pkg").stat().st_mode) == 0o555


@pytest.mark.parametrize("entries, mode, rule", [
    ((("../evil.py", b"x"),), None, "climbs out of the code directory"),
    ((("a/../../evil.py", b"x"),), None, "climbs out of the code directory"),
    ((("/etc/evil", b"x"),), None, "absolute path"),
    ((("link", b"/etc/passwd"),), stat.S_IFLNK | 0o777, "symbolic link"),
    ((("fifo", b""),), stat.S_IFIFO | 0o644, "not a regular file"),
    ((("a.py", b"1"), ("a.py", b"2")), None, "appears twice"),
], ids=["dotdot", "nested-dotdot", "absolute", "symlink", "fifo", "duplicate"])
def test_unsafe_entries_are_refused_and_nothing_is_left(tmp_path: Path, entries: tuple[tuple[str, bytes], ...],
                                                         mode: int | None, rule: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name it writes
        data = zip_of(*entries, mode=mode)
    with pytest.raises(UnsafeArchive, match=rule):
        unpack(data, tmp_path / "code")
    assert not (tmp_path / "code").exists()
    assert not (tmp_path / "evil.py").exists()


def test_size_and_count_caps_count_what_is_really_unpacked(tmp_path: Path) -> None:
    bomb = zip_of(("big.bin", b"\0" * 200_000))  # compresses to a few hundred bytes
    with pytest.raises(UnsafeArchive, match="unpacks to more than 100000 bytes"):
        unpack(bomb, tmp_path / "a", CodeLimits(max_unpacked=100_000))
    many = zip_of(*[(f"f{i}.py", b"") for i in range(11)])
    with pytest.raises(UnsafeArchive, match="11 entries; at most 10"):
        unpack(many, tmp_path / "b", CodeLimits(max_files=10))
    with pytest.raises(UnsafeArchive, match="not a zip archive"):
        unpack(b"not a zip", tmp_path / "c")
    with pytest.raises(UnsafeArchive, match="at most 10"):
        unpack(bomb, tmp_path / "d", CodeLimits(max_zip=10))


def test_zip_field_errors_name_the_field() -> None:
    with pytest.raises(FcApiError) as not_base64:
        decode_zip_field("@@@", "code.zipFile")
    assert (not_base64.value.status, not_base64.value.code) == (400, "InvalidArgument")
    assert "code.zipFile is not valid base64" in not_base64.value.message
    with pytest.raises(FcApiError) as empty:
        decode_zip_field("", "zipFile")
    assert "zipFile must be a non-empty base64 string" in empty.value.message


def test_the_code_checksum_is_the_crc64_oss_reports_in_decimal() -> None:
    assert code_checksum(b"123456789") == str(0x995DC9BBDF1939FA)  # the CRC-64/XZ check value
    assert code_checksum(b"") == "0"


def test_a_new_version_replaces_the_old_directory(tmp_path: Path) -> None:
    store = CodeStore(tmp_path)
    first = store.install("svc", "fn", zip_of(("index.py", b"V = 1\n")), "code.zipFile")
    second = store.install("svc", "fn", zip_of(("index.py", b"V = 2\n")), "code.zipFile")
    assert first.code_dir != second.code_dir and not Path(first.code_dir).exists()
    assert (Path(second.code_dir) / "index.py").read_bytes() == b"V = 2\n"
    assert second.checksum == code_checksum(zip_of(("index.py", b"V = 2\n"))) != first.checksum
    with pytest.raises(FcApiError) as refused:
        store.install("", "fn3", zip_of(("../x", b"")), "code.zipFile")
    assert refused.value.code == "InvalidArgument" and refused.value.message.startswith("code.zipFile: entry '../x'")
    store.close()
    assert not Path(second.code_dir).exists()
