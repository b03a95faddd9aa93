"""`crhelper package`: the parser (standard library only); the body is `crhelper.cli.package`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import Body, add_command, provider_argument

if TYPE_CHECKING:
    from . import SubParsers

#: Mirrors crhelper.packaging.targets.RUNTIMES (kept here so the parser imports nothing else).
RUNTIMES = ("python3.10", "python3.12")
DESCRIPTION = (
    "Build the Function Compute code package (a zip) for a provider: the provider's module, this\n"
    "library, and their dependencies installed by pip as manylinux2014 x86_64 wheels for the target\n"
    "runtime's Python version and ABI (binaries only: a dependency without such a wheel fails, named),\n"
    "with the extras an installed provider's manifest needs, --extra and --requirements for yours.\n\n"
    "The zip is reproducible: two builds of the same inputs give the same bytes (sorted entries,\n"
    "fixed dates and modes, nothing from the build machine's __pycache__; dist-info RECORD files are\n"
    "dropped). When the runtime's interpreter is on this machine (PATH or pyenv), bytecode compiled by\n"
    "it ships in __pycache__ (unchecked-hash .pyc, valid whatever the dates), so FC's read-only code\n"
    "folder does not cost a compile at each cold start; otherwise it says so and ships source only.\n\n"
    "Prints the size, SHA-256, the CRC-64 FC reports as codeChecksum, the handler (index.handler)\n"
    "and the CRHELPER_PROVIDER value to set on the function; warns past FC's 100 MB API upload limit\n"
    "and says whether the zip fits inline (Code.ZipFile) in a ROS template. Exit 0 when written,\n"
    "2 when it could not be built. With --json, stdout is one JSON document, for errors too."
)
EPILOG = """\
examples:
  crhelper package samples/greeting.py:provider --runtime python3.12 --output greeting.zip
  crhelper package samples/greeting_fast.py --extra fast --json
  crhelper package routes --runtime python3.10                        # a built-in provider, with its extras
  crhelper package mypkg.cluster:provider --requirements requirements.txt
  crhelper package mypkg.cluster:provider --no-index --find-links ./wheelhouse   # offline, from local wheels
"""


def register(subparsers: SubParsers) -> None:
    parser = add_command(subparsers, "package", "build a reproducible Function Compute code package (zip) for a provider",
                         DESCRIPTION, EPILOG)
    provider_argument(parser)
    parser.add_argument("--runtime", choices=RUNTIMES, default="python3.10", help="the FC runtime (default python3.10)")
    parser.add_argument("--output", type=Path, default=None, metavar="FILE.zip",
                        help="where to write the zip (default <module>-<runtime>.zip in the current folder)")
    parser.add_argument("--requirements", type=Path, action="append", default=[], metavar="FILE",
                        help="a pip requirements file of the provider's own dependencies (repeatable)")
    parser.add_argument("--extra", action="append", default=[], metavar="NAME",
                        help="an optional dependency group of ros-crhelper to include, e.g. fast (repeatable)")
    parser.add_argument("--find-links", action="append", default=[], metavar="DIR",
                        help="a folder (or URL) of wheels pip may use (repeatable)")
    parser.add_argument("--no-index", action="store_true", help="do not use a package index: --find-links only")
    parser.add_argument("--no-bytecode", action="store_true", help="ship source only, even when the interpreter is here")
    parser.add_argument("--json", action="store_true", help="print the result (or the error) as one JSON document")
    parser.set_defaults(func=Body("crhelper.cli.package:run"))
