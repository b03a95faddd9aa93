"""Constants and helpers shared by the store tests and their spawned child processes."""

from __future__ import annotations

import importlib.util
import itertools
import sys
import uuid
from pathlib import Path
from typing import Any

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


def store_suite_conftest() -> Any:
    """The store suite's conftest as a module, for test folders outside tests/store that need its
    moto server (`serving_buckets`) without being a conftest of theirs."""
    name = "store_suite_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("conftest.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]
