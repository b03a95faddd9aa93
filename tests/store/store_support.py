"""Constants and helpers shared by the store tests and their spawned child processes."""

from __future__ import annotations

import itertools
import uuid

PLAIN_BUCKET = "crhelper-s3"
OSS_BUCKET = "oss-crhelper"
CREDS = {
    "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAItestkeyid",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "test-secret",
    "ALIBABA_CLOUD_SECURITY_TOKEN": "test-sts-token",
}
BACKENDS = ("sqlite", "memory", "s3", "oss")


class FakeClock:
    """A clock the test moves by hand, so TTL and lease expiry need no sleeping."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


_prefixes = itertools.count()


def s3_url(endpoint: str, backend: str, prefix: str | None = None) -> str:
    """Store URL for the `s3` (plain moto) or `oss` (OSS-emulating) backend."""
    bucket, dialect = (OSS_BUCKET, "oss") if backend == "oss" else (PLAIN_BUCKET, "s3")
    prefix = prefix or f"t{next(_prefixes)}-{uuid.uuid4().hex[:8]}"
    return (
        f"s3://{bucket}/{prefix}?endpoint={endpoint}&region=us-east-1"
        f"&addressing=path&dialect={dialect}"
    )
