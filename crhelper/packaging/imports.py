"""Which of this library's development-only modules a package needs: read from the source with `ast`.

The `crhelper` package holds the command line, the stack emulator, the local cloud endpoints (and
the local ROS over them), packaging and deploying, and the contract suite beside what runs on FC;
none of those runs there, so they are left out unless shipped code imports them (anywhere, a deferred import inside a function too: the built-in
providers' local backends import `crhelper.local.supervisor`). Names built at run time
(`importlib.import_module(text)`) are not seen; the development-only parts never are reached that way.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

#: Parts of `crhelper` left out of a code package unless shipped code imports them.
DEVELOPMENT_ONLY = ("crhelper.cli", "crhelper.emulator", "crhelper.local", "crhelper.contract", "crhelper.packaging",
                    "crhelper.deploy", "crhelper.ros", "crhelper.testing", "crhelper.pytest_plugin")


#: Modules a shipped module starts as `python -m NAME` (a name in a string, which no import
#: statement shows): they ship with it. The boot-group and cluster backends' supervisor starts its daemon.
LAUNCHED_MODULES = {"crhelper.local.supervisor": ("crhelper.local.supervisor_daemon",)}


def module_name(archive_name: str) -> str:
    """`crhelper/local/processes.py` -> `crhelper.local.processes`; a package's `__init__.py` names the package."""
    parts = archive_name[:-3].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(source: bytes, module: str, is_package: bool) -> set[str]:
    """Every absolute module name an import statement in `source` may load (relative ones resolved)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                parts = package.split(".")
                if node.level - 1 > len(parts):
                    continue
                base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _development_only(name: str) -> bool:
    return any(name == part or name.startswith(part + ".") for part in DEVELOPMENT_ONLY)


def needed_library(library: Mapping[str, Path], shipped: Iterable[tuple[str, Path]]) -> dict[str, Path]:
    """The part of `library` (archive name -> file) a package needs: everything but the development-only
    modules, plus those the shipped files (`shipped` and the kept library) import, transitively,
    with their parent packages' `__init__.py`."""
    by_module = {module_name(name): name for name in library if name.endswith(".py")}
    kept = {name: path for name, path in library.items()
            if not (name.endswith(".py") and _development_only(module_name(name)))
            and not any(name.startswith(p.replace(".", "/") + "/") for p in DEVELOPMENT_ONLY)}
    queue = list(shipped) + [(name, path) for name, path in kept.items() if name.endswith(".py")]
    seen = {name for name, _ in queue}
    while queue:
        name, path = queue.pop()
        if not name.endswith(".py"):
            continue
        module = module_name(name)
        for imported in (*imported_names(path.read_bytes(), module, name.endswith("/__init__.py")),
                         *LAUNCHED_MODULES.get(module, ())):
            parts = imported.split(".")
            for end in range(1, len(parts) + 1):
                archive = by_module.get(".".join(parts[:end]))
                if archive is not None and archive not in seen:
                    seen.add(archive)
                    kept[archive] = library[archive]
                    queue.append((archive, library[archive]))
    return kept
