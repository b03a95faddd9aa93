"""The Function Compute Python runtimes a package is built for, and what pip needs to know of them.

FC runs x86_64 Linux with glibc >= 2.17 for every Python runtime (deploy.md §2.1, §2.4), so wheels
are chosen for `manylinux2014_x86_64` (and its PEP 600 spelling `manylinux_2_17_x86_64`, which pip
does not derive from the legacy name), CPython of the runtime's version and ABI. pip refuses
platform constraints unless only binaries are allowed, and with any one left out host values leak in:
all four are always given.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The handler every package declares: `handler` in the generated `index.py`.
HANDLER = "index.handler"
#: Where FC unpacks the code (the file names compiled bytecode reports in tracebacks).
CODE_ROOT = "/code"
#: Platform tags pip may choose wheels for, in pip's order of preference.
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64")


@dataclass(frozen=True)
class Runtime:
    """One FC runtime id with its interpreter version."""

    name: str
    version: str  # "3.12"

    @property
    def nodot(self) -> str:
        return self.version.replace(".", "")

    @property
    def abi(self) -> str:
        return f"cp{self.nodot}"

    @property
    def bytecode_tag(self) -> str:
        """The `sys.implementation.cache_tag` of the runtime's interpreter."""
        return f"cpython-{self.nodot}"

    def pip_options(self) -> list[str]:
        """`pip install --target` options that pick wheels for this runtime, whatever the host."""
        options = []
        for platform in PLATFORMS:
            options += ["--platform", platform]
        return options + ["--python-version", self.version, "--implementation", "cp", "--abi", self.abi,
                          "--only-binary=:all:", "--no-compile"]

    def accepts(self, tag: str) -> bool:
        """Whether a wheel tag (`cp312-cp312-manylinux_2_17_x86_64`) can run on this runtime."""
        parts = tag.split("-")
        if len(parts) != 3:
            return False
        pythons, abis, platforms = (set(p.split(".")) for p in parts)
        python_ok = bool(pythons & {"py3", f"py{self.nodot}", self.abi}) or any(
            p.startswith("cp3") and p[2:].isdigit() and "abi3" in abis and int(p[3:] or 0) <= int(self.nodot[1:])
            for p in pythons)
        abi_ok = bool(abis & {"none", "abi3", self.abi})
        platform_ok = "any" in platforms or any(_manylinux_fits(p) for p in platforms)
        return python_ok and abi_ok and platform_ok


def _manylinux_fits(platform: str) -> bool:
    """A manylinux x86_64 tag needing glibc 2.17 or older (manylinux1 = 2.5, 2010 = 2.12, 2014 = 2.17)."""
    legacy = {"manylinux1_x86_64": (2, 5), "manylinux2010_x86_64": (2, 12), "manylinux2014_x86_64": (2, 17)}
    if platform in legacy:
        return True
    prefix, suffix = "manylinux_", "_x86_64"
    if not (platform.startswith(prefix) and platform.endswith(suffix)):
        return False
    major, _, minor = platform[len(prefix):-len(suffix)].partition("_")
    return major.isdigit() and minor.isdigit() and (int(major), int(minor)) <= (2, 17)


RUNTIMES: dict[str, Runtime] = {r.name: r for r in (Runtime("python3.10", "3.10"), Runtime("python3.12", "3.12"))}
DEFAULT_RUNTIME = "python3.10"


def runtime(name: str) -> Runtime:
    """The runtime called `name`; ValueError listing the supported ones otherwise."""
    try:
        return RUNTIMES[name]
    except KeyError:
        raise ValueError(f"runtime {name!r} is not one of {', '.join(RUNTIMES)}") from None
