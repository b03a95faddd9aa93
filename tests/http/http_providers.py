"""Providers the HTTP transport tests serve: echo, slow, failing. Also loaded by `crhelper serve` in a subprocess."""

from __future__ import annotations

import threading
from typing import Any

from crhelper import Failure, Provider, Request, Result

provider = Provider()

#: Slow handlers wait on this (at most their `Seconds`); tests set it at teardown so no thread lingers.
RELEASE = threading.Event()
#: Set by a slow handler once it runs: a test queueing behind it knows the one worker is taken.
STARTED = threading.Event()


@provider.create("Custom::Echo")
def create_echo(props: dict[str, Any], request: Request) -> Result:
    return Result(physical_id=f"echo-{props.get('Name', 'x')}", data={"Echo": props})


@provider.update("Custom::Echo")
def update_echo(props: dict[str, Any], old: dict[str, Any], request: Request) -> Result:
    return Result(data={"Echo": props, "Was": old})


@provider.delete("Custom::Echo")
def delete_echo(props: dict[str, Any], request: Request) -> None:
    return None


@provider.create("Custom::Slow")
def create_slow(props: dict[str, Any], request: Request) -> Result:
    STARTED.set()
    RELEASE.wait(float(props.get("Seconds", 5)))
    return Result(physical_id="slow", data={"Slept": True})


@provider.create("Custom::Broken")
def create_broken(props: dict[str, Any], request: Request) -> Result:
    raise Failure("this resource always fails")


@provider.create("Custom::Exit")
def create_exit(props: dict[str, Any], request: Request) -> Result:
    raise SystemExit(3)  # a user bug that escapes `except Exception`
