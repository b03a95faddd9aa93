"""``crhelper router --help`` teaches: a description and examples for the group and every
sub-command, help on every option; ``crhelper router services`` with no action lists."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crhelper.cli.main import build_parser, main

REPO_ROOT = Path(__file__).resolve().parents[2]
SUB_COMMANDS = ("serve", "controller", "routes", "events", "services")


def _router_parsers() -> dict[str, argparse.ArgumentParser]:
    """The router group's parser and its sub-commands', as `crhelper` builds them."""
    def choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(found[0].choices) if found else {}

    router = choices(build_parser())["router"]
    return {"router": router, **choices(router)}


def test_the_router_group_has_a_description_and_examples_in_a_real_process(home: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "router", "--help"], cwd=REPO_ROOT,
                          env={**os.environ, "CRHELPER_HOME": str(home)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "the service registry that maps a route's service name to backend addresses" in done.stdout
    assert "examples:\n  crhelper router services register ros-web 127.0.0.1:9911" in done.stdout
    for name in SUB_COMMANDS:  # each listed with its summary
        assert f"    {name} " in done.stdout


@pytest.mark.parametrize("name", SUB_COMMANDS)
def test_every_router_sub_command_has_a_description_examples_and_option_help(name: str,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    parser = _router_parsers()[name]
    assert parser.description and len(parser.description) > 60
    unexplained = [a.dest for a in parser._actions if not a.help]
    assert unexplained == []
    with pytest.raises(SystemExit) as exited:
        main(["router", name, "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert f"examples:\n  crhelper router {name}" in shown or f"  CRHELPER_FLYNN_KEY=k crhelper router {name}" in shown


@pytest.mark.slow
def test_router_services_without_an_action_lists(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["router", "services"]) == 0
    empty = capsys.readouterr()
    assert empty.out == ""
    assert "none registered; next: crhelper router services register SERVICE HOST:PORT" in empty.err
    assert main(["router", "services", "register", "ros-web", "127.0.0.1:9911", "--leader"]) == 0
    listed = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "router", "services"], cwd=REPO_ROOT,
                            env={**os.environ, "CRHELPER_HOME": str(home)}, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "ros-web: 127.0.0.1:9911 (leader)\n"
