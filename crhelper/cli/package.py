"""`crhelper package PROVIDER`: build the FC code package. The parser is `crhelper.cli.parsers.package`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..loading import ProviderSpecError, import_from_cwd, parse_spec
from ..manifest import installed_manifests
from ..packaging import PackagingError
from ..packaging.build import PackageOptions, PackageResult, build
from ..packaging.targets import runtime
from .provider_spec import resolve
from .failures import print_failure


def _default_output(spec: str, runtime_name: str) -> Path:
    location, _, is_file = parse_spec(spec)
    stem = Path(location).stem if is_file else location.split(".")[-1]
    return Path(f"{stem}-{runtime_name}.zip")


def _print(result: PackageResult) -> None:
    print(f"wrote {result.output}")
    print(f"  runtime   {result.runtime}, handler {result.handler}")
    print(f"  env       {' '.join(f'{k}={v}' for k, v in result.environment.items())}")
    print(f"  size      {result.size:,} bytes, {result.files} files")
    print(f"  sha256    {result.sha256}")
    print(f"  crc64     {result.crc64} (FC codeChecksum)")
    print(f"  bytecode  {result.bytecode or 'none: source only'}")
    for wheel in result.wheels:
        print(f"  wheel     {wheel.name} {wheel.version} {' '.join(wheel.tags)}")
    inline = result.to_dict()["inline"]
    fits = "yes" if inline["fits_ros_template"] else "no: upload it to OSS"
    print(f"  inline    {inline['base64_bytes']:,} bytes of base64 in a ROS template: {fits}")
    for warning in result.warnings:
        print(f"crhelper package: warning: {warning}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    try:
        spec, manifest = resolve(args.provider)
        if manifest is None:  # a spec naming a built-in provider's module still gets its extras
            manifest = next((m for m in installed_manifests() if m.handler == spec), None)
        extras = tuple(dict.fromkeys([*(manifest.extras if manifest else ()), *args.extra]))
        import_from_cwd()
        options = PackageOptions(spec=spec, runtime=runtime(args.runtime),
                                 output=args.output or _default_output(spec, args.runtime), extras=extras,
                                 requirement_files=tuple(args.requirements), find_links=tuple(args.find_links),
                                 no_index=args.no_index, bytecode=not args.no_bytecode,
                                 search_path=tuple([os.getcwd(), *sys.path]))
        result = build(options)
    except (PackagingError, ProviderSpecError) as exc:
        print_failure("package", exc, args.json)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        for warning in result.warnings:
            print(f"crhelper package: warning: {warning}", file=sys.stderr)
    else:
        _print(result)
    return 0
