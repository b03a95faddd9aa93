"""Which libraries a function's code imports, read from its source without running it.

The fork server (`crhelper.local.fc_fork`) imports these once, so a forked instance finds them in
memory instead of importing them on its first request (a provider importing `argparse` and
`statistics` paid ~10 ms of CPU per cold start for those two alone). Only **libraries** qualify:
top-level names whose module resolves under the interpreter's own folders (the standard library,
site-packages); a provider's own modules, and the provider's file itself, are never imported there,
as their import-time code must run once per instance, as on Function Compute. Only imports at the
module's top level count (and inside top-level `try`/`if`/`with`, but not `if TYPE_CHECKING:`):
an import inside a function is lazy on purpose. A library imported there sees the endpoint's
environment, not the function's (as with CRHELPER_FC_PRELOAD); CRHELPER_FC_PRELOAD_IMPORTS=false
turns this off (`crhelper.local.fc_runner`).
"""
from __future__ import annotations

import ast
import importlib.machinery
import os
import sys
import threading
from pathlib import Path
from typing import Callable, Iterator, Sequence

#: (path, mtime_ns, size) -> the top-level names imported at its top level.
_scanned: dict[tuple[str, int, int], tuple[str, ...]] = {}
#: (the sources' scan keys, the search path) -> the libraries among their imports: a burst of 50 cold
#: starts of one function resolves them once, not 50 times (~5 ms each).
_resolved: dict[tuple[tuple[tuple[str, int, int], ...], tuple[str, ...]], tuple[str, ...]] = {}
_lock = threading.Lock()


def _top_level_imports(tree: ast.Module) -> Iterator[str]:
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                yield node.module.split(".")[0]
        elif isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                pending.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            pending.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                pending.extend(handler.body)
        elif isinstance(node, ast.With):
            pending.extend(node.body)


def _scan_key(path: Path) -> tuple[str, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (str(path), stat.st_mtime_ns, stat.st_size)


def imported_names(path: Path) -> tuple[str, ...]:
    """Top-level module names a source file imports at its top level; () when unreadable."""
    key = _scan_key(path)
    if key is None:
        return ()
    with _lock:
        known = _scanned.get(key)
    if known is not None:
        return known
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        names: tuple[str, ...] = ()  # the instance reports a broken file precisely, on its first request
    else:
        names = tuple(dict.fromkeys(_top_level_imports(tree)))
    with _lock:
        _scanned[key] = names
    return names


def module_file(name: str, path: Sequence[str]) -> Path | None:
    """The source file of a (dotted) module on `path`, found without importing anything."""
    search: list[str] | None = list(path)
    found = None
    for part in name.split("."):
        found = importlib.machinery.PathFinder.find_spec(part, search)
        if found is None:
            return None
        search = list(found.submodule_search_locations or [])
    origin = getattr(found, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") else None


def library_imports(sources: Sequence[Path], path: Sequence[str], is_library: Callable[[str], bool]) -> list[str]:
    """The names `sources` import that resolve on `path` to a library (`is_library(origin)`); never
    a module beside the sources, nor one built into the interpreter (nothing to gain)."""
    keys = tuple(k for k in (_scan_key(source) for source in sources) if k is not None)
    cache_key = (keys, tuple(path))
    with _lock:
        known = _resolved.get(cache_key)
    if known is not None:
        return list(known)
    wanted = _resolve_libraries(sources, path, is_library)
    with _lock:
        _resolved[cache_key] = tuple(wanted)
    return wanted


def _resolve_libraries(sources: Sequence[Path], path: Sequence[str], is_library: Callable[[str], bool]) -> list[str]:
    own = tuple(str(source.parent.resolve()) + os.sep for source in sources)
    wanted: list[str] = []
    for source in sources:
        for name in imported_names(source):
            if name in wanted or name == "__future__":
                continue
            if name in sys.builtin_module_names:
                continue  # nothing to read from disk: already cheap
            spec = importlib.machinery.PathFinder.find_spec(name, list(path))
            origin = getattr(spec, "origin", None) if spec is not None else None
            if not origin or origin in ("built-in", "frozen"):
                continue
            if os.path.realpath(origin).startswith(own) or not is_library(origin):
                continue
            wanted.append(name)
    return wanted
