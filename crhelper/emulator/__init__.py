"""Local ROS stack emulator: runs ROS templates' custom resources through injected delivery."""

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
