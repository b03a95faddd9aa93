"""Put the bench's throw-away CA into the *system* trust, for this process and its children only.

Every contender then verifies TLS exactly as it does in production, with no per-contender CA
setting: ours reads the system's hashed directory, AWS crhelper and the bare handler build
`ssl.create_default_context()`, which parses the system bundle file. The bench enters a private
mount namespace (Linux, root) and bind-mounts a copy of /etc/ssl/certs holding the bench CA over
the original; nobody outside the bench sees it, and it is gone when the bench exits.

Where that is not possible, every contender gets SSL_CERT_FILE and SSL_CERT_DIR pointing at the same
copy (OpenSSL's default-path variables): still the same trust for all, but ours then parses the
bundle file too, which it does not do in production. `Trust.mode` says which one ran.
"""

from __future__ import annotations

import ctypes
import shutil
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_CERTS = Path("/etc/ssl/certs")
BUNDLE = "ca-certificates.crt"
_CLONE_NEWNS = 0x00020000


@dataclass
class Trust:
    """What every contender trusts, how, and the environment that carries it (empty when mounted)."""

    mode: str
    env: dict[str, str] = field(default_factory=dict)
    mounted: bool = False

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", str(SYSTEM_CERTS)], check=False, capture_output=True)
            self.mounted = False


def _subject_hash(pem: Path) -> str:
    return subprocess.run(["openssl", "x509", "-subject_hash", "-noout", "-in", str(pem)],
                          capture_output=True, text=True, check=True).stdout.strip()


def build_store(into: Path, ca_pem: bytes, include_system: bool) -> Path:
    """A certificate folder laid out like /etc/ssl/certs (hashed links + the bundle file) holding the
    system CAs (if asked) and the bench CA."""
    if include_system:
        shutil.copytree(SYSTEM_CERTS, into, symlinks=True)
        system_bundle = (SYSTEM_CERTS / BUNDLE).read_bytes().rstrip(b"\n") + b"\n"
    else:
        into.mkdir()
        system_bundle = b""
    (into / "bench-ca.pem").write_bytes(ca_pem)
    subject_hash = _subject_hash(into / "bench-ca.pem")
    index = 0
    while (into / f"{subject_hash}.{index}").exists():
        index += 1
    (into / f"{subject_hash}.{index}").symlink_to("bench-ca.pem")
    bundle = into / BUNDLE
    if bundle.is_symlink():
        bundle.unlink()
    bundle.write_bytes(system_bundle + ca_pem)
    return into


def _mount_over_system(store: Path) -> str | None:
    """Enter a private mount namespace and bind `store` over /etc/ssl/certs; None on success, else why not.
    Must run before the bench starts any thread (the namespace is the calling thread's)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWNS) failed: errno {ctypes.get_errno()}"
    for command in (["mount", "--make-rprivate", "/"], ["mount", "--bind", str(store), str(SYSTEM_CERTS)]):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return f"{' '.join(command)}: {done.stderr.strip()}"
    return None


def install(workdir: Path, ca_pem: bytes, trust: str) -> Trust:
    """Make every contender trust the bench CA (plus the system CAs when `trust == "system"`)."""
    include_system = trust == "system"
    store = build_store(workdir / "certs", ca_pem, include_system)
    what = "system CAs + bench CA" if include_system else "bench CA only"
    paths = ssl.get_default_verify_paths()
    if Path(paths.cafile or "").resolve() == (SYSTEM_CERTS / BUNDLE).resolve() and SYSTEM_CERTS.is_dir():
        problem = _mount_over_system(store)
        if problem is None and (SYSTEM_CERTS / "bench-ca.pem").exists():
            return Trust(f"{what}, in the system store ({SYSTEM_CERTS} bind-mounted for this bench only); "
                         "every contender uses its default system trust", mounted=True)
    else:
        problem = f"the default CA file is {paths.cafile}, not {SYSTEM_CERTS / BUNDLE}"
    return Trust(f"{what}, through SSL_CERT_FILE/SSL_CERT_DIR for every contender (system store not replaceable: "
                 f"{problem}; ours then parses the bundle file, which it does not in production)",
                 env={"SSL_CERT_FILE": str(store / BUNDLE), "SSL_CERT_DIR": str(store)})
