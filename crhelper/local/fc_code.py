"""Deployed code of the local Function Compute: a function's zip, unpacked safely into its own
read-only directory under the endpoint's state directory.

Extraction refuses what FC's would never produce and what could escape or exhaust the machine:
absolute names, `..` parts, symbolic links and other non-regular entries, more than
`CodeLimits.max_files` entries, more than `max_unpacked` bytes unpacked (counted while reading,
never trusting the sizes the archive declares), and a zip over `max_zip` bytes (FC's 100 MB for
an uploaded `zipFile`, 500 MB from OSS). Each version of a function's code gets a fresh
directory; files are made read-only (0444, directories 0555), as FC mounts code read-only.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import shutil
import stat
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from crhelper import paths
from crhelper.local.fc_protocol import FcApiError
from crhelper.packaging.checksums import crc64

#: FC's limit for a base64 zip sent through the API, and for one read from OSS.
MAX_API_ZIP_BYTES = 100 * 1024 * 1024
MAX_OSS_ZIP_BYTES = 500 * 1024 * 1024
_CHUNK = 1024 * 1024


def code_checksum(data: bytes) -> str:
    """FC 3.0's `codeChecksum` of a zip: its CRC-64 (the one home: `crhelper.packaging.checksums`) in decimal."""
    return str(crc64(data))


#: Zips at least this large are remembered by their SHA-256 (`code_cache`): their CRC-64 and their
#: unpacked tree. Smaller ones take milliseconds and are summed and unpacked each time.
CACHED_ZIP_BYTES = 1024 * 1024
#: How many unpacked packages `code_cache` keeps (the least recently used go first).
CACHED_PACKAGES = 2
#: A half-unpacked or half-removed tree older than this was left by a run that was killed.
STALE_CACHE_SECONDS = 3600.0
_CHECKSUMS: dict[str, str] = {}
_CHECKSUMS_LOCK = threading.Lock()


def code_cache() -> Path:
    """`$CRHELPER_HOME/fc-local/code-cache`: big code packages by SHA-256, `<sha256>/` unpacked
    (read-only) and `<sha256>.crc64`. Every `crhelper stack` run starts its own endpoint and deploys
    the same package, often as several functions; unpacking 35 MB and its pure-Python CRC-64 cost
    seconds each time, a SHA-256 (in C) and hard links a fraction of one."""
    return paths.state_dir("fc-local") / "code-cache"


def remembered_checksum(data: bytes, sha256: str) -> str:
    """`code_checksum(data)`, remembered by the zip's SHA-256 in this process and in `code_cache()`.
    An unreadable or malformed entry is summed again."""
    if len(data) < CACHED_ZIP_BYTES:
        return code_checksum(data)
    with _CHECKSUMS_LOCK:
        known = _CHECKSUMS.get(sha256)
    if known is not None:
        return known
    entry = code_cache() / f"{sha256}.crc64"
    try:
        known = entry.read_text().strip()
    except OSError:
        known = None
    if not known or not known.isdigit():
        known = code_checksum(data)
        try:
            paths.write_atomically(entry, known.encode(), 0o644)
        except OSError:  # a read-only home: remembered in this process only
            pass
    with _CHECKSUMS_LOCK:
        _CHECKSUMS[sha256] = known
    return known


@dataclass(frozen=True)
class CodeLimits:
    """`max_zip` for a zip sent in the call, `max_oss_zip` for one read from OSS (FC's 100 and 500 MB)."""

    max_zip: int = MAX_API_ZIP_BYTES
    max_oss_zip: int = MAX_OSS_ZIP_BYTES
    max_unpacked: int = 512 * 1024 * 1024
    max_files: int = 20_000


class UnsafeArchive(ValueError):
    """The zip cannot be unpacked safely or is not a zip; the message names the entry and the rule."""


def decode_zip_field(text: Any, field: str, limits: CodeLimits = CodeLimits()) -> bytes:
    """The bytes of a base64 `zipFile` field, or 400 InvalidArgument naming `field` and the rule."""
    if not isinstance(text, str) or not text:
        raise FcApiError(400, "InvalidArgument", f"{field} must be a non-empty base64 string")
    if len(text) > (limits.max_zip * 4) // 3 + 4:
        raise FcApiError(400, "CodeSizeLimitExceeded",
                         f"{field}: the zip exceeds the limit of {limits.max_zip} bytes")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise FcApiError(400, "InvalidArgument", f"{field} is not valid base64") from None


