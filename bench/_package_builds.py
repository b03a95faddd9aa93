"""The code packages bench/package_coldstart.py starts from, built the way each project's users build them.

Ours: `crhelper package` (crhelper.packaging.build), its dependencies from a wheelhouse for the
target (`pip download` once, cached), bytecode compiled by the target interpreter (or not, for the
`--no-bytecode` contender). AWS crhelper: "the ordinary way": `pip install --target build crhelper boto3`
(boto3 too: FC's Python runtimes do not preinstall it, and AWS crhelper imports it at import time),
`--no-compile` (pip would otherwise compile for this machine's 3.11, which neither FC runtime reads),
the provider and an FC entry module copied in, `shutil.make_archive`. Both are then unpacked into a
folder made read-only (`chmod -R a-w`), as FC mounts /code.

Everything downloaded is cached under $TMPDIR (or the system temp folder): a re-run needs no index.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
CACHE = Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / "crhelper-coldstart-cache"
#: AWS crhelper as its users pin it, and the boto3 our developer environment (and cold_warm.py) uses.
AWS_REQUIREMENTS = ("crhelper==2.0.12", "boto3==1.43.11", "botocore==1.43.11")

#: FC's entry for AWS crhelper: FC passes the event as JSON bytes and its own context, which has no
#: `get_remaining_time_in_millis` (AWS crhelper calls it): the few lines a user porting it must write.
AWS_INDEX = '''"""FC entry for the AWS crhelper Greeting provider (handler index.handler)."""
import json
import time

from _aws_greeting import handler as _lambda_handler


class _LambdaView:
    def __init__(self, context):
        self._deadline = time.monotonic() + float(context.function.timeout)
        self.aws_request_id = context.request_id
        self.function_name = context.function.name

    def get_remaining_time_in_millis(self):
        return int(max(0.0, self._deadline - time.monotonic()) * 1000)


def handler(event, context):
    return _lambda_handler(json.loads(event), _LambdaView(context))
'''


@dataclass(frozen=True)
class Package:
    """One contender's code: the zip, the read-only folder it was unpacked into, and its FC environment."""

    key: str
    label: str
    zip_path: Path
    code_dir: Path
    env: dict[str, str]
    files: int
    pyc_files: int


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "-q"], check=False,
                          capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"pip {args[0]} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")


def target_wheelhouse(version: str, requirements: list[str]) -> Path:
    """Wheels of `requirements` for FC's platform and the target Python, downloaded once."""
    folder = CACHE / f"wheels-cp{version.replace('.', '')}"
    marker = folder / ".requirements"
    wanted = "\n".join(requirements)
    if marker.exists() and marker.read_text() == wanted:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    nodot = version.replace(".", "")
    _pip("download", "-d", str(folder), "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64",
         "--python-version", version, "--implementation", "cp", "--abi", f"cp{nodot}", "--only-binary=:all:",
         *requirements)
    marker.write_text(wanted)
    return folder


def aws_wheelhouse() -> Path:
    """AWS crhelper and boto3 with their dependencies (all pure Python), downloaded once."""
    folder = CACHE / "wheels-aws"
    marker = folder / ".requirements"
    wanted = "\n".join(AWS_REQUIREMENTS)
    if marker.exists() and marker.read_text() == wanted:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    _pip("download", "-d", str(folder), "--only-binary=:all:", *AWS_REQUIREMENTS)
    marker.write_text(wanted)
    return folder


def unpack_read_only(zip_path: Path, folder: Path) -> tuple[int, int]:
    """Unpack as FC does, then `chmod -R a-w`; (files, .pyc files)."""
    if folder.exists():
        make_writable(folder)
        shutil.rmtree(folder)
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(folder)
        names = [n for n in archive.namelist() if not n.endswith("/")]
    for root, dirs, files in os.walk(folder):
        for name in files:
            path = Path(root, name)
            path.chmod(path.stat().st_mode & ~0o222)
        Path(root).chmod(Path(root).stat().st_mode & ~0o222)
    return len(names), len([n for n in names if n.endswith(".pyc")])


def make_writable(folder: Path) -> None:
    for root, dirs, files in os.walk(folder):
        Path(root).chmod(Path(root).stat().st_mode | stat.S_IWUSR)
        for name in files:
            Path(root, name).chmod(Path(root, name).stat().st_mode | stat.S_IWUSR)


def cache_dirs(folder: Path) -> list[str]:
    """Every __pycache__ folder under `folder` with its file count: what a run must leave as it found."""
    return sorted(f"{Path(root).relative_to(folder)}:{len(files)}" for root, _, files in os.walk(folder)
                  if Path(root).name == "__pycache__")


def build_ours(key: str, label: str, spec: str, runtime_name: str, work: Path, bytecode: bool) -> Package:
    """`crhelper package SPEC --runtime R --no-index --find-links WHEELHOUSE [--no-bytecode]`."""
    sys.path.insert(0, str(REPO))
    from crhelper.packaging.build import PackageOptions, build, library_requires
    from crhelper.packaging.plan import requirements_for
    from crhelper.packaging.targets import runtime

    target = runtime(runtime_name)
    wheels = target_wheelhouse(target.version, requirements_for(library_requires(), ()))
    out = work / f"{key}.zip"
    result = build(PackageOptions(spec=spec, runtime=target, output=out, find_links=(str(wheels),), no_index=True,
                                  bytecode=bytecode, search_path=(str(REPO),)))
    if bytecode and result.bytecode is None:
        raise RuntimeError(f"crhelper package shipped no bytecode for {runtime_name}: {result.warnings}")
    files, pyc = unpack_read_only(out, work / key)
    return Package(key, label, out, work / key, dict(result.environment), files, pyc)


def build_aws(key: str, label: str, work: Path, compile_with: str | None = None) -> Package:
    """`pip install --target build --no-compile crhelper boto3`, the provider and index.py beside, zip.
    `compile_with` (the target interpreter): also compile everything for it, unchecked-hash, as
    `crhelper package` does: not what AWS crhelper's users do, the bound of what bytecode alone gives it."""
    wheels = aws_wheelhouse()
    build_dir = work / f"{key}-build"
    if build_dir.exists():
        shutil.rmtree(build_dir)
    _pip("install", "--target", str(build_dir), "--no-compile", "--no-index", "--find-links", str(wheels),
         *AWS_REQUIREMENTS)
    shutil.copy(BENCH / "_aws_greeting.py", build_dir / "_aws_greeting.py")
    (build_dir / "index.py").write_text(AWS_INDEX)
    if compile_with is not None:
        subprocess.run([compile_with, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
                        str(build_dir)], check=True, capture_output=True)
    out = Path(shutil.make_archive(str(work / key), "zip", build_dir))
    shutil.rmtree(build_dir)
    files, pyc = unpack_read_only(out, work / key)
    env = {"AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKIABENCHFAKE000000",
           # not a credential: AWS crhelper builds three boto3 clients at import and never uses them here
           "AWS_SECRET_ACCESS_KEY": "bench-fake-secret", "AWS_EC2_METADATA_DISABLED": "true"}
    return Package(key, label, out, work / key, env, files, pyc)


def clean_venv(version: str, python: str) -> Path:
    """An empty virtual environment of the target interpreter (no pip): the runtime's own site-packages
    hold nothing a contender could borrow, as on FC where the zip brings everything."""
    folder = CACHE / f"venv-{version}"
    interpreter = folder / "bin" / "python"
    if not interpreter.exists():
        subprocess.run([python, "-m", "venv", "--without-pip", "--clear", str(folder)], check=True)
    return interpreter
