"""`crhelper ros serve`: the local ROS's OpenAPI and console on loopback (parser: `crhelper.cli.parsers.ros`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .. import paths
from ..cloud.credentials import Credentials, ProfileError, load_profile, missing_hint
from ..emulator.delivery_bindings import BindingError
from ..emulator.provider_logs import LOG_LEVEL_ENV, provider_level, terminal_level
from ..errors import ExplainedError
from ..ros.server import LocalRos, is_loopback
from ..signals import stop_requested
from .failures import print_failure

EXIT_OK, EXIT_USAGE = 0, 2


def _credentials(profile: str | None) -> Credentials:
    """The key callers sign with: --profile's, else the environment's, else the config file's current profile."""
    try:
        found = load_profile(profile) if profile else None
        credentials = found.credentials if found else Credentials.from_env()
        if credentials is None:
            current = load_profile(None)
            credentials = current.credentials if current else None
    except ProfileError as exc:
        raise ExplainedError(exc.problem, exc.next_step, "credentials") from None
    if credentials is None:
        raise ExplainedError("no access key for callers to sign with",
                             f"{missing_hint()}, or run `aliyun configure` (~/.aliyun/config.json) and give --profile",
                             "credentials")
    return credentials


def serve(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C / SIGTERM; running stack operations are waited for on the way out."""
    try:
        if not is_loopback(args.host) and not args.allow_remote:
            raise ExplainedError(
                f"--host {args.host} is not a loopback address: other machines could reach the ROS API (signed "
                "calls can create and delete stacks, and the providers they run act with this machine's access)",
                "serve on 127.0.0.1 (the default), or add --allow-remote to expose the signed API on purpose "
                "(the console stays off there)", "host")
        credentials = _credentials(args.profile)
        if args.home is not None:  # providers run here (in-process and FC workers) keep their state there too
            os.environ[paths.HOME_ENV] = str(Path(args.home).expanduser().resolve())
        # Providers log at INFO at least, so each stack's provider log (console, `crhelper stack logs`) has
        # their steps, as during `crhelper stack` operations; this process owns its environment.
        os.environ[LOG_LEVEL_ENV] = provider_level(terminal_level(os.environ))
        try:
            ros = LocalRos(host=args.host, port=args.port, home=paths.home(), region=args.region,
                           bindings=args.bindings, credentials=[credentials], capture_output=True)
        except BindingError as exc:
            raise ExplainedError(str(exc), "fix the bindings file; `crhelper stack --help` shows its format",
                                 "bindings") from None
        try:
            ros.start()
        except OSError as exc:
            ros.stop()
            raise ExplainedError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}",
                                 "give another --port (0 picks a free one)", "listen") from None
    except ExplainedError as exc:
        print_failure("ros serve", exc, args.json)
        return EXIT_USAGE
    with stop_requested() as stop:
        try:
            if args.json:
                print(json.dumps({"endpoint": ros.endpoint, "console_url": ros.console_url, "region": ros.region,
                                  "access_key_id": ros.access_key_id, "home": str(ros.stacks.home)}), flush=True)
            else:
                print(f"ROS 2019-09-10 API  {ros.endpoint}  (region {ros.region}; SDK: Config(endpoint="
                      f"'{ros.endpoint}', protocol='http'), signed with access key {ros.access_key_id})", flush=True)
                print(f"console             {ros.console_url or 'off (served on loopback addresses only)'}",
                      flush=True)
                print(f"stacks              {ros.stacks.home}  (also `crhelper stack list`)", flush=True)
                print("Ctrl-C stops", file=sys.stderr, flush=True)
            while not stop.wait(0.5):
                pass
        finally:
            ros.stop()
    return EXIT_OK
