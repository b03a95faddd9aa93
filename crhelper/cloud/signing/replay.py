"""A bounded, thread-safe memory of what was accepted recently, to refuse the same thing twice.

One home for replay refusal: the `web:` endpoint's SignKey signatures and MNS pushes
(`crhelper.transports.signature`, `crhelper.mns_push`) and the signature nonces of the Alibaba
schemes (`acs3`, `rpc`: `x-acs-signature-nonce` / `SignatureNonce`) all use it. Entries live for the
freshness window and the oldest go first when the cache is full: a flood of valid requests can then
push a nonce out early, a trade-off every bounded nonce store makes; size it above the request rate
times the window.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable


class ReplayCache:
    """Keys accepted within the freshness window, bounded (oldest first out), thread-safe.

    `claim` is check-and-remember in one step; `release` forgets a claim whose request was then
    refused for a retryable reason, so the sender may send it again unchanged."""

    def __init__(self, window: float, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1:
            raise ValueError("ReplayCache.max_entries must be at least 1")
        self._window = window
        self._max = max_entries
        self._clock = clock
        self._seen: OrderedDict[tuple[str, ...], float] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)

    def _expire(self, now: float) -> None:
        while self._seen:
            key, expires = next(iter(self._seen.items()))
            if expires > now:
                break
            del self._seen[key]

    def claim(self, key: tuple[str, ...]) -> bool:
        """True and remembered if `key` was not seen within the window; False for a replay."""
        now = self._clock()
        with self._lock:
            self._expire(now)
            if key in self._seen:
                return False
            self._seen[key] = now + self._window
            while len(self._seen) > self._max:
                self._seen.popitem(last=False)
            return True

    def release(self, key: tuple[str, ...]) -> None:
        with self._lock:
            self._seen.pop(key, None)


def nonce_cache(max_skew: float, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic) -> ReplayCache:
    """A cache for signature nonces: a request dated up to `max_skew` ahead stays acceptable for
    `2 * max_skew` after it is first seen, so its nonce is remembered that long."""
    return ReplayCache(2 * max_skew, max_entries, clock)
