"""The emulator's local OSS: buckets as folders under `$CRHELPER_HOME/oss`, served over the S3 API.

`ALIYUN::OSS::Bucket` creates `<root>/<BucketName>/`; an object `a/b.json` is the file
`<root>/<bucket>/a/b.json` (each key segment percent-encoded, so no key escapes its bucket). A
folder is the whole state: buckets and their objects outlive the stack operation (a function's
store keeps its records between `crhelper stack` commands), and a user puts a code package where a
template's `Code.OssBucketName/OssObjectName` will find it with
`crhelper package ... --output $CRHELPER_HOME/oss/<bucket>/<object>`.

`LocalOss` serves the subset of the S3 API our clients use (boto3 path-style: buckets, Put/Get/
Head/DeleteObject, DeleteObjects, ListObjects V1/V2) with the create-only writes the `s3://`
store relies on: `If-None-Match: *` (S3: 412 PreconditionFailed) and `x-oss-forbid-overwrite: true`
(OSS: 409 FileAlreadyExists), made atomic by linking a finished temporary file into place. It is a
loopback emulator: requests are not authenticated (RAM is recorded, not enforced).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import threading
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from .. import paths
from ..servers import ApiRequestHandler, ApiResponse, LocalHTTPServer, ServerThread

OSS_FOLDER = "oss"
_TMP = ".partial"  # not a valid bucket name: never listed as one
_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"
_MAX_KEYS = 1000


class OssError(Exception):
    """An S3-style error answer: HTTP status, code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def oss_root() -> Path:
    """The local OSS folder of this machine's crhelper home (`$CRHELPER_HOME/oss`)."""
    return paths.home() / OSS_FOLDER


def _segment(part: str) -> str:
    if part in ("", ".", ".."):
        return {"": "%", ".": "%2E", "..": "%2E%2E"}[part]
    return quote(part, safe="")


def _unsegment(name: str) -> str:
    return "" if name == "%" else unquote(name)


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    mtime: float
    path: Path

    def etag(self) -> str:
        return '"' + hashlib.md5(self.path.read_bytes(), usedforsecurity=False).hexdigest() + '"'


class OssFolder:
    """Buckets and objects in one folder (pure file I/O, thread-safe through the file system)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else oss_root()

    # ---------------------------------------------------------------- buckets

    def bucket_path(self, bucket: str) -> Path:
        if not bucket or "/" in bucket or bucket.startswith("."):
            raise OssError(400, "InvalidBucketName", f"bucket name {bucket!r} is not valid")
        return self.root / bucket

    def has_bucket(self, bucket: str) -> bool:
        try:
            return self.bucket_path(bucket).is_dir()
        except OssError:
            return False

    def create_bucket(self, bucket: str) -> bool:
        """Create the bucket; False when it already exists."""
        path = self.bucket_path(bucket)
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            return False
        return True

    def delete_bucket(self, bucket: str, force: bool = False) -> None:
        """Delete the bucket; a non-empty one only with `force` (ROS's DeletionForce)."""
        path = self._existing(bucket)
        if force:
            shutil.rmtree(path, ignore_errors=True)
            return
        if any(True for _ in self.objects(bucket)):
            raise OssError(409, "BucketNotEmpty", f"bucket {bucket} is not empty")
        shutil.rmtree(path, ignore_errors=True)  # only empty folders are left

    def _existing(self, bucket: str) -> Path:
        path = self.bucket_path(bucket)
        if not path.is_dir():
            raise OssError(404, "NoSuchBucket", f"the bucket {bucket} does not exist")
        return path

    # ---------------------------------------------------------------- objects

    def object_path(self, bucket: str, key: str) -> Path:
        if not key:
            raise OssError(400, "InvalidArgument", "the object key is empty")
        return self._existing(bucket).joinpath(*(_segment(p) for p in key.split("/")))

    def put(self, bucket: str, key: str, data: bytes, *, create_only: bool = False, oss_style: bool = False) -> str:
        """Write an object (atomically); with `create_only` an existing object is refused. The ETag."""
        target = self.object_path(bucket, key)
        if target.is_dir():
            raise OssError(409, "InvalidArgument", f"the key {key} is a folder of other objects here")
        staging = self.root / _TMP
        staging.mkdir(parents=True, exist_ok=True)
        partial = staging / secrets.token_hex(8)
        partial.write_bytes(data)
        try:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise OssError(409, "InvalidArgument", f"a prefix of the key {key} is an object here") from None
            if create_only:
                try:
                    os.link(partial, target)  # atomic: of two racers exactly one links
                except FileExistsError:
                    if oss_style:
                        raise OssError(409, "FileAlreadyExists",
                                       "The object you specified already exists and can not be overwritten.") from None
                    raise OssError(412, "PreconditionFailed",
                                   "At least one of the pre-conditions you specified did not hold") from None
            else:
                os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'

    def stat(self, bucket: str, key: str) -> StoredObject:
        path = self.object_path(bucket, key)
        if not path.is_file():
            raise OssError(404, "NoSuchKey", "The specified key does not exist.")
        info = path.stat()
        return StoredObject(key, info.st_size, info.st_mtime, path)

    def get(self, bucket: str, key: str) -> bytes:
        return self.stat(bucket, key).path.read_bytes()

    def delete(self, bucket: str, key: str) -> None:
        path = self.object_path(bucket, key)
        path.unlink(missing_ok=True)
        bucket_path = self.bucket_path(bucket)
        parent = path.parent
        while parent != bucket_path:  # no empty folders left behind: they would read as nothing anyway
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    def objects(self, bucket: str, prefix: str = "") -> list[StoredObject]:
        """Every object whose key starts with `prefix`, sorted by key."""
        root = self._existing(bucket)
        found = []
        for folder, _, files in os.walk(root):
            relative = Path(folder).relative_to(root).parts
            for name in files:
                key = "/".join(_unsegment(p) for p in (*relative, name))
                if key.startswith(prefix):
                    path = Path(folder) / name
                    info = path.stat()
                    found.append(StoredObject(key, info.st_size, info.st_mtime, path))
        return sorted(found, key=lambda o: o.key)


# -------------------------------------------------------------------- the S3 API


def _xml(root: str, body: str) -> bytes:
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} xmlns="{_XMLNS}">{body}</{root}>'.encode()


