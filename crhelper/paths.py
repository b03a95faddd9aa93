"""Where crhelper keeps its state on this machine: one answer for every module.

`$CRHELPER_HOME`, else `~/.crhelper`. Resolving it never creates it: callers that write make their
own folder (`state_dir("router")`), so a read-only command leaves no trace.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

HOME_ENV = "CRHELPER_HOME"
DEFAULT_HOME = "~/.crhelper"


def home(env: Mapping[str, str] | None = None) -> Path:
    """The state home: `$CRHELPER_HOME` (user-expanded) or `~/.crhelper`."""
    configured = (os.environ if env is None else env).get(HOME_ENV)
    return Path(configured or DEFAULT_HOME).expanduser()


def state_dir(name: str, env: Mapping[str, str] | None = None, *, create: bool = False) -> Path:
    """A provider's or subsystem's own folder under the home (`router`, `bootgroups`, ...)."""
    path = home(env) / name
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` at once (a reader never sees half a file), created with `mode`
    (owner-only by default: state files may hold secrets). The folder is made when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(partial, mode)  # the umask may have narrowed it
        os.replace(partial, path)
    finally:
        if partial.exists():
            partial.unlink()
