"""Code through OSS: FC takes a zip in the call only up to 100 MB (deploy.md §2.2); above that, and
whenever asked, deploy puts the zip in an OSS bucket through OSS's S3-compatible API (boto3, the
project's one S3 client, `crhelper.store.s3_client`) and gives FC the bucket and object instead.

`--oss` names the place as `oss://BUCKET[/PREFIX]` (OSS of the deploy's region, its S3-compatible
endpoint `https://s3.oss-<region>.aliyuncs.com`) or `s3://BUCKET[/PREFIX]?endpoint=...` with the
parameters of CRHELPER_STORE (a local S3-compatible server, another endpoint). The object is named by
the code's CRC-64, `PREFIX<function>/<checksum>.zip`, so a second deploy of the same code finds it
there and uploads nothing; FC copies the code when the function is created or updated, so the
object is not needed afterwards and deploy leaves it (a bucket lifecycle rule may expire it).
The bucket must be in the function's region (FC's rule).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..cloud.credentials import KEY_ID_ENV, KEY_SECRET_ENV, REGION_ENV, TOKEN_ENV, Credentials
from ..packaging.limits import FC_UPLOAD_LIMIT
from . import DeployError
from .plan import DeploySpec, Step

MODES = ("auto", "direct", "oss")
SETTING = "--oss"


@dataclass(frozen=True)
class OssLocation:
    bucket: str
    key: str

    def text(self) -> str:
        return f"oss://{self.bucket}/{self.key}"


def code_route(size: int, mode: str, oss_url: str | None, limit: int = FC_UPLOAD_LIMIT) -> str:
    """"direct" (zipFile in the call) or "oss": `auto` sends through OSS only what FC would refuse in the call.
    DeployError when the zip cannot reach FC the way asked (or at all without `--oss`)."""
    if mode not in MODES:
        raise DeployError(f"--code-upload {mode!r} is not one of {', '.join(MODES)}", "give auto, direct or oss")
    if mode == "oss" or (mode == "auto" and size > limit and oss_url):
        if not oss_url:
            raise DeployError("--code-upload oss needs the bucket to upload to",
                              "give --oss oss://BUCKET/PREFIX (a bucket in the function's region)")
        return "oss"
    if size > limit:
        raise DeployError(f"the package is {size:,} bytes, over FC's {limit:,}-byte limit for code sent in the call",
                          "give --oss oss://BUCKET/PREFIX (a bucket in the function's region): deploy uploads it "
                          "there and FC reads it from OSS (up to 500 MB)")
    return "direct"


def object_key(prefix: str, function: str, checksum: str) -> str:
    """`PREFIX<function>/<crc64>.zip`: content-addressed, one folder per function."""
    return f"{prefix}{function}/{checksum}.zip"


def _settings(url: str, region: str) -> Any:
    from ..store.url import S3Settings, StoreConfigError, parse_store_url

    oss_form = url.startswith("oss://")
    if oss_form:
        if "?" in url:
            raise DeployError(f"{SETTING} oss://... takes no parameters",
                              "use s3://BUCKET/PREFIX?endpoint=... for another endpoint")
        url = "s3://" + url[len("oss://"):]
    try:
        settings = parse_store_url(url)
    except StoreConfigError as exc:
        raise DeployError(str(exc).replace("CRHELPER_STORE", SETTING, 1),
                          "give --oss as oss://BUCKET/PREFIX or s3://BUCKET/PREFIX?endpoint=...") from None
    if not isinstance(settings, S3Settings):
        raise DeployError(f"{SETTING} must name a bucket: oss://BUCKET/PREFIX or s3://BUCKET/PREFIX?endpoint=...",
                          "give the bucket the code goes to")
    if settings.endpoint is None:  # OSS's S3-compatible endpoint of the function's region, never AWS's
        settings = replace(settings, endpoint=f"https://s3.oss-{settings.region or region}.aliyuncs.com",
                           region=settings.region or region)
    return settings


class OssUploader:
    """Puts code objects in the bucket `oss_url` names, with the deploy's credentials."""

    def __init__(self, oss_url: str, credentials: Credentials, region: str) -> None:
        self._settings = _settings(oss_url, region)
        self._credentials, self._region = credentials, region

    def _client(self) -> Any:
        from ..store.s3_client import make_client

        import importlib.util

        if importlib.util.find_spec("boto3") is None:  # make_client imports it: name its extra here
            raise DeployError("--oss uploads through boto3, which is not installed", "pip install 'ros-crhelper[oss]'")
        env = {KEY_ID_ENV: self._credentials.access_key_id, KEY_SECRET_ENV: self._credentials.access_key_secret,
               REGION_ENV: self._region}
        if self._credentials.security_token:
            env[TOKEN_ENV] = self._credentials.security_token
        return make_client(self._settings, env)

    def upload(self, data: bytes, function: str, checksum: str) -> tuple[OssLocation, bool]:
        """The object holding `data` (put there unless an object of that name and size already is); whether
        this call uploaded it."""
        where = OssLocation(self._settings.bucket, object_key(self._settings.prefix, function, checksum))
        client = self._client()
        try:
            try:
                head = client.head_object(Bucket=where.bucket, Key=where.key)
                if int(head.get("ContentLength") or -1) == len(data):
                    return where, False
            except Exception as exc:  # botocore's ClientError: 404 means not there yet
                if _code(exc) not in ("404", "NoSuchKey", "NotFound"):
                    raise
            client.put_object(Bucket=where.bucket, Key=where.key, Body=data, ContentType="application/zip")
        except DeployError:
            raise
        except Exception as exc:
            raise _explain(exc, where) from None
        return where, True


def _code(exc: BaseException) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", "") or "")


def _explain(exc: BaseException, where: OssLocation) -> DeployError:
    code = _code(exc) or type(exc).__name__
    said = f"cannot put the code in {where.text()}: {code}"
    if code in ("NoSuchBucket", "404"):
        return DeployError(said, f"create bucket {where.bucket} in the function's region, or give --oss another one")
    if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return DeployError(said, f"let the deploy's key oss:PutObject and oss:GetObject on {where.bucket}")
    return DeployError(said, "check --oss (bucket, endpoint) and the network, then deploy again")


def upload_step(uploader: OssUploader | None, spec: DeploySpec, steps: list[Step]) -> OssLocation:
    """Put `spec`'s code in OSS for a create or update that sends it; the step it took goes to `steps`."""
    if uploader is None:
        raise DeployError("the code is to go through OSS but no bucket was given", "give --oss oss://BUCKET/PREFIX")
    where, uploaded = uploader.upload(spec.code, spec.function.name, spec.checksum)
    steps.append(Step("create" if uploaded else "unchanged", "oss-object", where.text(),
                      f"{len(spec.code):,} bytes" if uploaded else "already there"))
    return where
