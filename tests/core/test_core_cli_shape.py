"""The command line's shape: commands found through entry points, parsers that import the standard
library only, help text that quotes its sources truthfully, and the provider manifests."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from crhelper.cli.contract import main as contract_main
from crhelper.cli.main import build_parser, main
from crhelper.cli.parsers import Body
from crhelper.cli.parsers import contract as contract_parser
from crhelper.cli.parsers import serve as serve_parser
from crhelper.cli.serve import config_from_args
from crhelper.contract.suite import CHECKS, DEFAULT_BUDGET
from crhelper.loading import load_provider
from crhelper.manifest import BUILTIN_COMMANDS, BUILTIN_PROVIDERS, COMMANDS_GROUP, PROVIDERS_GROUP, installed_manifests
from crhelper.transports import http_config, signature
from crhelper.transports.http_config import EndpointConfig

REPO = Path(__file__).resolve().parents[2]

#: The only project modules building the whole parser may import (beyond the `crhelper` package itself).
PARSER_MODULES = {"crhelper", "crhelper.cli", "crhelper.cli.main", "crhelper.cli.parsers", "crhelper.manifest",
                  "crhelper.paths", "crhelper.local", "crhelper.local.supervisor_cli",
                  "handlers", "handlers.routes", "handlers.routes.cli", "handlers.bootgroups", "handlers.bootgroups.cli",
                  "handlers.appcenter", "handlers.appcenter.cli"} | {
    f"crhelper.cli.parsers.{name}" for name in ("invoke", "serve", "worker", "stack", "contract", "providers", "package", "deploy", "ros")}

IMPORTS = """
import json, sys
start = set(sys.modules)
package = set(sys.modules)  # the package itself imports nothing: measured from the start
from crhelper.cli.main import build_parser
parser = build_parser()
print(json.dumps({"from_start": sorted(set(sys.modules) - start), "after_package": sorted(set(sys.modules) - package)}))
"""


def run_crhelper(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crhelper.cli.main", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_building_the_whole_parser_imports_the_standard_library_and_parser_modules_only() -> None:
    done = subprocess.run([sys.executable, "-c", IMPORTS], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    project = ("crhelper", "handlers")
    third_party = [m for m in loaded["from_start"]
                   if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] not in project]
    assert third_party == []
    ours = {m for m in loaded["after_package"] if m.split(".")[0] in project}
    assert ours - PARSER_MODULES == set(), "a parser imported a body or core module"
    assert {"crhelper.cli.parsers.stack", "handlers.routes.cli"} <= ours  # every command was registered


def test_every_built_in_command_is_registered_and_runs_lazily() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(commands.choices)[: len(BUILTIN_COMMANDS)] == list(BUILTIN_COMMANDS)  # built-ins first, in order
    args = parser.parse_args(["stack", "list"])
    assert repr(args.func) == "Body('crhelper.cli.stack:list_stacks')"


PLUGIN = textwrap.dedent('''
    from crhelper.manifest import ProviderManifest

    def register(subparsers):
        hello = subparsers.add_parser("hello", help="a third-party command")
        hello.set_defaults(func=lambda args: print("hello from a plug-in") or 0)

    def clash(subparsers):
        raise AssertionError("a built-in name is never taken over")

    NOT_CALLABLE = 3
    manifest = ProviderManifest("demo", "a demo", ("Custom::Demo",), "crhelper_demo_plugin:provider")
''')
ENTRY_POINTS = textwrap.dedent('''
    [crhelper.commands]
    hello = crhelper_demo_plugin:register
    broken = crhelper_demo_plugin_missing:register
    uncallable = crhelper_demo_plugin:NOT_CALLABLE
    stack = crhelper_demo_plugin:clash

    [crhelper.providers]
    demo = crhelper_demo_plugin:manifest
    junk = crhelper_demo_plugin:NOT_CALLABLE
''')


@pytest.fixture
def plugin_path(tmp_path: Path) -> str:
    """A real installed distribution (dist-info with entry points) on PYTHONPATH, read by importlib.metadata."""
    (tmp_path / "crhelper_demo_plugin.py").write_text(PLUGIN, encoding="utf-8")
    info = tmp_path / "crhelper_demo_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: crhelper-demo-plugin\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(ENTRY_POINTS, encoding="utf-8")
    return os.pathsep.join([str(tmp_path), str(REPO)])


@pytest.mark.slow
def test_third_party_commands_are_added_and_broken_ones_only_warned_about(plugin_path: str) -> None:
    env = {"PYTHONPATH": plugin_path}
    helped = run_crhelper("--help", env=env)
    assert helped.returncode == 0, helped.stderr
    assert "hello" in helped.stdout and "stack" in helped.stdout
    assert "broken" not in helped.stdout and "uncallable" not in helped.stdout
    warnings = helped.stderr.splitlines()
    assert any(w.startswith("crhelper: warning: command broken (crhelper_demo_plugin_missing:register) skipped: "
                            "ModuleNotFoundError") for w in warnings), helped.stderr
    assert any("command uncallable" in w and "TypeError" in w for w in warnings), helped.stderr
    assert any("stack = 'crhelper_demo_plugin:clash' ignored" in w for w in warnings), helped.stderr
    said = run_crhelper("hello", env=env)
    assert (said.returncode, said.stdout) == (0, "hello from a plug-in\n")
    listed = run_crhelper("providers", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    names = [m["name"] for m in json.loads(listed.stdout)]
    assert names[0] == "routes" and "demo" in names
    assert "provider junk (crhelper_demo_plugin:NOT_CALLABLE) skipped: a int" in listed.stderr


def test_help_text_quotes_the_defaults_it_does_not_own_truthfully() -> None:
    assert serve_parser.SHOWN_SYNC_WITHIN == http_config.DEFAULT_SYNC_WITHIN
    assert serve_parser.SHOWN_MAX_BODY == http_config.DEFAULT_MAX_BODY
    assert serve_parser.SHOWN_MAX_SKEW == signature.DEFAULT_MAX_SKEW
    assert (serve_parser.SHOWN_BACKLOG, serve_parser.SHOWN_QUEUE_BYTES, serve_parser.SHOWN_START_WITHIN) == (
        http_config.EndpointConfig.backlog, http_config.EndpointConfig.queue_bytes, http_config.EndpointConfig.start_within)
    assert (serve_parser.SIGN_KEY_ENV, serve_parser.BEARER_TOKEN_ENV, serve_parser.BASIC_AUTH_ENV) == (
        http_config.ENV_SIGN_KEY, http_config.ENV_BEARER_TOKEN, http_config.ENV_BASIC_AUTH)
    assert contract_parser.SHOWN_CHECKS == CHECKS and contract_parser.SHOWN_BUDGET == DEFAULT_BUDGET
    parser = argparse.ArgumentParser()
    serve_parser.add_arguments(parser)
    config = config_from_args(parser.parse_args(["x:provider"]))
    defaults = EndpointConfig()
    assert (config.sync_within, config.max_body, config.max_skew) == (defaults.sync_within, defaults.max_body, defaults.max_skew)


def _pyproject() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    return dict(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8")))


@pytest.mark.parametrize("group, builtin", [(COMMANDS_GROUP, BUILTIN_COMMANDS), (PROVIDERS_GROUP, BUILTIN_PROVIDERS)])
def test_the_built_in_tables_mirror_pyproject(group: str, builtin: dict[str, str]) -> None:
    declared = _pyproject()["project"].get("entry-points", {}).get(group)
    if declared is None:
        pytest.skip(f"pyproject.toml does not declare {group} yet; the built-in table stands in for it")
    assert declared == builtin


def test_the_routing_manifest_tells_the_truth() -> None:
    from handlers.routes.manifest import manifest
    from handlers.routes.repository import STATE_DIR

    assert "routes" in [m.name for m in installed_manifests()]
    provider = load_provider(manifest.handler)
    assert sorted(provider.types) == sorted(manifest.resource_types)
    assert manifest.state_dir == STATE_DIR
    extras = _pyproject()["project"]["optional-dependencies"]
    assert all(extra in extras for extra in manifest.extras)
    sources = "".join(path.read_text(encoding="utf-8") for path in (REPO / "handlers" / "routes").glob("*.py")
                      if path.name != "manifest.py")
    assert [v.name for v in manifest.environment if v.name not in sources] == []


def test_providers_lists_the_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["providers", "--json"]) == 0
    (routes,) = [m for m in json.loads(capsys.readouterr().out) if m["name"] == "routes"]
    assert routes["handler"] == "handlers.routes.provider:provider" and routes["extras"] == ["router"]
    assert routes["state_path"] == str(Path(os.environ["CRHELPER_HOME"]) / "router")
    assert main(["providers", "routes"]) == 0
    shown = capsys.readouterr().out
    assert "CRHELPER_FLYNN_KEY " in shown and "[secret]" in shown
    assert main(["providers", "nope"]) == 2
    assert "no installed provider is named 'nope' (installed: routes" in capsys.readouterr().err


def test_contract_takes_an_installed_providers_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    properties = tmp_path / "app.json"
    properties.write_text(json.dumps({"Name": "by-name"}), encoding="utf-8")
    assert contract_main(["routes", "--type", "Custom::Nope", "--properties", str(properties)]) == 2
    err = capsys.readouterr().err
    assert "provider routes has no type Custom::Nope" in err and "next: --type one of Custom::App, Custom::Route" in err
    assert contract_main(["routes", "--type", "Custom::App", "--properties", str(properties)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("contract: routes Custom::App") and out.splitlines()[-1].startswith("PASSED")
    assert contract_main(["nothing", "--type", "Custom::App", "--properties", str(properties)]) == 2
    assert "'nothing' is neither a provider spec" in capsys.readouterr().err


def test_a_body_missing_its_extra_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "body_needing_an_extra.py").write_text("import package_of_an_extra_not_installed\ndef run(args):\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as missing:
        Body("body_needing_an_extra:run", extra="demo")(argparse.Namespace())
    assert str(missing.value) == ("No module named 'package_of_an_extra_not_installed'; "
                                  "next: pip install 'ros-crhelper[demo]'")
    assert missing.value.name == "package_of_an_extra_not_installed"
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'package_of_an_extra_not_installed'$"):
        Body("body_needing_an_extra:run")(argparse.Namespace())
