"""The code a deploy uploads: a given zip, or one `crhelper package` builds, with its FC checksum."""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..packaging import PackagingError
from ..packaging.checksums import crc64
from . import DeployError


@dataclass(frozen=True)
class Code:
    data: bytes
    checksum: str  # FC's codeChecksum: CRC-64 in decimal
    handler: str
    provider_env: str  # the CRHELPER_PROVIDER value that loads the provider from the zip's root
    origin: str
    warnings: tuple[str, ...] = ()


def _search_path() -> tuple[str, ...]:
    return tuple([os.getcwd(), *sys.path])


def from_zip(path: Path, spec: str) -> Code:
    """`path` as built by `crhelper package` (handler index.handler) for the provider `spec`."""
    from ..packaging.plan import locate_provider
    from ..packaging.targets import HANDLER

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DeployError(f"cannot read --zip {path}: {exc.strerror or exc}", "give the zip `crhelper package` wrote") from None
    try:
        provider_env = locate_provider(spec, _search_path()).provider_env
    except PackagingError as exc:
        raise DeployError(exc.problem, exc.next_step) from None
    return Code(data, str(crc64(data)), HANDLER, provider_env, str(path))


def build(spec: str, runtime_name: str, extras: tuple[str, ...] = (), find_links: tuple[str, ...] = (),
          no_index: bool = False, bytecode: bool = True) -> Code:
    """Build the package as `crhelper package` does, into a temporary file."""
    from ..packaging.build import PackageOptions
    from ..packaging.build import build as build_package
    from ..packaging.targets import runtime

    with tempfile.TemporaryDirectory(prefix="crhelper-deploy-") as work:
        output = Path(work) / "code.zip"
        try:
            result = build_package(PackageOptions(spec=spec, runtime=runtime(runtime_name), output=output,
                                                  extras=extras, find_links=find_links, no_index=no_index,
                                                  bytecode=bytecode, search_path=_search_path()))
        except PackagingError as exc:
            raise DeployError(exc.problem, exc.next_step) from None
        data = output.read_bytes()
    return Code(data, str(result.crc64), result.handler, result.environment["CRHELPER_PROVIDER"],
                f"built for {result.runtime}", tuple(result.warnings))
