"""The AppCluster provider's own state on OSS (or S3), for a deployed provider whose function has no
lasting disk: `SqliteClusterStore`'s interface over a bucket prefix.

Each cluster is a short log of immutable numbered objects, `<prefix>appcenter/clusters/<id>/<seq>.json`,
written with the framework's create-only primitives (`crhelper.store.s3.S3Store`: OSS documents a
create-only PutObject but no `If-Match`): a save is the create of the next number, of two racers
exactly one wins, and the log is compacted after each win. One resource's operations run one at a
time (the framework's lease), so a lost race means a stale writer: its save is retried on the new
head. A removal writes a tombstone, and no later save brings the cluster back.
"""

from __future__ import annotations

import time
from typing import Mapping

from crhelper.store.base import StoreError
from crhelper.store.s3 import MAX_RACE_ROUNDS, S3Store

from .state import MAX_JOURNAL, STORE_ENV, ClusterRecord

ROOT = "appcenter/clusters"


class S3ClusterStore:
    """Clusters under a bucket prefix (the same calls as `SqliteClusterStore`)."""

    def __init__(self, objects: S3Store, path: str = "") -> None:
        self.objects = objects
        #: Where it is, for messages (`s3://bucket/prefix`), never the URL's query.
        self.path = path

    def _dir(self, cluster_id: str) -> str:
        return self.objects.log_dir(ROOT, cluster_id)

    def get(self, cluster_id: str) -> ClusterRecord | None:
        doc = self.objects.head(self._dir(cluster_id)).doc
        if doc is None or doc.get("removed") or not isinstance(doc.get("cluster"), dict):
            return None
        return ClusterRecord.from_json(doc["cluster"])

    def _advance(self, cluster_id: str, doc: dict[str, object], over_tombstone: bool) -> None:
        for _ in range(MAX_RACE_ROUNDS):
            head = self.objects.head(self._dir(cluster_id))
            if head.doc is not None and head.doc.get("removed") and not over_tombstone:
                return  # removed: a late checkpoint of its last operation must not bring it back
            if self.objects.advance_log(self._dir(cluster_id), head.seq + 1, doc):
                return
        raise StoreError(f"the state of cluster {cluster_id} kept changing while it was written")

    def save(self, record: ClusterRecord) -> None:
        record.updated = time.time()
        del record.journal[:-MAX_JOURNAL]
        self._advance(record.cluster_id, {"cluster": record.to_json()}, over_tombstone=False)

    def remove(self, cluster_id: str) -> None:
        self._advance(cluster_id, {"removed": True}, over_tombstone=True)

    def list(self) -> list[ClusterRecord]:
        root = self.objects.log_dir(ROOT, "")[:-1]
        ids = sorted({key[len(root):].split("/", 1)[0] for key in self.objects.list_keys(root)} - {""})
        return [record for record in (self.get(cluster_id) for cluster_id in ids) if record is not None]


def open_s3_cluster_store(url: str, env: Mapping[str, str] | None = None) -> S3ClusterStore:
    """`s3://bucket/prefix?endpoint=…&region=…` (the parameters of CRHELPER_STORE) -> the store."""
    from crhelper.store.s3_client import client_for_url

    client, settings = client_for_url(url, STORE_ENV, env)
    return S3ClusterStore(S3Store(client, settings.bucket, settings.prefix),
                          f"s3://{settings.bucket}/{settings.prefix}")
