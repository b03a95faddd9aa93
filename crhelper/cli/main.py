"""`crhelper`: one command, a subcommand per job. `crhelper <command> --help` explains each.

The subcommands come from the `crhelper.commands` entry points (and the built-in table for a
source checkout, `crhelper.manifest`): each names a parser module that imports the standard
library only, so building the whole parser stays fast; a command's body is imported when it runs.
A command that cannot be loaded is warned about on stderr and left out; the others still work.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .. import __version__
from ..manifest import BUILTIN_COMMANDS, COMMANDS_GROUP, entry_point_targets, load_target


def _warn(message: str) -> None:
    print(f"crhelper: warning: {message}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crhelper",
        description="Write, test and run Alibaba Cloud ROS custom-resource providers on your laptop or on Function Compute.",
        epilog="Start with: crhelper invoke samples/greeting.py:provider --event samples/events/create.json",
    )
    parser.add_argument("--version", action="version", version=f"crhelper {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="<command>")
    for name, target in entry_point_targets(COMMANDS_GROUP, BUILTIN_COMMANDS, _warn).items():
        try:
            load_target(target)(subparsers)
        except Exception as exc:  # noqa: BLE001 - one broken plug-in must not take the whole command line down
            _warn(f"command {name} ({target}) skipped: {type(exc).__name__}: {exc}")
    return parser


def _explain(exc: Exception) -> int | None:
    """Exit code 2 with a message (and its next step) for the errors a user can fix; None for the rest."""
    from ..config import ConfigError  # only on the way out: the parser imports nothing of crhelper's core
    from ..loading import ProviderSpecError

    if isinstance(exc, ProviderSpecError):
        print(f"crhelper: {exc.problem}\n  next: {exc.next_step}", file=sys.stderr)
        return 2
    if isinstance(exc, (ConfigError, ImportError, FileNotFoundError)):
        print(f"crhelper: {exc}", file=sys.stderr)
        return 2
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `crhelper stack events ... | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # user-facing: say what went wrong and what to do, no traceback
        code = _explain(exc)
        if code is None:
            raise
        return code


if __name__ == "__main__":
    sys.exit(main())
