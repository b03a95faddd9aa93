"""Handler for test_fc_local_dispatch: reports what was imported before this module's own imports ran.
It imports `wave` (a library the fork server should pre-import) and a sibling module of its own (which
must be imported in the instance, not the fork server)."""
from __future__ import annotations

import json
import os
import sys

WAVE_PRELOADED = "wave" in sys.modules  # read before this module's own `import wave`
HANDLER_PID = os.getpid()

import wave  # noqa: E402 - the library under test

import fc_local_preload_sibling  # noqa: E402 - the function's own module


def handler(event: bytes, context: object) -> str:
    return json.dumps({"pid": os.getpid(), "wave_preloaded": WAVE_PRELOADED, "handler_pid": HANDLER_PID,
                       "sibling_pid": fc_local_preload_sibling.IMPORTED_IN, "library": wave.__name__})
