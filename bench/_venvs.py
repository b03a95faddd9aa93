"""Throw-away virtual environments for the contenders, created on first use under bench/.venvs/.

Why venvs at all: AWS crhelper and ours share the import name `crhelper`, and every contender should
start from an interpreter whose site-packages holds only what it needs (the developer environment's
`.pth` hooks cost tens of milliseconds at every start, which no Function Compute or Lambda pays).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

VENV_ROOT = Path(__file__).resolve().parent / ".venvs"


@dataclass(frozen=True)
class VenvSpec:
    """A named environment and the exact requirements installed into it."""

    name: str
    requirements: tuple[str, ...]

    @property
    def path(self) -> Path:
        return VENV_ROOT / self.name

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def marker(self) -> Path:
        return self.path / ".bench-requirements"


#: AWS crhelper as it runs on Lambda, where boto3 is part of the runtime (same boto3 as our dev env).
AWS = VenvSpec("aws-crhelper", ("crhelper==2.0.12", "boto3==1.43.11"))
#: Ours (imported from the checkout via PYTHONPATH) and the bare stdlib handler: the two validation
#: libraries a provider may use, nothing else.
OURS = VenvSpec("ours", ("pydantic==2.13.4", "msgspec==0.22.0"))


def ensure(spec: VenvSpec, log=print) -> Path:  # type: ignore[no-untyped-def]
    """Create the venv and install its pinned requirements unless a previous run already did."""
    wanted = "\n".join(spec.requirements)
    if spec.python.exists() and spec.marker.exists() and spec.marker.read_text() == wanted:
        return spec.python
    log(f"[setup] creating {spec.path} with: python -m venv, pip install {' '.join(spec.requirements)}")
    spec.path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(spec.path)], check=True)
    subprocess.run(
        [str(spec.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *spec.requirements],
        check=True,
    )
    spec.marker.write_text(wanted)
    log(f"[setup] {spec.name} ready")
    return spec.python
