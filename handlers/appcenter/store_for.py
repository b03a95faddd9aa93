"""The cluster store `CRHELPER_APPCENTER_STORE` names: apart from `state` (SQLite) and `state_s3`
(OSS), which builds on `state`, so neither imports the other's opener (no import cycle) and boto3
loads only for an OSS store."""

from __future__ import annotations

from typing import Mapping

from .state import STORE_ENV, ClusterStore, SqliteClusterStore, default_path


def open_cluster_store(url: str | None = None, env: Mapping[str, str] | None = None) -> ClusterStore:
    """The store `url` (`CRHELPER_APPCENTER_STORE`) names: None/"" (the file under the home),
    `sqlite:///<absolute path>`, or `s3://<bucket>/<prefix>?endpoint=…&region=…` (OSS when
    deployed; parsed like CRHELPER_STORE). ValueError names the setting and the rule, never the query."""
    if not url:
        return SqliteClusterStore(default_path(env))
    if url.startswith("sqlite:///"):
        return SqliteClusterStore(url[len("sqlite://"):])
    if url.startswith("s3://"):
        from .state_s3 import open_s3_cluster_store  # boto3 loads only for this store

        return open_s3_cluster_store(url, env)
    raise ValueError(f"{STORE_ENV}: {url.split('?', 1)[0]!r} is not sqlite:///<absolute path> or "
                     "s3://<bucket>/<prefix>?endpoint=…")
