"""What installed distributions add to crhelper, through entry points: commands and providers.

`crhelper.commands`: name = the subcommand, value = `module:register`, a function that adds the
command to an argparse sub-parsers object (its module imports the standard library only; the
command's body loads when it runs). `crhelper.providers`: name = the provider, value =
`module:attr`, a `ProviderManifest` saying what the provider is (its types, handler spec, extras,
environment, state folder) so `crhelper providers`, `crhelper contract`, deploy and the docs can
read it without importing the provider.

The built-in tables mirror what pyproject.toml declares; they are used for names the installed
metadata does not list (a source checkout, or an editable install made before the entry points).
This module imports the standard library only: the command line's parser reads it.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from .paths import state_dir

COMMANDS_GROUP = "crhelper.commands"
PROVIDERS_GROUP = "crhelper.providers"

#: The commands this distribution declares (pyproject.toml [project.entry-points."crhelper.commands"]).
BUILTIN_COMMANDS: dict[str, str] = {
    "invoke": "crhelper.cli.parsers.invoke:register",
    "serve": "crhelper.cli.parsers.serve:register",
    "worker": "crhelper.cli.parsers.worker:register",
    "stack": "crhelper.cli.parsers.stack:register",
    "contract": "crhelper.cli.parsers.contract:register",
    "providers": "crhelper.cli.parsers.providers:register",
    "package": "crhelper.cli.parsers.package:register",
    "deploy": "crhelper.cli.parsers.deploy:register",
    "ros": "crhelper.cli.parsers.ros:register",
    "supervisor": "crhelper.local.supervisor_cli:register",
    "router": "handlers.routes.cli:register",
    "bootgroups": "handlers.bootgroups.cli:register",
    "appcenter": "handlers.appcenter.cli:register",
}

#: The providers this distribution declares (pyproject.toml [project.entry-points."crhelper.providers"]).
BUILTIN_PROVIDERS: dict[str, str] = {
    "routes": "handlers.routes.manifest:manifest",
    "bootgroups": "handlers.bootgroups.manifest:manifest",
    "appcenter": "handlers.appcenter.manifest:manifest",
}


@dataclass(frozen=True)
class EnvVar:
    """An environment variable a provider reads, with a one-line description."""

    name: str
    description: str
    default: str | None = None
    secret: bool = False


@dataclass(frozen=True)
class ProviderManifest:
    """A provider as deploy, `crhelper contract` and the docs see it, without importing it.

    `handler` is its provider spec (`package.module:provider`), `extras` the optional dependency
    groups it needs (`pip install 'ros-crhelper[router]'`), `state_dir` its folder under
    $CRHELPER_HOME (None when it keeps no local state), `commands` the crhelper subcommands its
    distribution adds for it."""

    name: str
    summary: str
    resource_types: tuple[str, ...]
    handler: str
    extras: tuple[str, ...] = ()
    environment: tuple[EnvVar, ...] = ()
    state_dir: str | None = None
    commands: tuple[str, ...] = ()

    def state_path(self, env: Mapping[str, str] | None = None) -> Path | None:
        """Where its state lives on this machine (not created)."""
        return state_dir(self.state_dir, env) if self.state_dir else None

    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)
        document["state_path"] = str(self.state_path()) if self.state_dir else None
        return document


class ManifestError(LookupError):
    """No installed provider of that name; `installed` lists the names there are."""

    def __init__(self, name: str, installed: list[str]) -> None:
        listed = ", ".join(installed) or "none"
        super().__init__(f"no installed provider is named {name!r} (installed: {listed}); see `crhelper providers`")
        self.name = name
        self.installed = installed


Warn = Callable[[str], None]


def _stderr_warning(message: str, stream: TextIO | None = None) -> None:
    print(f"crhelper: warning: {message}", file=stream or sys.stderr)


#: Where the entry points of `crhelper.*` groups are remembered between runs (under $CRHELPER_HOME).
ENTRY_POINT_CACHE = "cache/entry-points.json"


def _path_key() -> dict[str, Any]:
    """What the installed entry points depend on: the interpreter, its path, and each path
    folder's modification time (installing or removing a distribution changes it)."""
    stamps: list[int | None] = []
    for entry in sys.path:
        try:
            stamps.append(os.stat(entry or ".").st_mtime_ns)
        except OSError:
            stamps.append(None)
    return {"python": sys.version, "path": sys.path, "stamps": stamps}


def _read_installed(warn: Warn) -> dict[str, list[list[str]]]:
    """Group -> [[name, value], ...] for crhelper's groups, through importlib.metadata.

    Reading the metadata of every installed distribution costs about 50 ms, a third of what
    `crhelper --help` may take, so the result is cached against `_path_key()`; a cache that cannot
    be read or written is simply not used."""
    cache = state_dir(ENTRY_POINT_CACHE)
    key = _path_key()
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return dict(cached["groups"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    from importlib import metadata

    groups: dict[str, list[list[str]]] = {}
    try:
        for group in (COMMANDS_GROUP, PROVIDERS_GROUP):
            groups[group] = [[entry.name, entry.value] for entry in metadata.entry_points(group=group)]
    except Exception as exc:  # noqa: BLE001 - broken metadata must not break the command line
        warn(f"cannot read the installed entry points: {type(exc).__name__}: {exc}")
        return {}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}")
        partial.write_text(json.dumps({"key": key, "groups": groups}), encoding="utf-8")
        os.replace(partial, cache)
    except OSError:
        pass  # a read-only home: read the metadata each time
    return groups


def entry_point_targets(group: str, builtin: Mapping[str, str], warn: Warn = _stderr_warning) -> dict[str, str]:
    """Name -> `module:attr` for an entry-point group: the built-in names first (a built-in wins
    over a distribution that declares the same name differently, which is warned about), then
    the other installed names in alphabetical order."""
    targets = dict(builtin)
    others: dict[str, str] = {}
    for name, value in sorted(_read_installed(warn).get(group, [])):
        known = targets.get(name) or others.get(name)
        if known is None:
            others[name] = value
        elif known != value:
            warn(f"{group} entry point {name} = {value!r} ignored: {name!r} is {known!r}")
    return {**targets, **others}


def load_target(target: str) -> Any:
    """The object `module:attr` names (the module is imported)."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"entry point value {target!r} is not 'module:attr'")
    value: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def installed_manifests(warn: Warn = _stderr_warning) -> list[ProviderManifest]:
    """Every provider manifest installed (and the built-in ones); broken entries are warned about and skipped."""
    manifests = []
    for name, target in entry_point_targets(PROVIDERS_GROUP, BUILTIN_PROVIDERS, warn).items():
        try:
            manifest = load_target(target)
        except Exception as exc:  # noqa: BLE001 - a third party's broken manifest must not hide the others
            warn(f"provider {name} ({target}) skipped: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(manifest, ProviderManifest):
            warn(f"provider {name} ({target}) skipped: a {type(manifest).__name__}, not a crhelper.manifest.ProviderManifest")
            continue
        manifests.append(manifest)
    return manifests


def find_manifest(name: str, warn: Warn = _stderr_warning) -> ProviderManifest:
    """The installed manifest called `name`; ManifestError listing the installed names otherwise."""
    manifests = installed_manifests(warn)
    for manifest in manifests:
        if manifest.name == name:
            return manifest
    raise ManifestError(name, [m.name for m in manifests])


def looks_like_name(text: str) -> bool:
    """Whether a command-line provider argument is a manifest name rather than a spec: a spec
    always holds a ':' or a '.' (`package.module:provider`, `path/file.py`)."""
    return bool(text) and ":" not in text and "." not in text and "/" not in text
