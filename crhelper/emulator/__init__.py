"""Local ROS stack emulator: runs ROS templates' custom resources through injected delivery.

The names below load on first use (PEP 562): a process that needs one submodule, such as a local FC
instance importing `crhelper.emulator.delivery_fc_handler`, does not pay for the whole emulator.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .emulator import DEFAULT_ACCOUNT_ID, DEFAULT_REGION, EventCallback, Operation, PreparedOperation, StackEmulator
    from .errors import (
        EmulatorError,
        ResolutionError,
        StackNotFoundError,
        StackStateError,
        TemplateValidationError,
        UnknownResourceError,
    )
    from .model import OutputDescription, ResourceDescription, StackDescription, StackEvent
    from .parameters import load_parameter_file, parse_key_values
    from .protocol import Deliverer
    from .template import load_template

_HOMES = {
    "DEFAULT_ACCOUNT_ID": "emulator", "DEFAULT_REGION": "emulator", "EventCallback": "emulator",
    "Operation": "emulator", "PreparedOperation": "emulator", "StackEmulator": "emulator",
    "EmulatorError": "errors", "ResolutionError": "errors", "StackNotFoundError": "errors",
    "StackStateError": "errors", "TemplateValidationError": "errors", "UnknownResourceError": "errors",
    "OutputDescription": "model", "ResourceDescription": "model", "StackDescription": "model", "StackEvent": "model",
    "load_parameter_file": "parameters", "parse_key_values": "parameters",
    "Deliverer": "protocol", "load_template": "template",
}

__all__ = [
    "DEFAULT_ACCOUNT_ID",
    "DEFAULT_REGION",
    "Deliverer",
    "EmulatorError",
    "EventCallback",
    "Operation",
    "OutputDescription",
    "PreparedOperation",
    "ResolutionError",
    "ResourceDescription",
    "StackDescription",
    "StackEmulator",
    "StackEvent",
    "StackNotFoundError",
    "StackStateError",
    "TemplateValidationError",
    "UnknownResourceError",
    "load_parameter_file",
    "load_template",
    "parse_key_values",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
