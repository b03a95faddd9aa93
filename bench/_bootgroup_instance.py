"""One instance of the boot-group bench (`bench/bootgroups.py`): a tiny TCP server that listens on
$CRHELPER_INSTANCE_HOST:$CRHELPER_INSTANCE_PORT `BENCH_LISTEN_DELAY` seconds after its process was
spawned, and appends a JSON line with its own spawn and listening times (monotonic and wall clock)
to `$BENCH_TIMES_DIR/<instance id>.jsonl`, one line per start. Stdlib only: it runs with `-I -S`.

The spawn time is the kernel's (`/proc/self/stat` start time, in clock ticks since boot, rounded
down) plus one tick, capped at the moment this code runs: the latest moment the process can have
been spawned. The bench's ideal is built from it, so the rounding can only make the ideal
smaller, never flatter the boot group.
"""

from __future__ import annotations

import json
import os
import socket
import time


def spawned_at() -> tuple[float, float]:
    """(monotonic, wall) time this process was spawned, by the kernel's record (see above)."""
    now_boot, now_mono, now_wall = time.clock_gettime(time.CLOCK_BOOTTIME), time.monotonic(), time.time()
    with open("/proc/self/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    started = min(now_boot, int(fields[19]) * tick + tick)  # field 22, starttime
    ago = now_boot - started
    return now_mono - ago, now_wall - ago


def main() -> None:
    spawned_mono, spawned_wall = spawned_at()
    entered = time.monotonic()
    delay = float(os.environ.get("BENCH_LISTEN_DELAY", "1.0"))
    time.sleep(max(0.0, spawned_mono + delay - time.monotonic()))
    server = socket.create_server((os.environ["CRHELPER_INSTANCE_HOST"], int(os.environ["CRHELPER_INSTANCE_PORT"])),
                                  backlog=64)
    listening_mono, listening_wall = time.monotonic(), time.time()
    instance = os.environ["CRHELPER_INSTANCE_ID"]
    record = {"instance": instance, "pid": os.getpid(), "spawned_mono": spawned_mono, "spawned_wall": spawned_wall,
              "entered_mono": entered, "listening_mono": listening_mono, "listening_wall": listening_wall}
    with open(os.path.join(os.environ["BENCH_TIMES_DIR"], f"{instance}.jsonl"), "a") as times:
        times.write(json.dumps(record) + "\n")
    while True:
        connection, _ = server.accept()
        connection.close()


if __name__ == "__main__":
    main()
