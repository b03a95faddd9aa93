"""Code through OSS (deploy.md §2.2: 100 MB in the call, 500 MB from OSS): `crhelper deploy --oss` puts
the zip in a bucket through boto3's S3 API (a moto server on loopback stands in for OSS at the wire),
then FC 3.0 / 2.0 create and update the function from that object, through the real SDKs against the
local Function Compute, which reads the object from the same server."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from crhelper.cli.main import main
from crhelper.deploy import DeployError
from crhelper.deploy.oss import code_route, object_key
from crhelper.packaging.checksums import crc64
from crhelper.packaging.limits import FC_UPLOAD_LIMIT
from crhelper.packaging.plan import INDEX_SOURCE

HELLO = Path(__file__).resolve().parent / "deploy_hello.py"
SPEC = f"{HELLO}:provider"
BUCKET = "fc-code"
REGION = "cn-hangzhou"


def package(tmp_path: Path, marker: str = "") -> Path:
    """A zip shaped as `crhelper package` writes it (index.py + the provider; the library comes from the
    worker's inherited sys.path)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in (("index.py", INDEX_SOURCE), ("deploy_hello.py", (HELLO.read_text() + marker).encode())):
            archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    path = tmp_path / f"hello{len(marker)}.zip"
    path.write_bytes(buffer.getvalue())
    return path


@pytest.fixture(scope="module")
def oss() -> Iterator[tuple[str, Any]]:
    """A moto S3 server on loopback with one bucket: (its endpoint URL, a boto3 client on it)."""
    import boto3
    from botocore.config import Config
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    raw = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x",
                       aws_secret_access_key="y", config=Config(s3={"addressing_style": "path"}))
    raw.create_bucket(Bucket=BUCKET)
    try:
        yield endpoint, raw
    finally:
        raw.close()
        server.stop()


