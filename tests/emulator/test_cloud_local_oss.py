"""The emulator's local OSS: buckets as folders served over the S3 API with the create-only writes
the s3:// store relies on (both S3's If-None-Match and OSS's x-oss-forbid-overwrite), reached
through the project's own boto3 client and store, and ALIYUN::OSS::Bucket applied on it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crhelper.emulator.cloud_local_oss import LocalOss, OssError, OssFolder, decode_aws_chunked
from crhelper.emulator.cloud_registry import cloud_type
from crhelper.emulator.cloud_session import CloudSession
from crhelper.store import open_store
from crhelper.store.base import IdempotencyKey
from crhelper.store.s3_client import client_for_url

CLOUD_URL = "s3://state/crhelper/?endpoint=https://s3.oss-cn-hangzhou-internal.aliyuncs.com&region=cn-hangzhou"


@pytest.fixture
def folder(tmp_path: Path) -> OssFolder:
    made = OssFolder(tmp_path / "oss")
    made.create_bucket("state")
    return made


@pytest.fixture
def oss(folder: OssFolder, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalOss]:
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "local")  # what FC gives a function (the role's STS key)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "local")
    with LocalOss(folder) as served:
        yield served


def test_create_only_put_lets_exactly_one_of_many_racers_win(folder: OssFolder) -> None:
    results: list[str] = []
    start = threading.Barrier(8)

    def racer(number: int) -> None:
        start.wait()
        try:
            folder.put("state", "log/000000000001.json", f"writer {number}".encode(), create_only=True)
            results.append(f"won {number}")
        except OssError as exc:
            results.append(exc.code)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [r for r in results if r.startswith("won")]
    assert len(winners) == 1 and results.count("PreconditionFailed") == 7
    assert folder.get("state", "log/000000000001.json") == f"writer {winners[0].split()[1]}".encode()
    assert not any((folder.root / ".partial").iterdir())  # no temporary file left behind


@pytest.mark.slow  # a local OSS endpoint
@pytest.mark.parametrize("dialect, refusal", [("oss", "FileAlreadyExists"), ("s3", "PreconditionFailed")])
def test_the_stores_client_meets_its_dialects_refusal_over_the_wire(oss: LocalOss, dialect: str, refusal: str) -> None:
    client, settings = client_for_url(oss.store_url(CLOUD_URL + f"&dialect={dialect}"), "CRHELPER_STORE")
    key = settings.prefix + "a/1.json"
    client.put_object(Bucket="state", Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(Exception) as refused:
        client.put_object(Bucket="state", Key=key, Body=b"second", IfNoneMatch="*")
    assert refused.value.response["Error"]["Code"] == refusal  # type: ignore[attr-defined]
    assert client.get_object(Bucket="state", Key=key)["Body"].read() == b"first"
    listed = client.list_objects_v2(Bucket="state", Prefix=settings.prefix, MaxKeys=1)
    assert [o["Key"] for o in listed["Contents"]] == [key]
    client.delete_objects(Bucket="state", Delete={"Objects": [{"Key": key}], "Quiet": True})
    assert client.list_objects_v2(Bucket="state", Prefix=settings.prefix)["KeyCount"] == 0


@pytest.mark.slow  # a local OSS endpoint
def test_the_s3_store_claims_once_on_the_local_oss(oss: LocalOss) -> None:
    store = open_store(oss.store_url(CLOUD_URL))
    key = IdempotencyKey("stack", "request-1", "Thing")
    first, second = store.claim(key, "owner-a"), store.claim(key, "owner-b")
    assert first.owns and not second.owns
    assert second.record.owner == "owner-a"


@pytest.mark.slow  # a local OSS endpoint
def test_listing_pages_and_keys_that_look_like_paths_stay_inside_their_bucket(folder: OssFolder, oss: LocalOss) -> None:
    client, _ = client_for_url(oss.store_url(CLOUD_URL), "CRHELPER_STORE")
    keys = ["../escape", "a//b", "dir/", "p/%41", "p/x y"]
    for key in keys:
        client.put_object(Bucket="state", Key=key, Body=key.encode())
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="state", PaginationConfig={"PageSize": 2})
    assert [o["Key"] for page in pages for o in page.get("Contents", [])] == sorted(keys)
    assert not (folder.root / "escape").exists()
    assert all(client.get_object(Bucket="state", Key=k)["Body"].read() == k.encode() for k in keys)


def test_an_aws_chunked_body_is_decoded() -> None:
    assert decode_aws_chunked(b"5;chunk-signature=x\r\nhello\r\n1\r\n!\r\n0\r\nx-amz-checksum-crc32:AAAA\r\n\r\n") == b"hello!"


def bucket(name: str, **extra: Any) -> dict[str, Any]:
    oss_type = cloud_type("ALIYUN::OSS::Bucket")
    assert oss_type is not None
    return oss_type.with_defaults({"BucketName": name, **extra})


def test_a_bucket_resource_is_a_local_bucket_kept_while_it_holds_objects_unless_deletion_is_forced() -> None:
    session = CloudSession("cn-hangzhou", "123456789")
    try:
        created = session.apply("Create", "ALIYUN::OSS::Bucket", bucket("app-state"))
        assert created.ok and created.data["Name"] == "app-state"
        assert session.oss_folder.has_bucket("app-state")
        again = session.apply("Create", "ALIYUN::OSS::Bucket", bucket("app-state"))
        assert not again.ok and "BucketAlreadyExists" in str(again.reason)
        session.oss_folder.put("app-state", "crhelper/record/x/000000000001.json", b"{}")
        kept = session.apply("Delete", "ALIYUN::OSS::Bucket", bucket("app-state"), "app-state")
        assert not kept.ok and "BucketNotEmpty" in str(kept.reason) and "DeletionForce" in str(kept.reason)
        forced = session.apply("Delete", "ALIYUN::OSS::Bucket", bucket("app-state", DeletionForce=True), "app-state")
        assert forced.ok and not session.oss_folder.has_bucket("app-state")
    finally:
        session.close()


def test_code_from_a_missing_local_object_fails_naming_where_to_put_the_package() -> None:
    session = CloudSession("cn-hangzhou", "123456789")
    function_type = cloud_type("ALIYUN::FC3::Function")
    assert function_type is not None
    properties = function_type.with_defaults({"FunctionName": "f", "Handler": "index.handler", "Runtime": "python3.10",
                                              "Code": {"OssBucketName": "code", "OssObjectName": "p.zip"}})
    try:
        missing = session.apply("Create", function_type.name, properties)
        assert not missing.ok
        where = session.oss_folder.root / "code" / "p.zip"
        assert missing.reason == (f"Properties.Code.OssBucketName: the local OSS has no bucket 'code': put the code "
                                  f"package at {where} (crhelper package MODULE:provider --output {where})")
    finally:
        session.close()