def _error(exc: OssError, resource: str) -> ApiResponse:
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{exc.code}</Code><Message>{escape(exc.message)}'
            f"</Message><Resource>{escape(resource)}</Resource><RequestId>{secrets.token_hex(8)}</RequestId></Error>")
    return ApiResponse(exc.status, {"Content-Type": "application/xml"}, body.encode())


def _date(mtime: float) -> str:
    return formatdate(mtime, usegmt=True)


def _iso(mtime: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def decode_aws_chunked(data: bytes) -> bytes:
    """The payload of an `aws-chunked` body (`<hex size>[;ext]\\r\\n<data>\\r\\n` ... `0\\r\\n` trailers)."""
    out, position = bytearray(), 0
    while True:
        end = data.index(b"\r\n", position)
        size = int(data[position:end].split(b";", 1)[0], 16)
        if size == 0:
            return bytes(out)
        out += data[end + 2:end + 2 + size]
        position = end + 2 + size + 2


class OssApi:
    """S3 requests on an `OssFolder` (independent of the socket server)."""

    def __init__(self, folder: OssFolder) -> None:
        self.folder = folder

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> ApiResponse:
        parts = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
        try:
            if not bucket:
                return self._list_buckets() if method == "GET" else _error(OssError(405, "MethodNotAllowed", method), "/")
            if not key:
                return self._bucket(method, bucket, query, body)
            return self._object(method, bucket, key, headers, body)
        except OssError as exc:
            return _error(exc, parts.path)

    def _list_buckets(self) -> ApiResponse:
        root = self.folder.root
        names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []
        rows = "".join(f"<Bucket><Name>{escape(n)}</Name><CreationDate>{_iso((root / n).stat().st_mtime)}</CreationDate>"
                       "</Bucket>" for n in names)
        body = f"<Owner><ID>local</ID><DisplayName>local</DisplayName></Owner><Buckets>{rows}</Buckets>"
        return ApiResponse(200, {"Content-Type": "application/xml"}, _xml("ListAllMyBucketsResult", body))

    def _bucket(self, method: str, bucket: str, query: dict[str, str], body: bytes) -> ApiResponse:
        if method == "PUT":
            if not self.folder.create_bucket(bucket):
                raise OssError(409, "BucketAlreadyOwnedByYou", f"the bucket {bucket} already exists")
            return ApiResponse(200, {"Location": f"/{bucket}"}, b"")
        if method == "HEAD":
            self.folder._existing(bucket)
            return ApiResponse(200, {}, b"")
        if method == "DELETE":
            self.folder.delete_bucket(bucket)
            return ApiResponse(204, {}, b"")
        if method == "POST" and "delete" in query:
            return self._delete_objects(bucket, body)
        if method == "GET":
            if "location" in query:
                return ApiResponse(200, {"Content-Type": "application/xml"}, _xml("LocationConstraint", ""))
            return self._list(bucket, query)
        raise OssError(405, "MethodNotAllowed", f"{method} on a bucket is not supported here")

    def _list(self, bucket: str, query: dict[str, str]) -> ApiResponse:
        prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
        v2 = query.get("list-type") == "2"
        try:
            limit = max(0, min(_MAX_KEYS, int(query.get("max-keys", _MAX_KEYS))))
        except ValueError:
            raise OssError(400, "InvalidArgument", "max-keys must be an integer") from None
        after = (query.get("continuation-token") or query.get("start-after", "")) if v2 else query.get("marker", "")
        contents: list[StoredObject] = []
        prefixes: list[str] = []
        last, truncated = "", False
        for item in self.folder.objects(bucket, prefix):
            if item.key <= after:
                continue
            rest = item.key[len(prefix):]
            if delimiter and delimiter in rest:
                common = prefix + rest.split(delimiter, 1)[0] + delimiter
                if common in prefixes or common <= after:
                    continue
                entry: Any = common
            else:
                entry = item
            if len(contents) + len(prefixes) >= limit:
                truncated = True
                break
            (prefixes if isinstance(entry, str) else contents).append(entry)
            last = entry if isinstance(entry, str) else entry.key
        rows = "".join(f"<Contents><Key>{escape(o.key)}</Key><LastModified>{_iso(o.mtime)}</LastModified>"
                       f"<ETag>{escape(o.etag())}</ETag><Size>{o.size}</Size><StorageClass>STANDARD</StorageClass>"
                       "</Contents>" for o in contents)
        rows += "".join(f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in prefixes)
        head = (f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix><MaxKeys>{limit}</MaxKeys>"
                f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
        if delimiter:
            head += f"<Delimiter>{escape(delimiter)}</Delimiter>"
        if v2:
            head += f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount>"
            if query.get("continuation-token"):
                head += f"<ContinuationToken>{escape(query['continuation-token'])}</ContinuationToken>"
            if truncated:
                head += f"<NextContinuationToken>{escape(last)}</NextContinuationToken>"
        else:
            head += f"<Marker>{escape(after)}</Marker>" + (f"<NextMarker>{escape(last)}</NextMarker>" if truncated else "")
        return ApiResponse(200, {"Content-Type": "application/xml"}, _xml("ListBucketResult", head + rows))

    def _delete_objects(self, bucket: str, body: bytes) -> ApiResponse:
        try:
            root = ElementTree.fromstring(body)
        except ElementTree.ParseError:
            raise OssError(400, "MalformedXML", "the Delete body is not XML") from None
        keys = [el.text or "" for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "Key"]
        quiet = any((el.text or "").lower() == "true" for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "Quiet")
        for key in keys:
            self.folder.delete(bucket, key)
        rows = "" if quiet else "".join(f"<Deleted><Key>{escape(k)}</Key></Deleted>" for k in keys)
        return ApiResponse(200, {"Content-Type": "application/xml"}, _xml("DeleteResult", rows))

    def _object(self, method: str, bucket: str, key: str, headers: dict[str, str], body: bytes) -> ApiResponse:
        if method == "PUT":
            if "aws-chunked" in headers.get("content-encoding", ""):
                body = decode_aws_chunked(body)
            oss_style = headers.get("x-oss-forbid-overwrite", "").lower() == "true"
            create_only = oss_style or headers.get("if-none-match", "").strip() == "*"
            etag = self.folder.put(bucket, key, body, create_only=create_only, oss_style=oss_style)
            return ApiResponse(200, {"ETag": etag}, b"")
        if method in ("GET", "HEAD"):
            item = self.folder.stat(bucket, key)
            data = item.path.read_bytes()
            etag = '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'
            head = {"ETag": etag, "Last-Modified": _date(item.mtime), "Content-Type": "application/octet-stream"}
            if method == "HEAD":
                return ApiResponse(200, {**head, "Content-Length": str(len(data))}, b"")
            return ApiResponse(200, head, data)
        if method == "DELETE":
            self.folder.delete(bucket, key)
            return ApiResponse(204, {}, b"")
        raise OssError(405, "MethodNotAllowed", f"{method} on an object is not supported here")


class _Handler(ApiRequestHandler):
    server: "_Server"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        response = self.server.api.handle(self.command, self.path, headers, body)
        if self.command == "HEAD" and "Content-Length" in response.headers:
            self.send_response(response.status)
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            return
        self.write_response(response)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve  # noqa: N815 - http.server naming

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature from BaseHTTPRequestHandler
        return


class _Server(LocalHTTPServer):
    def __init__(self, address: tuple[str, int], api: OssApi) -> None:
        self.api = api
        super().__init__(address, _Handler)


class LocalOss:
    """The local OSS endpoint on loopback over an `OssFolder`; `start()`, `stop()` or `with`."""

    def __init__(self, folder: OssFolder | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.folder = folder or OssFolder()
        self._address = (host, port)
        self._serving: ServerThread | None = None
        self._lock = threading.Lock()

    def start(self) -> "LocalOss":
        with self._lock:
            if self._serving is None:
                self.folder.root.mkdir(parents=True, exist_ok=True)
                self._serving = ServerThread(_Server(self._address, OssApi(self.folder)), "local-oss").start()
        return self

    def stop(self) -> None:
        with self._lock:
            serving, self._serving = self._serving, None
        if serving is not None:
            serving.stop()

    def __enter__(self) -> "LocalOss":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        if self._serving is None:
            raise RuntimeError("LocalOss is not started")
        server = self._serving.server
        assert isinstance(server, LocalHTTPServer)
        return f"http://{server.host}:{server.port}"

    def store_url(self, url: str) -> str:
        """An `s3://` store URL pointed at this endpoint (path-style; bucket, prefix and the other
        parameters kept): what a function of the stack reaches its bucket through."""
        parts = urlsplit(url)
        params = [(k, v) for k, values in parse_qs(parts.query, keep_blank_values=True).items() for v in values
                  if k not in ("endpoint", "addressing")]
        params += [("endpoint", self.endpoint), ("addressing", "path")]
        query = "&".join(f"{k}={quote(v, safe=':/')}" for k, v in params)
        return f"s3://{parts.netloc}{parts.path}?{query}"
