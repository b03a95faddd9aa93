"""The functions every local FC test server registers (shared by conftest and tests)."""
from __future__ import annotations

SERVICE = "svc"
H = "fc_local_handlers"

FUNCTIONS: dict[str, dict[str, object]] = {
    "echo": {"handler": f"{H}.echo"},
    "str": {"handler": f"{H}:returns_str"},
    "dict": {"handler": f"{H}:returns_dict"},
    "none": {"handler": f"{H}:returns_none"},
    "unserializable": {"handler": f"{H}:returns_unserializable"},
    "describe": {"handler": f"{H}:describe", "timeout": 7, "memory": 256,
                 "env": {"GREETING": "hi there", "STAGE": "test"}},
    "boom": {"handler": f"{H}:boom"},
    "exits": {"handler": f"{H}:exits"},
    "sleeper": {"handler": f"{H}:sleeper", "timeout": 1},
    "touch": {"handler": f"{H}:touch"},
    "fail_times": {"handler": f"{H}:fail_times"},
    "noisy": {"handler": f"{H}:noisy"},
    "self_invoke": {"handler": f"{H}:self_invoke"},
    "initialized": {"handler": f"{H}:initialized", "initializer": f"{H}:init"},
    "bad_init": {"handler": f"{H}:initialized", "initializer": f"{H}:bad_init"},
    "missing_module": {"handler": "fc_local_no_such_module.handler"},
    "broken_module": {"handler": "fc_local_broken.handler"},
    "missing_attr": {"handler": f"{H}:no_such_handler"},
}
