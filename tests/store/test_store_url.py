"""Choosing a store from one URL setting: parsing, defaults and error messages."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from crhelper.store import StoreConfigError, open_store
from crhelper.store.memory import MemoryStore
from crhelper.store.s3_client import credentials_from_env, resolve_endpoint, resolve_region
from crhelper.store.sqlite import SqliteStore
from crhelper.store.url import MemorySettings, S3Settings, SqliteSettings, default_url, parse_store_url


def test_sqlite_urls() -> None:
    assert parse_store_url("sqlite:////var/lib/x.sqlite") == SqliteSettings("/var/lib/x.sqlite")
    assert parse_store_url("sqlite:///rel/x.sqlite") == SqliteSettings("rel/x.sqlite")
    assert parse_store_url("sqlite://:memory:") == SqliteSettings(":memory:")
    assert parse_store_url("sqlite:///:memory:") == SqliteSettings(":memory:")


def test_s3_url_defaults_target_real_oss() -> None:
    settings = parse_store_url("s3://bkt")
    assert settings == S3Settings("bkt", "", None, None, "virtual", "oss", "s3v4")


def test_s3_url_with_every_parameter() -> None:
    settings = parse_store_url(
        "s3://bkt/a/b/?endpoint=http://127.0.0.1:9000&region=cn-shanghai"
        "&addressing=path&dialect=s3&signature=s3"
    )
    assert settings == S3Settings(
        "bkt", "a/b/", "http://127.0.0.1:9000", "cn-shanghai", "path", "s3", "s3"
    )


@pytest.mark.parametrize(
    "url, message",
    [
        ("", "empty"),
        ("state.sqlite", "no scheme"),
        ("redis://host/0", "unknown store scheme 'redis://'"),
        ("sqlite://relative.db", "sqlite:///<path>"),
        ("sqlite:///x.db?mode=ro", "no query"),
        ("s3:///prefix", "s3://<bucket>"),
        ("s3://bkt/p?addressing=sideways", "'addressing' must be one of virtual, path"),
        ("s3://bkt/p?dialect=gcs", "'dialect' must be one of oss, s3"),
        ("s3://bkt/p?signature=v2", "'signature' must be one of s3v4, s3"),
        ("s3://bkt/p?endpoint=ftp://x", "'endpoint' must be an http:// or https:// URL"),
        ("s3://bkt/p?region=a&region=b", "'region' is given more than once"),
    ],
)
def test_malformed_urls_name_the_setting_and_rule(url: str, message: str) -> None:
    with pytest.raises(StoreConfigError) as info:
        parse_store_url(url)
    assert str(info.value).startswith("CRHELPER_STORE: ")
    assert message in str(info.value)


def test_errors_never_echo_the_query_string() -> None:
    with pytest.raises(StoreConfigError) as info:
        parse_store_url("s3://bkt/p?token=supersecretvalue")
    assert "token" in str(info.value) and "supersecretvalue" not in str(info.value)


def test_default_url_uses_crhelper_home(tmp_path: Path) -> None:
    assert default_url({"CRHELPER_HOME": str(tmp_path)}) == f"sqlite:///{tmp_path}/state.sqlite"
    assert default_url({}).endswith("/.crhelper/state.sqlite")


def test_open_store_reads_env_then_default(tmp_path: Path) -> None:
    named = tmp_path / "named.sqlite"
    store = open_store(env={"CRHELPER_STORE": f"sqlite:///{named}"})
    assert isinstance(store, SqliteStore) and named.exists()
    store.close()
    home = tmp_path / "home"
    store = open_store(env={"CRHELPER_HOME": str(home)})
    assert (home / "state.sqlite").exists()
    store.close()
    with pytest.raises(StoreConfigError, match="CRHELPER_STORE"):
        open_store(env={"CRHELPER_STORE": "mongodb://x"})


def test_explicit_url_wins_over_env(tmp_path: Path) -> None:
    store = open_store("sqlite://:memory:", env={"CRHELPER_STORE": "bogus://"})
    assert isinstance(store, SqliteStore) and store.path == ":memory:"
    store.close()


def test_memory_url_opens_a_private_store_without_sqlite() -> None:
    store = open_store("memory://", env={"CRHELPER_STORE": "bogus://"})
    assert isinstance(store, MemoryStore)
    assert isinstance(parse_store_url("MEMORY://"), MemorySettings)
    for bad in ("memory://x", "memory://?a=1", "memory:///p"):
        with pytest.raises(StoreConfigError, match="memory://"):
            parse_store_url(bad)


def test_sqlite_file_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "wal.sqlite"
    store = open_store(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    store.close()


def test_alibaba_credentials_come_first() -> None:
    env = {
        "ALIBABA_CLOUD_ACCESS_KEY_ID": "id",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret",
        "ALIBABA_CLOUD_SECURITY_TOKEN": "token",
    }
    assert credentials_from_env(env) == {
        "aws_access_key_id": "id",
        "aws_secret_access_key": "secret",
        "aws_session_token": "token",
    }
    assert credentials_from_env({"ALIBABA_CLOUD_ACCESS_KEY_ID": "id"}) == {}


def test_region_and_oss_endpoint_resolution() -> None:
    settings = parse_store_url("s3://bkt/p")
    assert isinstance(settings, S3Settings)
    assert resolve_region(settings, {"FC_REGION": "cn-beijing"}) == "cn-beijing"
    assert resolve_endpoint(settings, "cn-beijing") == "https://s3.oss-cn-beijing.aliyuncs.com"
    plain = parse_store_url("s3://bkt/p?dialect=s3")
    assert isinstance(plain, S3Settings) and resolve_endpoint(plain, "us-east-1") is None