@pytest.fixture(scope="module")
def fc(oss: tuple[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from crhelper.local.fc_server import LocalFunctionCompute

    reader = f"s3://any?endpoint={oss[0]}&addressing=path&region={REGION}"
    with LocalFunctionCompute(state_dir=tmp_path_factory.mktemp("fc-state"), oss_url=reader, region=REGION) as server:
        yield server


def deploy(fc: Any, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["deploy", SPEC, "--endpoint", fc.endpoint.removeprefix("http://"), "--region", fc.region,
                 "--timer", "none", "--json", *args])
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out.strip() else {"stderr": out.err}


def changes(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(s["action"], s["kind"], s["name"]) for s in result["steps"] if s["action"] != "unchanged"]


def objects(raw: Any, prefix: str) -> dict[str, bytes]:
    listed = raw.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents") or []
    return {o["Key"]: raw.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


@pytest.mark.slow
def test_fc3_code_goes_through_oss_once_per_checksum_and_the_function_runs_it(
        fc: Any, oss: tuple[str, Any], keys: None, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        invoke_reaches: Callable[[Any, str, str], None]) -> None:
    from alibabacloud_fc20230330 import models

    endpoint, raw = oss
    where = f"s3://{BUCKET}/fc3/?endpoint={endpoint}&addressing=path&region={REGION}"
    first_zip = package(tmp_path)
    args = ("--function", "big3", "--oss", where, "--code-upload", "oss")
    code, first = deploy(fc, capsys, "--zip", str(first_zip), *args)
    assert code == 0, first
    key = object_key("fc3/", "big3", str(crc64(first_zip.read_bytes())))
    assert changes(first)[:2] == [("create", "oss-object", f"oss://{BUCKET}/{key}"), ("create", "function", "big3")]
    assert objects(raw, "fc3/") == {key: first_zip.read_bytes()}  # the bytes FC read, under their CRC-64
    held = fc.client3().get_function("big3", models.GetFunctionRequest()).body
    assert held.code_checksum == str(crc64(first_zip.read_bytes()))
    invoke_reaches(fc, first["service_token"], "oss")

    code, second = deploy(fc, capsys, "--zip", str(first_zip), *args)
    assert code == 0 and second["changed"] is False, second  # same checksum: no upload, no update
    assert "oss-object" not in {s["kind"] for s in second["steps"]}

    new_zip = package(tmp_path, "\n# v2\n")
    code, third = deploy(fc, capsys, "--zip", str(new_zip), *args)
    new_key = object_key("fc3/", "big3", str(crc64(new_zip.read_bytes())))
    assert code == 0 and changes(third) == [("create", "oss-object", f"oss://{BUCKET}/{new_key}"),
                                            ("update", "code", "big3")], third
    assert set(objects(raw, "fc3/")) == {key, new_key}
    assert fc.client3().get_function("big3", models.GetFunctionRequest()).body.code_checksum == str(
        crc64(new_zip.read_bytes()))
    invoke_reaches(fc, third["service_token"], "v2")

    code, fourth = deploy(fc, capsys, "--zip", str(new_zip), *args, "--memory", "512")  # settings only
    assert code == 0 and changes(fourth) == [("update", "function", "big3")], fourth
    assert set(objects(raw, "fc3/")) == {key, new_key}  # the code was not sent again
    assert fc.client3().get_function("big3", models.GetFunctionRequest()).body.memory_size == 512


@pytest.mark.slow
def test_fc2_function_is_created_and_updated_from_the_oss_object(
        fc: Any, oss: tuple[str, Any], keys: None, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        invoke_reaches: Callable[[Any, str, str], None]) -> None:
    endpoint, raw = oss
    where = f"s3://{BUCKET}/fc2?endpoint={endpoint}&addressing=path&region={REGION}"
    args = ("--fc-version", "2", "--service", "big", "--function", "big2", "--account-id", fc.account_id,
            "--oss", where, "--code-upload", "oss")
    zip_path = package(tmp_path)
    code, first = deploy(fc, capsys, "--zip", str(zip_path), *args)
    assert code == 0, first
    key = object_key("fc2/", "big2", str(crc64(zip_path.read_bytes())))
    assert ("create", "oss-object", f"oss://{BUCKET}/{key}") in changes(first)
    assert objects(raw, "fc2/") == {key: zip_path.read_bytes()}
    invoke_reaches(fc, first["service_token"], "two")
    raw.delete_object(Bucket=BUCKET, Key=key)  # FC copied the code: the object is not needed any more
    code, second = deploy(fc, capsys, "--zip", str(zip_path), *args)
    assert code == 0 and second["changed"] is False, second
    new_zip = package(tmp_path, "\n# v2\n")
    code, third = deploy(fc, capsys, "--zip", str(new_zip), *args)
    assert code == 0 and [c[1] for c in changes(third)] == ["oss-object", "code"], third
    invoke_reaches(fc, third["service_token"], "again")


@pytest.mark.slow
def test_a_missing_bucket_fails_before_fc_is_asked_and_says_what_to_do(
        fc: Any, oss: tuple[str, Any], keys: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from alibabacloud_fc20230330 import models

    where = f"s3://no-such-bucket/x?endpoint={oss[0]}&addressing=path&region={REGION}"
    capsys.readouterr()
    code = main(["deploy", SPEC, "--endpoint", fc.endpoint.removeprefix("http://"), "--region", fc.region,
                 "--zip", str(package(tmp_path)), "--function", "nobucket", "--oss", where, "--code-upload", "oss"])
    err = capsys.readouterr().err
    assert code == 2 and "oss://no-such-bucket/x/nobucket/" in err and "NoSuchBucket" in err, err
    assert "next: create bucket no-such-bucket" in err
    with pytest.raises(Exception) as found:
        fc.client3().get_function("nobucket", models.GetFunctionRequest())
    assert getattr(found.value, "code", "") == "FunctionNotFound"


def test_code_route_sends_through_oss_only_what_the_call_cannot_carry() -> None:
    url = "oss://bucket/prefix"
    assert code_route(10, "auto", None) == "direct"
    assert code_route(10, "auto", url) == "direct"
    assert code_route(FC_UPLOAD_LIMIT, "auto", url) == "direct"
    assert code_route(FC_UPLOAD_LIMIT + 1, "auto", url) == "oss"
    assert code_route(10, "oss", url) == "oss"
    with pytest.raises(DeployError) as over:
        code_route(FC_UPLOAD_LIMIT + 1, "auto", None)
    assert "over FC's 104,857,600-byte limit" in over.value.problem and "--oss oss://BUCKET" in over.value.next_step
    with pytest.raises(DeployError) as forced:
        code_route(FC_UPLOAD_LIMIT + 1, "direct", url)
    assert "over FC's" in forced.value.problem
    with pytest.raises(DeployError) as no_bucket:
        code_route(10, "oss", None)
    assert "--code-upload oss needs the bucket" in no_bucket.value.problem


def test_oss_urls_are_checked_before_anything_is_sent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from crhelper.cloud.credentials import Credentials
    from crhelper.deploy.oss import OssUploader

    creds = Credentials("id", "secret")
    for url, said in (("oss://b?endpoint=http://x", "oss://... takes no parameters"),
                      ("s3://b?colour=red", "unknown s3 parameter(s) colour"),
                      ("sqlite:///tmp/x", "--oss must name a bucket")):
        with pytest.raises(DeployError) as found:
            OssUploader(url, creds, REGION)
        assert said in found.value.problem, found.value.problem
        assert "CRHELPER_STORE" not in found.value.problem


@pytest.mark.slow  # the CLI's first deploy imports the SDKs' models
def test_fc2_refuses_python312_naming_both_ways_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "secret")
    code = main(["deploy", SPEC, "--fc-version", "2", "--runtime", "python3.12", "--region", REGION,
                 "--account-id", "1", "--endpoint", "127.0.0.1:9", "--zip", str(package(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2 and "FC 2.0 has no runtime python3.12" in err and "--fc-version 3" in err, err
