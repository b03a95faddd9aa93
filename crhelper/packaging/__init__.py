"""`crhelper package`: reproducible Function Compute code packages (deploy.md §2).

Pure modules: `targets` (runtimes, pip's target options, wheel tags), `plan` (which files go where
in the zip), `zipfile_writer` (deterministic bytes), `checksums` (SHA-256, FC's CRC-64). I/O at the
edges: `pip` (the one pip subprocess), `bytecode` (the target interpreter compiling), `build`
(putting them together). Standard library only.
"""

from __future__ import annotations

from ..errors import ExplainedError


class PackagingError(ExplainedError):
    """A package that cannot be built: `problem` says what, `next_step` what to do."""
