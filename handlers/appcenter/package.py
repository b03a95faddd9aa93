"""Load an AppCenter package: a folder, a ``.zip``, a ``.tar.gz`` (or ``.tar``), or an ``oss://`` /
``s3://`` object or prefix (spec §1).

Archives are read in memory, never extracted: a member whose name is absolute, climbs out with
``..`` or is a link is refused before anything is read, and sizes are capped (per file, in total,
members counted) so a bomb stops early. The package may sit in one top-level folder of the archive.
Every file must be UTF-8 without a BOM; the JSON files must parse: those problems are collected
for all files at once (`InvalidPackage`), while a package that cannot be read at all raises
`PackageUnreadable`.

OSS and S3 are reached through boto3 the way crhelper's OSS store does (`crhelper.store.s3_client`,
imported only for such a source): ``oss://bucket/key`` signs for OSS and takes its endpoint from
the region (``ALIBABA_CLOUD_REGION_ID``, ``FC_REGION``); ``?endpoint=&region=&addressing=&signature=``
override, as in ``CRHELPER_STORE``.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Generic, Iterable, Mapping, TypeVar
from urllib.parse import parse_qs, urlsplit

from .problems import InvalidPackage, PackageUnreadable, Problem

CONFIG = "config.json"
TEMPLATE = "cluster.json.mustache"
REPLACE_POLICY = "replace_policy.json"
LOCALE_DIR = "locale"
REQUIRED = (CONFIG, TEMPLATE)

#: Caps on what one package may hold: a file, all the files read, members of an archive.
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_TOTAL_BYTES = 64 * 1024 * 1024
MAX_MEMBERS = 10_000

BOM = b"\xef\xbb\xbf"
_OTHER_BOMS = (b"\xff\xfe", b"\xfe\xff")
_S3_PARAMS = frozenset({"endpoint", "region", "addressing", "signature"})


@dataclass(frozen=True)
class Package:
    """The parsed files of one package; `config` is config.json as parsed (checked by `config`)."""

    source: str
    config: Any
    template: str
    replace_policy: Mapping[str, Any] = field(default_factory=dict)
    #: language (the file name without .json, lower case: ``zh-cn``) -> source string -> translation
    locales: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: SHA-256 of config.json's bytes: `config.parse_config` caches the parsed form by it.
    config_digest: str = ""


def _wanted(name: str) -> bool:
    """The package files the provider reads (scripts and the rest of an archive are skipped)."""
    if name in (CONFIG, TEMPLATE, REPLACE_POLICY):
        return True
    folder, _, base = name.rpartition("/")
    return folder == LOCALE_DIR and base.endswith(".json") and len(base) > len(".json")


def _safe_name(raw: str) -> str:
    """An archive member's path, normalised; refuses absolute names, ``..`` and drive letters."""
    name = raw.replace("\\", "/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":") or "\x00" in name:
        raise PackageUnreadable(f"unsafe archive member {raw!r}: an absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise PackageUnreadable(f"unsafe archive member {raw!r}: it climbs out of the package with '..'")
    return "/".join(parts)


class _Budget:
    """Counts the bytes read from one package against `MAX_TOTAL_BYTES`."""

    def __init__(self) -> None:
        self.used = 0

    def read(self, stream: IO[bytes], name: str, declared: int | None = None) -> bytes:
        if declared is not None and declared > MAX_FILE_BYTES:
            raise PackageUnreadable(f"{name}: {declared} bytes, more than the {MAX_FILE_BYTES} allowed per file")
        data = stream.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise PackageUnreadable(f"{name}: more than the {MAX_FILE_BYTES} bytes allowed per file")
        self.used += len(data)
        if self.used > MAX_TOTAL_BYTES:
            raise PackageUnreadable(f"the package holds more than {MAX_TOTAL_BYTES} bytes")
        return data


class _CappedReader(io.RawIOBase):
    """A decompressed stream that fails past `limit` bytes (a gzip bomb stops there)."""

    def __init__(self, inner: Any, limit: int) -> None:
        self.inner, self.left = inner, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.inner.read(min(len(buffer), self.left + 1))
        self.left -= len(data)
        if self.left < 0:
            raise PackageUnreadable(f"the archive expands to more than {MAX_TOTAL_BYTES} bytes")
        buffer[: len(data)] = data
        return len(data)


def _zip_files(data: bytes, source: str) -> dict[str, bytes]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise PackageUnreadable(f"{source}: not a readable zip archive ({exc})") from None
    if len(members) > MAX_MEMBERS:
        raise PackageUnreadable(f"{source}: more than {MAX_MEMBERS} archive members")
    budget, files = _Budget(), {}
    named = [(_safe_name(info.filename), info) for info in members]
    for name, info in named:
        if info.is_dir() or not name:
            continue
        if (info.external_attr >> 16) & 0o170000 == 0o120000:
            raise PackageUnreadable(f"unsafe archive member {info.filename!r}: a symbolic link")
        files[name] = info
    picked: dict[str, bytes] = {}
    root = _root_of(files)
    for name, info in files.items():
        inner = name[len(root):] if name.startswith(root) else None
        if inner is None or not _wanted(inner):
            continue
        try:
            with archive.open(info) as stream:
                picked[inner] = budget.read(stream, name, info.file_size)
        except (zipfile.BadZipFile, OSError, NotImplementedError, RuntimeError) as exc:
            raise PackageUnreadable(f"{source}: member {name}: {exc}") from None
    return picked


def _tar_files(data: bytes, source: str, compressed: bool) -> dict[str, bytes]:
    raw: IO[bytes] = io.BytesIO(data)
    if compressed:
        raw = io.BufferedReader(_CappedReader(gzip.GzipFile(fileobj=raw), MAX_TOTAL_BYTES))
    budget, found, count = _Budget(), {}, 0
    try:
        with tarfile.open(fileobj=raw, mode="r|") as archive:
            for member in archive:
                count += 1
                if count > MAX_MEMBERS:
                    raise PackageUnreadable(f"{source}: more than {MAX_MEMBERS} archive members")
                name = _safe_name(member.name)
                if member.issym() or member.islnk():
                    raise PackageUnreadable(f"unsafe archive member {member.name!r}: a link")
                if not member.isfile() or not name:
                    continue
                base = name.split("/", 1)[-1]
                if _wanted(name) or _wanted(base):  # the root folder is known only at the end
                    stream = archive.extractfile(member)
                    if stream is not None:
                        found[name] = budget.read(stream, name, member.size)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise PackageUnreadable(f"{source}: not a readable tar archive ({exc})") from None
    root = _root_of(found)
    return {name[len(root):]: body for name, body in found.items() if name.startswith(root) and _wanted(name[len(root):])}


def _root_of(names: Iterable[str]) -> str:
    """"" when config.json is at the top, else "<folder>/" when exactly one top-level folder holds
    it (an archive of the package's folder; macOS's ``__MACOSX/`` shadow folder is ignored)."""
    listed = set(names)
    if CONFIG in listed:
        return ""
    tops = {name[: -len(CONFIG)] for name in listed
            if name.endswith("/" + CONFIG) and name.count("/") == 1 and not name.startswith("__MACOSX/")}
    return tops.pop() if len(tops) == 1 else ""


def _folder_files(root: Path) -> dict[str, bytes]:
    budget, files = _Budget(), {}
    locale = root / LOCALE_DIR
    names = [CONFIG, TEMPLATE, REPLACE_POLICY]
    try:
        names += sorted(f"{LOCALE_DIR}/{entry}" for entry in os.listdir(locale) if entry.endswith(".json"))
    except (FileNotFoundError, NotADirectoryError):
        pass
    linked = locale.is_symlink()
    for name in names:
        path = root / name
        if linked or path.is_symlink():  # a link may not lead out of the package folder
            real = path.resolve()
            if root.resolve() not in real.parents:
                raise PackageUnreadable(f"{path}: a link out of the package folder")
        try:
            with open(path, "rb") as stream:
                files[name] = budget.read(stream, name, os.fstat(stream.fileno()).st_size)
        except (FileNotFoundError, IsADirectoryError):
            continue
        except OSError as exc:
            raise PackageUnreadable(f"{path}: {exc.strerror or exc}") from None
    return files


def _archive_files(data: bytes, source: str) -> dict[str, bytes]:
    """Pick the reader by the content's magic bytes, not by the name."""
    if data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
        return _zip_files(data, source)
    if data[:2] == b"\x1f\x8b":
        return _tar_files(data, source, compressed=True)
    if len(data) > 262 and data[257:262] == b"ustar":
        return _tar_files(data, source, compressed=False)
    raise PackageUnreadable(f"{source}: neither a folder nor a .zip, .tar.gz or .tar archive")


# --- OSS / S3 -------------------------------------------------------------------------------------

def _object_settings(url: str) -> tuple[Any, str]:
    """(S3Settings for the bucket, the object key or prefix) of an oss:// or s3:// source."""
    from crhelper.store.url import ADDRESSING_STYLES, SIGNATURES, S3Settings

    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if not parts.netloc or "@" in parts.netloc or ":" in parts.netloc:
        raise PackageUnreadable(f"a package URL is {scheme}://<bucket>/<key>[?endpoint=...&region=...]")
    try:
        params = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise PackageUnreadable("the package URL's query is not name=value pairs") from None
    unknown = sorted(set(params) - _S3_PARAMS)
    if unknown or any(len(values) > 1 for values in params.values()):
        raise PackageUnreadable(f"the package URL takes each of {', '.join(sorted(_S3_PARAMS))} at most once"
                                + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    one = {name: values[0] for name, values in params.items() if values[0]}
    endpoint = one.get("endpoint")
    if endpoint is not None and (urlsplit(endpoint).scheme not in ("http", "https") or not urlsplit(endpoint).netloc):
        raise PackageUnreadable("the package URL's endpoint must be an http:// or https:// URL")
    addressing = one.get("addressing", ADDRESSING_STYLES[0])
    signature = one.get("signature", SIGNATURES[0])
    if addressing not in ADDRESSING_STYLES or signature not in SIGNATURES:
        raise PackageUnreadable(f"the package URL's addressing is one of {', '.join(ADDRESSING_STYLES)} "
                                f"and its signature one of {', '.join(SIGNATURES)}")
    settings = S3Settings(bucket=parts.netloc, prefix="", endpoint=endpoint, region=one.get("region"),
                          addressing=addressing, dialect="oss" if scheme == "oss" else "s3", signature=signature)
    return settings, parts.path.lstrip("/")


def _object_files(url: str, env: Mapping[str, str]) -> dict[str, bytes]:
    from crhelper.store.s3_client import make_client

    settings, key = _object_settings(url)
    client = make_client(settings, env)
    shown = f"{urlsplit(url).scheme}://{settings.bucket}/{key}"  # never the query: endpoints may be private
    budget = _Budget()
    try:
        if key and not key.endswith("/"):
            head = client.head_object(Bucket=settings.bucket, Key=key)
            if int(head.get("ContentLength", 0)) > MAX_TOTAL_BYTES:
                raise PackageUnreadable(f"{shown}: more than {MAX_TOTAL_BYTES} bytes")
            body = client.get_object(Bucket=settings.bucket, Key=key)["Body"]
            data = body.read(MAX_TOTAL_BYTES + 1)
            if len(data) > MAX_TOTAL_BYTES:
                raise PackageUnreadable(f"{shown}: more than {MAX_TOTAL_BYTES} bytes")
            return _archive_files(data, shown)
        files: dict[str, bytes] = {}
        paginator = client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=settings.bucket, Prefix=key):
            for item in page.get("Contents", []):
                name = _safe_name(item["Key"][len(key):])
                if _wanted(name):
                    stream = client.get_object(Bucket=settings.bucket, Key=item["Key"])["Body"]
                    files[name] = budget.read(stream, name, int(item.get("Size", 0)))
        return files
    except PackageUnreadable:
        raise
    except Exception as exc:  # botocore's ClientError, connection errors: the package cannot be read
        code = getattr(exc, "response", {}).get("Error", {}).get("Code") if hasattr(exc, "response") else None
        raise PackageUnreadable(f"{shown}: {code or type(exc).__name__}") from None


# --- decoding -------------------------------------------------------------------------------------

def decode_text(name: str, data: bytes, problems: list[Problem]) -> str | None:
    """UTF-8 without a BOM, or None with the problem recorded."""
    if data.startswith(BOM):
        problems.append(Problem(name, "starts with a UTF-8 byte order mark (BOM); save it as UTF-8 without BOM"))
        return None
    if data.startswith(_OTHER_BOMS):
        problems.append(Problem(name, "is UTF-16 (it starts with a byte order mark); save it as UTF-8 without BOM"))
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        problems.append(Problem(f"{name} line {line}", f"not UTF-8 (byte offset {exc.start}: {exc.reason})"))
        return None


def _parse_json(name: str, text: str, problems: list[Problem]) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        problems.append(Problem(f"{name} line {exc.lineno} column {exc.colno}", f"not JSON: {exc.msg}"))
        return None


def _replace_policy_problems(policy: Any) -> list[Problem]:
    """{zone: {field: [{"src": "<string>", "dst": <value>}]}} (spec §5)."""
    if not isinstance(policy, dict):
        return [Problem(REPLACE_POLICY, "must be an object of zones")]
    found = []
    for zone, fields in policy.items():
        if not isinstance(fields, dict):
            found.append(Problem(f"{REPLACE_POLICY} {zone}", "must be an object of fields"))
            continue
        for name, rules in fields.items():
            if not isinstance(rules, list):
                found.append(Problem(f"{REPLACE_POLICY} {zone}.{name}", "must be a list of {src, dst}"))
                continue
            for index, rule in enumerate(rules):
                where = f"{REPLACE_POLICY} {zone}.{name}[{index}]"
                if not isinstance(rule, dict) or "src" not in rule or "dst" not in rule:
                    found.append(Problem(where, "must be an object with src and dst"))
                elif not isinstance(rule["src"], str):
                    found.append(Problem(where, "src must be a string (the old value as text)"))
    return found


_T = TypeVar("_T")


@dataclass(frozen=True, eq=False)
class ByDigest(Generic[_T]):
    """A value with the digest of the bytes it comes from, equal and hashed by the digest alone:
    the key of a `functools.lru_cache` that parses each content once (the value rides along)."""

    digest: str
    value: _T

    def __hash__(self) -> int:
        return hash(self.digest)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByDigest) and other.digest == self.digest


def files_digest(files: Mapping[str, bytes]) -> str:
    """SHA-256 over the files' names and bytes (lengths included, so no two sets collide by concatenation)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        data = files[name]
        digest.update(f"{len(name)}:{name}:{len(data)}:".encode("utf-8", "surrogatepass"))  # any name a folder lists
        digest.update(data)
    return digest.hexdigest()


def parse_files(files: Mapping[str, bytes], source: str) -> Package:
    """The files of a package -> `Package`; raises `InvalidPackage` listing every file problem.
    Files seen lately (by content) are not parsed again: a Package is read-only."""
    package = _parsed(ByDigest(files_digest(files), files))
    return package if package.source == source else replace(package, source=source)


@functools.lru_cache(maxsize=32)
def _parsed(files: ByDigest[Mapping[str, bytes]]) -> Package:
    return _parse_files(files.value, "")


def _parse_files(files: Mapping[str, bytes], source: str) -> Package:
    problems = [Problem(name, "required file missing") for name in REQUIRED if name not in files]
    texts = {name: decode_text(name, data, problems) for name, data in sorted(files.items())}
    parsed: dict[str, Any] = {}
    for name, text in texts.items():
        if text is not None and name != TEMPLATE:
            parsed[name] = _parse_json(name, text, problems)
    policy = parsed.get(REPLACE_POLICY) or {}
    if REPLACE_POLICY in parsed and parsed[REPLACE_POLICY] is not None:
        problems += _replace_policy_problems(policy)
    locales: dict[str, dict[str, str]] = {}
    for name, table in parsed.items():
        if not name.startswith(LOCALE_DIR + "/") or table is None:
            continue
        if not isinstance(table, dict):
            problems.append(Problem(name, "must be an object of \"source string\": \"translation\""))
            continue
        bad = [key for key, value in table.items() if not isinstance(value, str)]
        if bad:
            problems.append(Problem(name, f"translations must be strings: {', '.join(bad[:5])}"))
        locales[name[len(LOCALE_DIR) + 1: -len(".json")].lower()] = {k: v for k, v in table.items() if isinstance(v, str)}
    if problems:
        raise InvalidPackage(problems)
    template = texts[TEMPLATE]
    assert template is not None
    return Package(source=source, config=parsed[CONFIG], template=template,
                   replace_policy=policy if isinstance(policy, dict) else {}, locales=locales,
                   config_digest=hashlib.sha256(files[CONFIG]).hexdigest())


def read_files(source: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> dict[str, bytes]:
    """The raw package files (config.json, the template, replace_policy.json, locale/*.json)."""
    text = os.fspath(source)
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in ("oss", "s3"):
        return _object_files(text, os.environ if env is None else env)
    if scheme:
        raise PackageUnreadable(f"unknown package scheme {scheme[:16]}://; use a path, oss:// or s3://")
    path = Path(text).expanduser()
    if path.is_dir():
        return _folder_files(path)
    if not path.is_file():
        raise PackageUnreadable(f"{text}: no such package folder or archive")
    if path.stat().st_size > MAX_TOTAL_BYTES:
        raise PackageUnreadable(f"{text}: more than {MAX_TOTAL_BYTES} bytes")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PackageUnreadable(f"{text}: {exc.strerror or exc}") from None
    return _archive_files(data, text)


def load_package(source: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Package:
    """Read and parse a package; `PackageUnreadable` or `InvalidPackage` (every file problem)."""
    shown = os.fspath(source)
    if "://" in shown:
        shown = shown.split("?", 1)[0]
    return parse_files(read_files(source, env), shown)
