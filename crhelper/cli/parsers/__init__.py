"""The command line's parsers: one module per command, each importing the standard library only.

A parser module builds its sub-parser (options, `--help` text, examples) and names the function
that runs the command as a string; that body module is imported only when the command runs, so
`crhelper --help` stays fast and body modules import at the top like ordinary code.
"""

from __future__ import annotations

import argparse
import importlib
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    #: What `add_subparsers()` returns (argparse keeps the class private).
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

#: Formatter for descriptions and epilogs written with their own line breaks.
RAW = argparse.RawDescriptionHelpFormatter


class Body:
    """The function that runs a command, named "package.module:function" and imported when called.

    `extra` names the optional dependency group the body needs, so a missing package is
    reported with the install command that brings it."""

    def __init__(self, target: str, extra: str | None = None) -> None:
        module, sep, function = target.partition(":")
        if not sep or not module or not function:
            raise ValueError(f"a command body is named 'package.module:function', got {target!r}")
        self.target = target
        self.extra = extra

    def resolve(self) -> Callable[[argparse.Namespace], Any]:
        module, _, function = self.target.partition(":")
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if self.extra is None or exc.name is None or exc.name.split(".")[0] in ("crhelper", "handlers"):
                raise
            raise ModuleNotFoundError(f"{exc}; next: pip install 'ros-crhelper[{self.extra}]'", name=exc.name) from None
        found: Callable[[argparse.Namespace], Any] = getattr(loaded, function)
        return found

    def __call__(self, args: argparse.Namespace) -> int:
        return int(self.resolve()(args) or 0)

    def __repr__(self) -> str:
        return f"Body({self.target!r})"


def add_command(subparsers: SubParsers, name: str, summary: str, description: str, epilog: str,
                formatter: type[argparse.HelpFormatter] = RAW) -> argparse.ArgumentParser:
    """A command's sub-parser: its one-line summary for `crhelper --help`, its own `--help` text."""
    return subparsers.add_parser(name, help=summary, description=description, epilog=epilog, formatter_class=formatter)


def provider_argument(parser: argparse.ArgumentParser) -> None:
    """The positional provider of invoke, serve, worker and contract."""
    parser.add_argument("provider", help="the provider: package.module:provider, path/to/file.py:provider, "
                                         "or the name of an installed provider (`crhelper providers`)")
