"""Finding a provider from the command line: `package.module:provider` or `path/to/file.py:provider`."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from ..fc import ProviderSpecError, load_provider


def provider_from_spec(spec: str) -> Any:
    """Load a provider; the current directory is importable, as users expect from a CLI."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    location, sep, attribute = spec.rpartition(":")
    if sep and location.endswith(".py"):
        path = Path(location)
        if not path.is_file():
            raise ProviderSpecError(f"no such file: {location}")
        module_name = f"crhelper_user_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise ProviderSpecError(f"cannot import {location}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        module_spec.loader.exec_module(module)
        provider = getattr(module, attribute or "provider", None)
        if provider is None or not hasattr(provider, "handle"):
            raise ProviderSpecError(f"{location} has no crhelper Provider named {attribute or 'provider'!r}")
        return provider
    return load_provider(spec)
