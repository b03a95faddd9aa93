"""Build one code package: locate the provider, install its dependencies for the target, compile
bytecode with the target interpreter, write the deterministic zip, and say what it is."""

from __future__ import annotations

import io
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..paths import write_atomically
from . import PackagingError
from . import pip as pip_runner
from .bytecode import compile_sources, failures_text, target_interpreter
from .checksums import digests
from .imports import needed_library
from .limits import FC_UPLOAD_LIMIT, base64_size, fits_inline, size_warnings
from .plan import INDEX_NAME, INDEX_SOURCE, dependency_files, locate_provider, merge, requirements_for, tree_files
from .targets import HANDLER, Runtime
from .wheels import InstalledWheel, check_tags, installed_wheels
from .zipfile_writer import Entry, write_zip

DISTRIBUTION = "ros-crhelper"


@dataclass(frozen=True)
class PackageOptions:
    """What `crhelper package` was asked for."""

    spec: str
    runtime: Runtime
    output: Path
    extras: tuple[str, ...] = ()
    requirement_files: tuple[Path, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False
    bytecode: bool = True
    search_path: tuple[str, ...] = ()
    upload_limit: int = FC_UPLOAD_LIMIT


@dataclass
class PackageResult:
    """The package written and how to deploy it."""

    output: Path
    runtime: str
    size: int
    sha256: str
    crc64: int
    files: int
    handler: str
    environment: dict[str, str]
    requirements: list[str]
    wheels: list[InstalledWheel]
    bytecode: str | None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"output": str(self.output), "runtime": self.runtime, "size": self.size, "sha256": self.sha256,
                "crc64": str(self.crc64), "files": self.files, "handler": self.handler,
                "environment": self.environment, "requirements": self.requirements,
                "wheels": [w.to_dict() for w in self.wheels], "bytecode": self.bytecode,
                "inline": {"base64_bytes": base64_size(self.size), "fits_ros_template": fits_inline(self.size)},
                "warnings": self.warnings}


def library_requires() -> list[str]:
    """This library's Requires-Dist, from its installed metadata."""
    from importlib import metadata

    try:
        return list(metadata.distribution(DISTRIBUTION).requires or [])
    except metadata.PackageNotFoundError:
        raise PackagingError(f"the {DISTRIBUTION} distribution's metadata is not installed, so its dependencies "
                             "are unknown", "pip install -e . (or pip install ros-crhelper)") from None


def library_files() -> dict[str, Path]:
    """This library's `crhelper` package, as installed (the source of an editable install)."""
    root = Path(__file__).resolve().parents[1]
    return tree_files(root, "crhelper")


def build(options: PackageOptions) -> PackageResult:
    """Build the package `options` describe; PackagingError for anything the user can fix."""
    runtime = options.runtime
    source = locate_provider(options.spec, options.search_path or tuple([os.getcwd(), *sys.path]))
    requirements = requirements_for(library_requires(), options.extras)
    for file in options.requirement_files:
        if not file.is_file():
            raise PackagingError(f"no such requirements file: {file}", "give --requirements an existing file")
    warnings: list[str] = []
    with tempfile.TemporaryDirectory(prefix="crhelper-package-") as work:
        target = Path(work) / "site"
        target.mkdir()
        pip_runner.install(target, runtime, requirements, options.requirement_files, options.find_links,
                           options.no_index)
        wheels = installed_wheels(target)
        check_tags(wheels, runtime)
        library = needed_library(library_files(), source.files.items())
        # The provider's and the library's files may be edited while this runs: zip and compile one
        # copy of them, or an unchecked-hash .pyc could disagree with the .py beside it.
        snapshot = _snapshot({**source.files, **library}, Path(work) / "snapshot")
        groups = {f"provider {options.spec}": {n: snapshot[n] for n in source.files},
                  "the crhelper library": {n: snapshot[n] for n in library},
                  "the dependencies": dependency_files(target)}
        sources = {name: path for files in groups.values() for name, path in files.items()}
        entries = merge(groups)
        if INDEX_NAME in entries:
            raise PackagingError(f"the provider ships a file named {INDEX_NAME}",
                                 "rename that module: the package's handler is index.handler")
        entries[INDEX_NAME] = Entry(data=INDEX_SOURCE)
        bytecode = None
        interpreter = target_interpreter(runtime) if options.bytecode else None
        if interpreter is not None:
            index_file = Path(work) / INDEX_NAME
            index_file.write_bytes(INDEX_SOURCE)
            compiled = compile_sources({**sources, INDEX_NAME: index_file}, Path(work) / "bytecode", runtime, interpreter)
            entries.update({name: Entry(source=path) for name, path in compiled.files.items()})
            bytecode = f"{runtime.bytecode_tag} ({interpreter})"
            if compiled.failed:
                warnings.append(f"{len(compiled.failed)} source file(s) do not compile for {runtime.name}; shipped "
                                f"without bytecode: {failures_text(compiled.failed)}")
        elif options.bytecode:
            warnings.append(f"python{runtime.version} is not on this machine (PATH, pyenv): source only, so each cold "
                            f"start on FC compiles what it imports; install Python {runtime.version} to ship bytecode")
        buffer = io.BytesIO()
        write_zip(entries, buffer)
    data = buffer.getvalue()
    sha256, crc = digests(io.BytesIO(data))
    write_atomically(options.output, data, mode=0o644)  # a package is no secret: readable by others
    warnings += size_warnings(len(data), options.upload_limit)
    return PackageResult(options.output, runtime.name, len(data), sha256, crc, len(entries), HANDLER,
                         {"CRHELPER_PROVIDER": source.provider_env}, requirements, wheels, bytecode, warnings)


def _snapshot(files: dict[str, Path], folder: Path) -> dict[str, Path]:
    """Copy `files` (archive name -> file) under `folder`, keeping only whether each is executable."""
    copied = {}
    for name, path in files.items():
        copy = folder / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(path.read_bytes())
        if os.stat(path).st_mode & 0o111:
            copy.chmod(0o755)
        copied[name] = copy
    return copied
