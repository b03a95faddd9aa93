"""Child of bench/package_coldstart.py: plays Function Compute's Python runtime for one cold start.

`python -s _package_child.py SPEC_JSON RESULT_JSON`, run by the target interpreter of an empty venv,
with PYTHONDONTWRITEBYTECODE=1 and the code folder read-only. Like FC: the code folder first on
sys.path and the working directory, a stdout log handler on the root logger, `index.handler`
imported and called once with the event as JSON bytes and an FC-shaped context. Stdlib only; this
file's own folder is taken off sys.path (once the stand-in context is imported from `_child`) so
nothing else of the bench is importable.
"""

import sys
import time

STARTED = time.perf_counter()
from _child import FcContext, peak_rss_kib  # noqa: E402 - the one stand-in context (stdlib only)

del sys.path[0]  # the bench folder

import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402


def main(spec_path: str, result_path: str) -> int:
    with open(spec_path, encoding="utf-8") as stream:
        spec = json.load(stream)
    code = spec["code_dir"]
    sys.path.insert(0, code)
    os.chdir(code)
    handler_stream = logging.StreamHandler(sys.stdout)
    handler_stream.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.getLogger().addHandler(handler_stream)
    event = json.dumps(spec["event"]).encode()
    before = time.perf_counter()
    import importlib

    module_name, _, attribute = spec["handler"].partition(".")
    handler = getattr(importlib.import_module(module_name), attribute)
    imported = time.perf_counter()
    handler(event, FcContext(spec["event"]["RequestId"], 60.0))
    done = time.perf_counter()
    with open(result_path, "w", encoding="utf-8") as stream:
        json.dump({"startup_s": before - STARTED, "import_s": imported - before, "handle_s": done - imported,
                   "peak_rss_kib": peak_rss_kib(), "cache_tag": sys.implementation.cache_tag}, stream)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
