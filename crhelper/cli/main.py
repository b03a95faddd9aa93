"""`crhelper`: one command, a subcommand per job. `crhelper <command> --help` explains each."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from .. import __version__

#: Modules that add a top-level command through `register(subparsers)`; optional extras may be missing.
COMMAND_MODULES = (
    "crhelper.cli.invoke",
    "crhelper.cli.serve",
    "crhelper.cli.worker",
    "crhelper.cli.stack",
    "crhelper.contract.cli",
    "handlers.routes.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crhelper",
        description="Write, test and run Alibaba Cloud ROS custom-resource providers on your laptop or on Function Compute.",
        epilog="Start with: crhelper invoke samples/greeting.py:provider --event samples/events/create.json",
    )
    parser.add_argument("--version", action="version", version=f"crhelper {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="<command>")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


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
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # user-facing: say what went wrong and what to do, no traceback
        from ..config import ConfigError
        from ..fc import ProviderSpecError

        if isinstance(exc, (ConfigError, ProviderSpecError, ImportError, FileNotFoundError)):
            print(f"crhelper: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
