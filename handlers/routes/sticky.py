"""The encrypted ``_backend`` sticky-session cookie.

Flynn seals the backend address with NaCl secretbox under a 32-byte router-wide key; we use
AES-256-GCM with a 12-byte random nonce (``base64(nonce || ciphertext)``), same idea, a library
already in the dependency set. A cookie that does not decode or authenticate is ignored.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from pathlib import Path

from crhelper.config import env_base64

from .repository import router_dir

COOKIE_NAME = "_backend"
KEY_ENV = "CRHELPER_ROUTER_COOKIE_KEY"
NONCE_BYTES = 12
KEY_BYTES = 32


def load_key(explicit: bytes | None = None) -> bytes:
    """The 32-byte key: explicit, else ``$CRHELPER_ROUTER_COOKIE_KEY`` (Base64), else a key file
    created once under the state directory so restarts keep existing sessions sticky.
    A bad key raises ValueError (ConfigError for the variable) naming the rule, never the key."""
    if explicit is not None:
        return _checked(explicit, "the cookie key")
    configured = env_base64(os.environ, KEY_ENV, KEY_BYTES)
    if configured is not None:
        return configured
    path: Path = router_dir() / "cookie.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(KEY_BYTES))
    return _checked(path.read_bytes(), f"the cookie key file {path}")


def _checked(key: bytes, what: str) -> bytes:
    if len(key) != KEY_BYTES:
        raise ValueError(f"{what} must hold {KEY_BYTES} bytes, got {len(key)}")
    return key


class CookieSealer:
    """Seal and open backend addresses."""

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(key)
        self.key = key  # router worker processes are given the same key (never logged)

    def seal(self, addr: str) -> str:
        nonce = secrets.token_bytes(NONCE_BYTES)
        return base64.b64encode(nonce + self._aead.encrypt(nonce, addr.encode(), None)).decode()

    def open(self, value: str) -> str | None:
        """The backend address, or None for anything that is not a cookie we sealed."""
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.b64decode(value, validate=True)
            if len(raw) <= NONCE_BYTES:
                return None
            return self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], None).decode()
        except (binascii.Error, ValueError, InvalidTag, UnicodeDecodeError):
            return None
