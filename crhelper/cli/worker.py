"""`crhelper worker`: consume ROS requests from an MNS queue (ServiceToken acs:mns:...:queues/<name>).

The parser is `crhelper.cli.parsers.worker`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..cloud.credentials import Credentials, missing_hint
from ..config import ConfigError
from ..loading import ProviderSpecError
from ..reentry_mns import resolve_queue
from ..transports.mns_worker import QueueWorker
from . import provider_spec
from .parsers.worker import DESCRIPTION, EPILOG, add_arguments
from .parsers import RAW


def run(args: argparse.Namespace) -> int:
    try:
        location = resolve_queue(args.queue, args.endpoint)
    except ValueError as exc:
        print(f"crhelper worker: {exc}", file=sys.stderr)
        return 2
    credentials = Credentials.from_env()
    if credentials is None:
        print(f"crhelper worker: {missing_hint()}", file=sys.stderr)
        return 2
    provider = provider_spec.load(args.provider)
    try:
        worker = QueueWorker(
            provider, endpoint=location.endpoint, queue=location.queue,
            access_key_id=credentials.access_key_id, access_key_secret=credentials.access_key_secret,
            security_token=credentials.security_token,
            concurrency=args.concurrency, wait_seconds=args.wait_seconds,
            visibility_timeout=args.visibility_timeout, extend_every=args.extend_every,
            grace=args.grace, reentry=args.reentry, prefetch=args.prefetch,
        )
    except ValueError as exc:
        print(f"crhelper worker: {exc}", file=sys.stderr)
        return 2
    return worker.run_forever()


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m crhelper.cli.worker ...`, the same as `crhelper worker ...`."""
    parser = argparse.ArgumentParser(prog="crhelper worker", description=DESCRIPTION, epilog=EPILOG, formatter_class=RAW)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (ImportError, FileNotFoundError, ProviderSpecError, ConfigError) as exc:
        print(f"crhelper worker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
