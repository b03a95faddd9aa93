"""Which files a code package holds, and under which names: pure decisions over paths.

Layout (deploy.md §2.3): everything at the zip root, so FC 2.0 and 3.0 import it with no
PYTHONPATH: the generated `index.py` (handler `index.handler`), the provider's module (a file
spec ships that one file; a module spec ships its whole top-level package), this library's
`crhelper` package, and what pip installed for the target. Left out: `__pycache__` and `*.pyc`
of the build machine, hidden files and folders, pip's `bin/` (console scripts whose `#!` names the
build machine's interpreter; FC never runs them), and two dist-info files that differ between
builds of the same wheels: `RECORD` (lists install paths and is rewritten by every installer; its
only reader is `pip uninstall`, which never runs in a read-only code folder: dropped rather than
normalised) and `direct_url.json` (the absolute path or URL a wheel came from).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import PackagingError
from .zipfile_writer import Entry, file_entry

INDEX_NAME = "index.py"
INDEX_SOURCE = (
    b'"""Function Compute entry written by `crhelper package`: handler index.handler, provider from CRHELPER_PROVIDER."""\n'
    b"from crhelper.fc import handler  # noqa: F401\n"
)
#: dist-info files that change between two installs of the same wheel (see the module docstring).
UNSTABLE_METADATA = ("RECORD", "direct_url.json")
_EXTRA_MARKER = re.compile(r"""^\s*extra\s*==\s*["']([^"']+)["']\s*$""")


@dataclass(frozen=True)
class ProviderSource:
    """Where a provider's code is and the `CRHELPER_PROVIDER` value that loads it from the zip root."""

    files: dict[str, Path]
    provider_env: str
    origin: str


def _skipped(part: str) -> bool:
    return part == "__pycache__" or part.startswith(".")


def tree_files(root: Path, prefix: str) -> dict[str, Path]:
    """Archive name -> file for a folder's files under `prefix/`, build-machine leftovers excluded."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(_skipped(part) for part in relative.parts) or path.suffix in (".pyc", ".pyo") or not path.is_file():
            continue
        found[f"{prefix}/{relative.as_posix()}" if prefix else relative.as_posix()] = path
    return found


def dependency_files(target: Path) -> dict[str, Path]:
    """What `pip install --target` left in `target`, less `bin/` and the unstable dist-info files."""
    found = {}
    for name, path in tree_files(target, "").items():
        parts = name.split("/")
        if parts[0] == "bin":
            continue
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] in UNSTABLE_METADATA:
            continue
        found[name] = path
    return found


def locate_provider(spec: str, search_path: Sequence[str]) -> ProviderSource:
    """The files of the provider `spec` names (see `crhelper.loading.parse_spec`), found without importing it."""
    from ..loading import ProviderSpecError, parse_spec

    try:
        location, attribute, is_file = parse_spec(spec)
    except ProviderSpecError as exc:
        raise PackagingError(exc.problem, exc.next_step) from None
    if is_file:
        path = Path(location)
        if not path.is_file():
            raise PackagingError(f"no such file: {location}", "give the path of the provider's .py file")
        if not path.stem.isidentifier():
            raise PackagingError(f"{path.name} cannot be imported by that name on FC",
                                 "rename it to a valid Python module name (letters, digits, _)")
        return ProviderSource({path.name: path}, f"{path.stem}:{attribute}", str(path))
    top = location.split(".")[0]
    found = importlib.machinery.PathFinder.find_spec(top, list(search_path))
    if found is None:  # an editable install's meta-path finder (pip install -e): a top-level name imports nothing
        found = importlib.util.find_spec(top)
    if found is None or found.origin in (None, "built-in", "frozen") and not found.submodule_search_locations:
        raise PackagingError(f"module {top!r} of provider {spec!r} is not found on the search path",
                             "run from the folder that holds it, or give a file path: path/to/file.py:provider")
    if found.submodule_search_locations:
        folder = Path(list(found.submodule_search_locations)[0])
        files = tree_files(folder, top)
        module_file = "/".join(location.split(".")[1:])
        if location != top and f"{top}/{module_file}.py" not in files and f"{top}/{module_file}/__init__.py" not in files:
            raise PackagingError(f"module {location!r} is not in {folder}", "check the provider spec")
        return ProviderSource(files, f"{location}:{attribute}", str(folder))
    assert found.origin is not None
    origin = Path(found.origin)
    if origin.suffix != ".py":
        raise PackagingError(f"module {top!r} is {origin}, not Python source", "give the provider's .py file")
    return ProviderSource({f"{top}.py": origin}, f"{location}:{attribute}", str(origin))


def requirements_for(requires: Iterable[str], extras: Sequence[str]) -> list[str]:
    """The distribution's base requirements plus those of `extras`, in order, without repeats.

    `requires` are Requires-Dist strings; a marker other than `extra == "..."` is passed on to pip
    (which evaluates it for the target). An unknown extra is a PackagingError listing the known ones."""
    base: list[str] = []
    by_extra: dict[str, list[str]] = {}
    for text in requires:
        requirement, _, marker = text.partition(";")
        match = _EXTRA_MARKER.match(marker) if marker else None
        if match:
            by_extra.setdefault(match.group(1), []).append(requirement.strip())
        elif "extra" in marker:
            raise PackagingError(f"requirement {text!r} has a marker crhelper package cannot read",
                                 "write extra markers as: extra == \"name\"")
        else:
            base.append(text.strip())
    unknown = [e for e in extras if e not in by_extra]
    if unknown:
        raise PackagingError(f"no extra named {', '.join(map(repr, unknown))} (known: {', '.join(sorted(by_extra))})",
                             "give --extra one of the known names")
    chosen: list[str] = []
    for requirement in base + [r for extra in extras for r in by_extra[extra]]:
        if requirement not in chosen:
            chosen.append(requirement)
    return chosen


def merge(groups: Mapping[str, Mapping[str, Path]]) -> dict[str, Entry]:
    """One entry per archive name from labelled groups of files; a name two groups claim is an error
    (a provider module called like a dependency would shadow it on FC)."""
    merged: dict[str, Entry] = {}
    owner: dict[str, str] = {}
    for label, files in groups.items():
        for name, path in files.items():
            if name in owner:
                raise PackagingError(f"{name} comes from both {owner[name]} and {label}",
                                     "rename the provider's module so it does not shadow a dependency")
            owner[name] = label
            merged[name] = file_entry(path)
    return merged


def bytecode_name(source_name: str, cache_tag: str) -> str:
    """`pkg/mod.py` -> `pkg/__pycache__/mod.cpython-312.pyc`, where the target interpreter looks for it."""
    folder, _, file_name = source_name.rpartition("/")
    cached = f"__pycache__/{file_name[:-3]}.{cache_tag}.pyc"
    return f"{folder}/{cached}" if folder else cached
