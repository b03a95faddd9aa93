"""Bytecode for the target interpreter, compiled by that interpreter.

FC's code folder is read-only, so whatever an instance compiles at start is thrown away and the
next cold start compiles again: shipping `__pycache__/*.cpython-3X.pyc` saves that. The files are
written in UNCHECKED_HASH mode (PEP 552): the interpreter uses them without comparing the source's
timestamp, which the zip's fixed dates would otherwise contradict, and they hold no build time.
Their recorded file names are `/code/<name>` (FC's code root), not the build folder's.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..local.processes import find_python
from .targets import CODE_ROOT, Runtime

#: Run by the target interpreter: [[source, pyc, recorded name], ...] on stdin, failures as JSON on stdout.
_COMPILER = """
import json, py_compile, sys
jobs = json.load(sys.stdin)
failed = []
for source, cfile, dfile in jobs:
    try:
        py_compile.compile(source, cfile=cfile, dfile=dfile, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    except (py_compile.PyCompileError, SyntaxError, ValueError) as exc:
        failed.append([dfile, str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__])
json.dump({"tag": sys.implementation.cache_tag, "failed": failed}, sys.stdout)
"""
COMPILE_TIMEOUT = 900.0


@dataclass(frozen=True)
class Compiled:
    """What compiling produced: archive name -> .pyc file, and the sources that did not compile."""

    interpreter: str
    files: dict[str, Path]
    failed: list[tuple[str, str]]


def target_interpreter(runtime: Runtime) -> str | None:
    """The runtime's interpreter on this machine (PATH, pyenv), None when absent."""
    return find_python(runtime.version)


def compile_sources(sources: dict[str, Path], out: Path, runtime: Runtime, interpreter: str,
                    timeout: float = COMPILE_TIMEOUT) -> Compiled:
    """Compile every `*.py` of `sources` (archive name -> file) into `out` with `interpreter`."""
    from .plan import bytecode_name

    jobs: list[list[str]] = []
    files: dict[str, Path] = {}
    for name in sorted(sources):
        if not name.endswith(".py"):
            continue
        cached = bytecode_name(name, runtime.bytecode_tag)
        cfile = out / cached
        files[cached] = cfile
        jobs.append([str(sources[name]), str(cfile), f"{CODE_ROOT}/{name}"])
    out.mkdir(parents=True, exist_ok=True)
    # Not -I: it ignores PYTHONHASHSEED, and set constants are marshalled in hash order, so the same
    # source would give different .pyc bytes from one build to the next. -s and a clean environment
    # with a fixed seed instead; the compiler runs in the output folder (nothing of ours on its path).
    done = subprocess.run([interpreter, "-s", "-c", _COMPILER], input=json.dumps(jobs), capture_output=True,
                          text=True, timeout=timeout, check=False, cwd=out,
                          env={"PYTHONHASHSEED": "0", "PATH": os.environ.get("PATH", "")})
    if done.returncode != 0:
        raise RuntimeError(f"{interpreter} could not compile: {done.stderr.strip().splitlines()[-1:]}")
    report = json.loads(done.stdout)
    if report["tag"] != runtime.bytecode_tag:
        raise RuntimeError(f"{interpreter} is {report['tag']}, not {runtime.bytecode_tag}")
    failed = [(str(d), str(m)) for d, m in report["failed"]]
    bad = {f"{d[len(CODE_ROOT) + 1:]}" for d, _ in failed}
    return Compiled(interpreter, {k: v for k, v in files.items() if _source_of(k) not in bad}, failed)


def _source_of(cached: str) -> str:
    folder, _, file_name = cached.rpartition("__pycache__/")
    return f"{folder}{file_name.split('.')[0]}.py"


def failures_text(failed: Sequence[tuple[str, str]]) -> str:
    shown = "; ".join(f"{name}: {message}" for name, message in failed[:3])
    return shown + (f"; and {len(failed) - 3} more" if len(failed) > 3 else "")
