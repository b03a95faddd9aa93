"""`crhelper providers [NAME] [--json]`: the installed provider manifests. The parser is
`crhelper.cli.parsers.providers`."""

from __future__ import annotations

import argparse
import json
import sys

from ..manifest import ManifestError, ProviderManifest, find_manifest, installed_manifests


def _summary(manifest: ProviderManifest) -> None:
    print(f"{manifest.name}: {manifest.summary}")
    print(f"  types     {', '.join(manifest.resource_types)}")
    print(f"  handler   {manifest.handler}")
    if manifest.extras:
        print(f"  extras    pip install 'ros-crhelper[{','.join(manifest.extras)}]'")
    if manifest.state_dir:
        print(f"  state     {manifest.state_path()}")
    if manifest.commands:
        print(f"  commands  {', '.join('crhelper ' + c for c in manifest.commands)}")


def _environment(manifest: ProviderManifest) -> None:
    if not manifest.environment:
        return
    print("  environment:")
    width = max(len(v.name) for v in manifest.environment)
    for variable in manifest.environment:
        default = f" (default {variable.default})" if variable.default else ""
        secret = " [secret]" if variable.secret else ""
        print(f"    {variable.name:<{width}}  {variable.description}{default}{secret}")


def run(args: argparse.Namespace) -> int:
    if args.name is not None:
        try:
            manifests = [find_manifest(args.name)]
        except ManifestError as exc:
            print(f"crhelper providers: {exc}", file=sys.stderr)
            return 2
    else:
        manifests = installed_manifests()
    if args.json:
        document = [m.to_dict() for m in manifests]
        print(json.dumps(document[0] if args.name is not None else document, indent=2))
        return 0
    if not manifests:
        print("no providers installed")
    for manifest in manifests:
        _summary(manifest)
        if args.name is not None:
            _environment(manifest)
    return 0
