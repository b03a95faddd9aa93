"""What the S3/OSS backend puts on the wire, checked at the (moto) server."""

from __future__ import annotations

import dataclasses

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from store_support import CREDS, OSS_BUCKET, PLAIN_BUCKET, FakeClock, s3_url

from crhelper.store import (
    ClaimStatus,
    Continuation,
    IdempotencyKey,
    StoreError,
    new_continuation_id,
    open_store,
)
from crhelper.store.s3_client import make_client
from crhelper.store.url import parse_store_url

KEY = IdempotencyKey("stack", "req", "Res")


def _raw_client(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=Config(s3={"addressing_style": "path"}),
    )


def test_oss_dialect_sends_signed_forbid_overwrite_and_if_none_match(moto_server, moto_endpoint):
    url = s3_url(moto_endpoint, "oss", prefix="wire-oss")
    store = open_store(url, env=CREDS, clock=FakeClock())
    store.claim(KEY, "owner-a")
    store.complete(KEY, "owner-a", {"Status": "SUCCESS"})
    store.close()
    puts = [r for r in moto_server.gate.puts(OSS_BUCKET) if "/wire-oss/" in r.path]
    assert len(puts) == 2
    for put in puts:
        assert put.headers["x-oss-forbid-overwrite"] == "true"
        assert put.headers["if-none-match"] == "*"
        auth = put.headers["authorization"]
        assert auth.startswith("AWS4-HMAC-SHA256 Credential=LTAItestkeyid/")
        assert "x-oss-forbid-overwrite" in auth.split("SignedHeaders=")[1]
        assert put.headers["x-amz-security-token"] == "test-sts-token"
        assert "x-amz-checksum-crc32" not in put.headers
        assert "aws-chunked" not in put.headers.get("content-encoding", "")


def test_s3_dialect_sends_only_if_none_match(moto_server, moto_endpoint):
    store = open_store(s3_url(moto_endpoint, "s3", prefix="wire-s3"), env=CREDS)
    store.claim(KEY, "owner-a")
    store.close()
    puts = [r for r in moto_server.gate.puts(PLAIN_BUCKET) if "/wire-s3/" in r.path]
    assert len(puts) == 1
    assert puts[0].headers["if-none-match"] == "*"
    assert "x-oss-forbid-overwrite" not in puts[0].headers


def test_oss_emulation_ignores_if_none_match(moto_endpoint):
    """Negative control: on the OSS-emulating bucket only x-oss-forbid-overwrite protects."""
    raw = _raw_client(moto_endpoint)
    raw.put_object(Bucket=OSS_BUCKET, Key="ctl/a", Body=b"1", IfNoneMatch="*")
    raw.put_object(Bucket=OSS_BUCKET, Key="ctl/a", Body=b"2", IfNoneMatch="*")
    assert raw.get_object(Bucket=OSS_BUCKET, Key="ctl/a")["Body"].read() == b"2"
    raw.close()
    settings = parse_store_url(s3_url(moto_endpoint, "oss"))
    client = make_client(settings, CREDS)  # type: ignore[arg-type]
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=OSS_BUCKET, Key="ctl/a", Body=b"3")
    assert info.value.response["Error"]["Code"] == "FileAlreadyExists"
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    client.close()


@pytest.mark.slow
def test_log_is_compacted_after_many_transitions(moto_endpoint):
    store = open_store(s3_url(moto_endpoint, "s3", prefix="compact"), env=CREDS, clock=FakeClock())
    store.claim(KEY, "owner-a")
    for _ in range(10):
        assert store.renew(KEY, "owner-a", 30)
    raw = _raw_client(moto_endpoint)
    listing = raw.list_objects_v2(Bucket=PLAIN_BUCKET, Prefix="compact/")
    keys = [o["Key"] for o in listing["Contents"]]
    assert len(keys) == 1 and keys[0].endswith("000000000011.json")
    assert "stack" not in keys[0]  # keys are digests: no ARNs or request ids in object names
    raw.close()
    store.close()


def test_response_urls_are_stored_only_in_the_object_body(moto_server, moto_endpoint):
    store = open_store(s3_url(moto_endpoint, "s3", prefix="urls"), env=CREDS)
    store.claim(KEY, "owner-a", response_urls={"ResponseURL": "https://r/?Signature=zzsecret"})
    store.close()
    for request in moto_server.gate.requests:
        assert "zzsecret" not in request.path
        assert all("zzsecret" not in v for v in request.headers.values())


def test_missing_bucket_is_a_clear_store_error(moto_endpoint):
    url = s3_url(moto_endpoint, "s3").replace(PLAIN_BUCKET, "no-such-bucket-here")
    store = open_store(url, env=CREDS)
    with pytest.raises(StoreError, match="no-such-bucket-here.*NoSuchBucket") as info:
        store.get(KEY)
    assert "endpoint" not in str(info.value)
    store.close()


@pytest.mark.slow
def test_stale_writer_refilling_a_collected_slot_loses(moto_server, moto_endpoint):
    """B decides on seq 1; before its create of seq 2 lands, C writes seqs 2 and 3 and collects
    both older slots, so B's create succeeds on an empty slot. B must still see that it lost."""
    url = s3_url(moto_endpoint, "s3", prefix="stale")
    clock = FakeClock()
    a, b, c = (open_store(url, env=CREDS, clock=clock) for _ in range(3))
    a.claim(KEY, "owner-a", lease_seconds=10)
    clock.advance(11)
    fired: list[str] = []

    def interleave(path: str) -> None:
        if not fired and path.endswith("/000000000002.json"):
            fired.append(path)
            assert c.claim(KEY, "owner-c", lease_seconds=60).status is ClaimStatus.TAKEN_OVER
            assert c.renew(KEY, "owner-c", 60)

    moto_server.gate.before_put = interleave
    try:
        result = b.claim(KEY, "owner-b", lease_seconds=60)
    finally:
        moto_server.gate.before_put = None
    assert fired
    assert result.status is ClaimStatus.IN_FLIGHT and result.record.owner == "owner-c"
    assert b.complete(KEY, "owner-b", {"Status": "SUCCESS"}) is False
    for store in (a, b, c):
        store.close()


def test_retried_create_whose_first_attempt_landed_counts_as_a_win(moto_server, moto_endpoint):
    clock = FakeClock()
    store = open_store(s3_url(moto_endpoint, "oss", prefix="replay"), env=CREDS, clock=clock)
    c = Continuation(
        id=new_continuation_id(),
        request={"RequestType": "Create"},
        state={"step": 1},
        attempt=1,
        started_at=clock.now,
        deadline=clock.now + 60,
        next_run_at=clock.now,
    )
    store.put_continuation(c)
    moto_server.gate.replay_next_put = True
    assert store.update_continuation(dataclasses.replace(c, state={"step": 2}), 1) is True
    assert moto_server.gate.replay_next_put is False
    stored = store.get_continuation(c.id)
    assert stored is not None and stored.version == 2 and stored.state == {"step": 2}
    store.close()
