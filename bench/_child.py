"""Child process of bench/cold_warm.py: plays the function runtime for one contender.

`python bench/_child.py SPEC_JSON RESULT_JSON`. Imports the contender's handler (`module:attr` from
the spec, with the spec's directory put on sys.path), calls it on each event with a stand-in
runtime context, and writes timings to RESULT_JSON. Stdlib only, and imports nothing a contender
would not: this file runs in each contender's own virtual environment.
"""

import json
import logging
import sys
import time

STARTED = time.perf_counter()


class LambdaContext:
    """What the AWS Lambda Python runtime passes; AWS crhelper reads the remaining time and the name."""

    def __init__(self, request_id: str, timeout_s: float) -> None:
        self._deadline = time.monotonic() + timeout_s
        self.function_name = "bench-greeting"
        self.function_version = "$LATEST"
        self.invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench-greeting"
        self.memory_limit_in_mb = "128"
        self.aws_request_id = request_id
        self.log_group_name = "/aws/lambda/bench-greeting"
        self.log_stream_name = "2026/01/01/[$LATEST]bench"

    def get_remaining_time_in_millis(self) -> int:
        return int(max(0.0, self._deadline - time.monotonic()) * 1000)


class _FcFunction:
    def __init__(self, timeout_s: float) -> None:
        self.name = "bench-greeting"
        self.handler = "index.handler"
        self.memory = 128
        self.timeout = timeout_s


class FcContext:
    """The shape of Alibaba Cloud Function Compute's context: the function timeout is in `function`."""

    def __init__(self, request_id: str, timeout_s: float) -> None:
        self.request_id = request_id
        self.function = _FcFunction(timeout_s)
        self.region = "cn-hangzhou"
        self.account_id = "123456789"
        self.credentials = None
        self.service = None


def make_context(kind: str, request_id: str, timeout_s: float) -> object | None:
    if kind == "lambda":
        return LambdaContext(request_id, timeout_s)
    if kind == "fc":
        return FcContext(request_id, timeout_s)
    return None


def install_runtime_log_handler() -> None:
    """Both Lambda's and FC's Python runtimes put a stdout handler on the root logger before user code."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(message)s", "%Y-%m-%dT%H:%M:%S"))
    logging.getLogger().addHandler(handler)


def load_handler(spec: dict):  # type: ignore[no-untyped-def]
    import importlib

    sys.path.insert(0, spec["module_dir"])
    module_name, _, attribute = spec["handler"].partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def peak_rss_kib() -> int:
    """VmHWM of this process's own address space. Unlike wait4's ru_maxrss it does not inherit the
    high-water mark of the process that spawned us (Linux carries that across fork/vfork + exec)."""
    with open("/proc/self/status", encoding="ascii") as stream:
        for line in stream:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def main(spec_path: str, result_path: str) -> int:
    with open(spec_path, encoding="utf-8") as stream:
        spec = json.load(stream)
    install_runtime_log_handler()
    before_import = time.perf_counter()
    handler = load_handler(spec)
    imported = time.perf_counter()
    events = spec["events"]
    warmup = int(spec.get("warmup", 0))
    kind, timeout_s = spec["context"], float(spec.get("function_timeout", 60))
    for event in events[:warmup]:
        handler(event, make_context(kind, event["RequestId"], timeout_s))
    cap_s = float(spec.get("max_loop_s", 0)) or float("inf")
    handled = 0
    loop_cpu_started = time.process_time()
    loop_started = time.perf_counter()
    for event in events[warmup:]:
        handler(event, make_context(kind, event["RequestId"], timeout_s))
        handled += 1
        if time.perf_counter() - loop_started > cap_s:
            break  # a slow contender's rate is known well before its last request
    finished = time.perf_counter()
    loop_cpu = time.process_time() - loop_cpu_started
    result = {
        "startup_to_main_s": before_import - STARTED,
        "import_s": imported - before_import,
        "requests": handled,
        "loop_s": finished - loop_started,
        "loop_cpu_s": loop_cpu,
        "peak_rss_kib": peak_rss_kib(),
    }
    with open(result_path, "w", encoding="utf-8") as stream:
        json.dump(result, stream)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
