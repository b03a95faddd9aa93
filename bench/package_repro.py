"""Package reproducibility and size: `crhelper package` against a naive `pip install --target` zip.

Same inputs for both: samples/greeting.py, this library, and its dependencies as wheels for FC
python3.12 from one local wheelhouse (filled once with `pip download` for the target unless
--wheelhouse is given). The naive build is the usual recipe: `pip install --target build
--platform manylinux2014_x86_64 --python-version 3.12 --implementation cp --abi cp312
--only-binary=:all:` (pip's default compile step left on), the library and the provider copied with
whatever __pycache__ they have, then `shutil.make_archive`. Two builds each, interleaved
(ours, naive, ours, naive), the second after touching the inputs' mtimes. Reported: whether the two
builds are byte-identical, size, files, bytecode of which interpreter, build time.

    python bench/package_repro.py [--wheelhouse DIR] [--runtime python3.12]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crhelper.packaging.build import PackageOptions, build  # noqa: E402
from crhelper.packaging.targets import runtime as runtime_named  # noqa: E402


def fill_wheelhouse(folder: Path, version: str) -> None:
    nodot = version.replace(".", "")
    subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "-d", str(folder),
                    "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64",
                    "--python-version", version, "--implementation", "cp", "--abi", f"cp{nodot}",
                    "--only-binary=:all:", "pydantic>=2.5", "PyYAML>=6.0"], check=True)


def ours(wheels: Path, out: Path, name: str) -> Path:
    build(PackageOptions(spec=str(REPO / "samples" / "greeting.py"), runtime=runtime_named(name), output=out,
                         find_links=(str(wheels),), no_index=True))
    return out


def naive(wheels: Path, out: Path, name: str) -> Path:
    target = runtime_named(name)
    with tempfile.TemporaryDirectory(prefix="naive-") as work:
        folder = Path(work) / "build"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target",
                        str(folder), "--platform", "manylinux2014_x86_64", "--python-version", target.version,
                        "--implementation", "cp", "--abi", target.abi, "--only-binary=:all:", "--no-index",
                        "--find-links", str(wheels), "pydantic>=2.5", "PyYAML>=6.0"], check=True)
        shutil.copytree(REPO / "crhelper", folder / "crhelper")
        shutil.copy2(REPO / "samples" / "greeting.py", folder / "greeting.py")
        (folder / "index.py").write_text("from crhelper.fc import handler\n")
        archive = shutil.make_archive(str(out.with_suffix("")), "zip", folder)
    return Path(archive)


def describe(path: Path, seconds: float) -> dict[str, object]:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    tags = sorted({n.rsplit(".", 2)[-2] for n in names if n.endswith(".pyc")})
    return {"size": path.stat().st_size, "files": len([n for n in names if not n.endswith("/")]),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest()[:16], "bytecode": tags, "seconds": round(seconds, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheelhouse", type=Path, default=None)
    parser.add_argument("--runtime", default="python3.12")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="package-bench-"))
    wheels = args.wheelhouse or work / "wheels"
    if args.wheelhouse is None:
        fill_wheelhouse(wheels, runtime_named(args.runtime).version)
    results: dict[str, list[dict[str, object]]] = {"crhelper package": [], "naive pip --target zip": []}
    for round_ in (1, 2):
        if round_ == 2:
            for path in (REPO / "samples" / "greeting.py", *sorted((REPO / "crhelper").glob("*.py"))[:3]):
                os.utime(path)  # the same contents, new mtimes
            time.sleep(1.1)  # zip dates have 2 s resolution
        for label, step in (("crhelper package", ours), ("naive pip --target zip", naive)):
            started = time.perf_counter()
            made = step(wheels, work / f"{label.split()[0]}-{round_}.zip", args.runtime)
            results[label].append(describe(made, time.perf_counter() - started))
    report = {"uptime": os.popen("uptime").read().strip(), "runtime": args.runtime,
              "wheels": sorted(p.name for p in wheels.glob("*.whl")), "builds": results,
              "identical": {label: runs[0]["sha256"] == runs[1]["sha256"] for label, runs in results.items()}}
    print(json.dumps(report, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
