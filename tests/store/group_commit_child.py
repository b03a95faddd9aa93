"""Child-process body for the group-commit durability tests: many threads claim keys on one
SqliteStore and print `ack <request id>` the moment each claim returns (the caller's acknowledgement).

    python group_commit_child.py <db path> <prefix> <threads> <per-thread claims>

Prints `started` once every thread is running. The parent SIGKILLs it at some point and checks, from
another process, that every acknowledged claim is stored."""

from __future__ import annotations

import sys
import threading

from crhelper.store import IdempotencyKey
from crhelper.store.sqlite import SqliteStore

STACK = "arn:acs:ros:cn-hangzhou:1:stacks/s/group-commit"
_print = threading.Lock()


def say(line: str) -> None:
    with _print:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> None:
    path, prefix, threads, claims = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = SqliteStore(path)

    def claim_many(thread: int) -> None:
        for n in range(claims):
            request_id = f"{prefix}-{thread}-{n}"
            result = store.claim(IdempotencyKey(STACK, request_id, "Res"), f"owner-{request_id}", lease_seconds=600)
            if result.owns:
                say(f"ack {request_id}")

    workers = [threading.Thread(target=claim_many, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    say("started")
    for worker in workers:
        worker.join()
    say("done")


if __name__ == "__main__":
    main()
