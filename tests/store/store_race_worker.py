"""Child-process body for the race tests (a module, so `spawn` children can import it)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from crhelper.store import IdempotencyKey, open_store


def race(
    url: str,
    env: Mapping[str, str],
    key_parts: tuple[str, str, str],
    continuation_id: str,
    barrier: Any,
    results: Any,
) -> None:
    """Claim the same key and advance the same continuation at the same moment as the others."""
    store = open_store(url, env=dict(env))
    try:
        owner = f"pid-{os.getpid()}"
        barrier.wait(timeout=30)
        claim = store.claim(IdempotencyKey(*key_parts), owner, lease_seconds=60)
        seen = store.get_continuation(continuation_id)
        assert seen is not None
        barrier.wait(timeout=30)  # everybody has read the same version before anybody writes
        advanced = dataclasses.replace(seen, state={"advanced_by": owner}, attempt=seen.attempt + 1)
        won_cas = store.update_continuation(advanced, expected_version=seen.version)
        results.put((owner, claim.status.value, won_cas))
    except BaseException as exc:  # report instead of dying silently
        results.put(("error", repr(exc), False))
    finally:
        store.close()
