"""Fixtures for the queue worker tests: a LocalMNS account, fresh queues, workers stopped in teardown."""

from __future__ import annotations

import uuid
from typing import Any, Callable, Iterator

import pytest
from mns.queue import QueueMeta

from crhelper import Provider
from crhelper.local.mns_server import LocalMNS
from crhelper.transports.mns_worker import QueueWorker


@pytest.fixture(scope="module")
def local_mns() -> Iterator[LocalMNS]:
    with LocalMNS(retry_time_scale=0.005) as mns:
        yield mns


@pytest.fixture()
def name() -> str:
    """A fresh queue/topic name so tests sharing one LocalMNS never collide."""
    return "w-" + uuid.uuid4().hex[:12]


@pytest.fixture()
def make_queue(local_mns: LocalMNS) -> Callable[..., Any]:
    """Create a queue (base64 encoding off unless asked) and return its SDK client."""

    def make(queue_name: str, *, encoding: bool = False, visibility: int | None = None) -> Any:
        queue = local_mns.account().get_queue(queue_name)
        queue.set_encoding(encoding)
        queue.create(QueueMeta(vis_timeout=visibility) if visibility else QueueMeta())
        return queue

    return make


@pytest.fixture()
def store_url(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'state.sqlite'}"
    monkeypatch.setenv("CRHELPER_STORE", url)
    return url


@pytest.fixture()
def start_worker(local_mns: LocalMNS) -> Iterator[Callable[..., QueueWorker]]:
    """Start a QueueWorker on a LocalMNS queue with quick polling; every one is stopped in teardown."""
    workers: list[QueueWorker] = []

    def start(provider: Provider, queue_name: str, **kw: Any) -> QueueWorker:
        options: dict[str, Any] = {"wait_seconds": 1, "visibility_timeout": 30, "grace": 5.0}
        options.update(kw)
        worker = QueueWorker(
            provider, endpoint=local_mns.endpoint, queue=queue_name,
            access_key_id=local_mns.access_key_id, access_key_secret=local_mns.access_key_secret, **options,
        )
        workers.append(worker)
        return worker.start()

    yield start
    for worker in workers:
        worker.stop(grace=2.0)