def _safe_name(info: zipfile.ZipInfo) -> PurePosixPath | None:
    """The entry's relative path, None for a directory entry; UnsafeArchive for anything else unsafe."""
    name = info.filename.replace("\\", "/")
    shown = name[:200]
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise UnsafeArchive(f"entry {shown!r} is a symbolic link; links are not unpacked")
    if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise UnsafeArchive(f"entry {shown!r} is not a regular file or directory")
    if "\x00" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchive(f"entry {shown!r} has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafeArchive(f"entry {shown!r} climbs out of the code directory with '..'")
    if not parts or name.endswith("/"):
        return None
    return PurePosixPath(*parts)


def unpack(data: bytes, dest: Path, limits: CodeLimits = CodeLimits()) -> int:
    """Unpack the zip `data` into the new directory `dest` and make it read-only; returns the
    unpacked size. On any refusal `dest` is removed and UnsafeArchive raised."""
    if len(data) > limits.max_zip:
        raise UnsafeArchive(f"the zip is {len(data)} bytes; at most {limits.max_zip}")
    dest.mkdir(parents=True)
    try:
        total = _extract(data, dest, limits)
    except BaseException:
        remove_tree(dest)
        raise
    _make_read_only(dest)
    return total


def _extract(data: bytes, dest: Path, limits: CodeLimits) -> int:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError) as exc:
        raise UnsafeArchive(f"not a zip archive: {exc}") from None
    total = 0
    with archive:
        entries = archive.infolist()
        if len(entries) > limits.max_files:
            raise UnsafeArchive(f"the zip has {len(entries)} entries; at most {limits.max_files}")
        for info in entries:
            relative = _safe_name(info)
            if relative is None:
                continue
            target = dest.joinpath(*relative.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                raise UnsafeArchive(f"entry {info.filename[:200]!r} appears twice")
            try:
                with archive.open(info) as source, open(target, "xb") as out:
                    while chunk := source.read(_CHUNK):
                        total += len(chunk)
                        if total > limits.max_unpacked:
                            raise UnsafeArchive(f"the zip unpacks to more than {limits.max_unpacked} bytes")
                        out.write(chunk)
            except (zipfile.BadZipFile, NotImplementedError, RuntimeError, EOFError) as exc:
                raise UnsafeArchive(f"entry {info.filename[:200]!r} cannot be read: {exc}") from None
    return total


def _make_read_only(root: Path) -> None:
    for directory, dirs, files in os.walk(root):
        for name in files:
            os.chmod(os.path.join(directory, name), 0o444)
        os.chmod(directory, 0o555)


def remove_tree(path: Path) -> None:
    """Delete a (read-only) code directory."""
    if not path.exists():
        return
    for directory, _, _ in os.walk(path):
        os.chmod(directory, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def _link_cached(data: bytes, sha256: str, dest: Path, limits: CodeLimits) -> bool:
    """Make `dest` the zip's tree from `code_cache()` (unpacked there first when missing) by hard
    links: read-only files, so removing either tree leaves the other whole. False when the zip is
    small, the limits are not the default ones the cache was unpacked under, or linking fails
    (another file system, a cache removed meanwhile): the caller unpacks. UnsafeArchive as `unpack`."""
    if len(data) < CACHED_ZIP_BYTES or (limits.max_unpacked, limits.max_files) != (
            CodeLimits.max_unpacked, CodeLimits.max_files):
        return False
    if len(data) > limits.max_zip:
        raise UnsafeArchive(f"the zip is {len(data)} bytes; at most {limits.max_zip}")
    cache = code_cache()
    tree = cache / sha256
    try:
        if not tree.is_dir():
            partial = cache / f".{sha256}.{os.getpid()}-{os.urandom(4).hex()}.partial"
            unpack(data, partial, limits)
            try:
                os.rename(partial, tree)
            except OSError:  # another run unpacked it meanwhile
                remove_tree(partial)
            _evict(cache, keep=tree)
        os.utime(tree, follow_symlinks=False)  # most recently used
        shutil.copytree(tree, dest, copy_function=os.link)
        return True
    except (OSError, shutil.Error):
        remove_tree(dest)
        return False


def _evict(cache: Path, keep: Path) -> None:
    """Remove all but the CACHED_PACKAGES most recently used trees (and their CRC-64s); what
    another run removes meanwhile is skipped."""
    def used(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    trees = sorted((p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".") and p != keep),
                   key=used, reverse=True)
    for old in trees[max(CACHED_PACKAGES - 1, 0):]:
        gone = cache / f".{old.name}.{os.getpid()}-{os.urandom(4).hex()}.evicted"
        try:  # renamed first: a run linking from it meanwhile fails and unpacks, never links half a tree
            os.rename(old, gone)
            (cache / f"{old.name}.crc64").unlink(missing_ok=True)
        except OSError:
            continue
        remove_tree(gone)
    for left in cache.glob(".*"):  # what a run killed while unpacking or evicting left behind
        if left.is_dir() and time.time() - used(left) > STALE_CACHE_SECONDS:
            remove_tree(left)


@dataclass(frozen=True)
class DeployedCode:
    """One unpacked version: where it is and what FC reports about it."""

    code_dir: str
    checksum: str
    size: int


class CodeStore:
    """Versions of each function's code under `root`, one directory per upload; the previous
    version of a function is removed once a new one is in place (an invocation running from it
    keeps its open files)."""

    def __init__(self, root: Path, limits: CodeLimits = CodeLimits()) -> None:
        self._root = root
        self._limits = limits
        self._lock = threading.Lock()
        self._current: dict[tuple[str, str], Path] = {}

    def install(self, service: str, function: str, data: bytes, field: str,
                limits: CodeLimits | None = None) -> DeployedCode:
        """Unpack `data` as the function's new code; 400 naming `field` when the zip is refused."""
        limits = limits or self._limits
        sha256 = hashlib.sha256(data).hexdigest()
        digest = sha256[:16]
        folder = self._root / (f"{service}${function}" if service else function)
        dest = folder / f"{digest}-{os.urandom(4).hex()}"
        try:
            if not _link_cached(data, sha256, dest, limits):
                unpack(data, dest, limits)
        except UnsafeArchive as exc:
            raise FcApiError(400, "InvalidArgument", f"{field}: {exc}") from None
        with self._lock:
            previous = self._current.get((service, function))
            self._current[(service, function)] = dest
        if previous is not None:
            remove_tree(previous)
        return DeployedCode(str(dest), remembered_checksum(data, sha256), len(data))

    def remove(self, service: str, function: str) -> None:
        with self._lock:
            previous = self._current.pop((service, function), None)
        if previous is not None:
            remove_tree(previous)

    def close(self) -> None:
        with self._lock:
            dirs = list(self._current.values())
            self._current.clear()
        for path in dirs:
            remove_tree(path)


#: Reads (bucket, object) from OSS, at most `limit` bytes; raises FcApiError when it cannot.
OssReader = Callable[[str, str, int], bytes]


def oss_reader(url: str) -> OssReader:
    """Read code objects through the project's S3/OSS client, configured by a store URL
    (`s3://<any bucket>?endpoint=...&addressing=path`) whose bucket the API call replaces."""
    from dataclasses import replace

    from crhelper.store.s3_client import make_client
    from crhelper.store.url import SETTING, S3Settings, StoreConfigError, parse_store_url

    try:
        settings = parse_store_url(url)
    except StoreConfigError as exc:
        raise ValueError(str(exc).replace(SETTING, "oss_url", 1)) from None
    if not isinstance(settings, S3Settings):
        raise ValueError("oss_url: must be an s3:// URL (s3://<any bucket>?endpoint=...)")
    clients: dict[str, Any] = {}
    lock = threading.Lock()

    def read(bucket: str, key: str, limit: int) -> bytes:
        with lock:
            if bucket not in clients:
                clients[bucket] = make_client(replace(settings, bucket=bucket))
            client = clients[bucket]
        try:
            head = client.head_object(Bucket=bucket, Key=key)
            if int(head.get("ContentLength") or 0) > limit:
                raise FcApiError(400, "CodeSizeLimitExceeded",
                                 f"code.ossObjectName: the object is over the limit of {limit} bytes")
            return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read(limit + 1))[: limit + 1]
        except FcApiError:
            raise
        except Exception as exc:  # botocore's ClientError and connection errors
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)
            raise FcApiError(400, "InvalidArgument",
                             f"code.ossBucketName/ossObjectName: cannot read oss://{bucket}/{key}: {code}") from None

    return read
