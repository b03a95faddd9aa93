"""A throwaway RSA key and self-signed X.509 certificate for signing local MNS pushes.

Real MNS signs pushes with RSA-SHA1 and publishes its certificate by URL; the local
endpoint does the same with a key made at start so the push verifier is exercised
for real, never against a mock.
"""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class SigningIdentity:
    """The private key and its PEM certificate."""

    key: rsa.RSAPrivateKey
    cert_pem: bytes

    def sign_b64(self, text: str) -> str:
        """base64(RSA-SHA1(text)), the value MNS puts in a push's Authorization header."""
        signature = self.key.sign(text.encode("utf-8"), padding.PKCS1v15(), hashes.SHA1())  # noqa: S303
        return base64.b64encode(signature).decode("ascii")


def make_signing_identity(common_name: str = "local-mns-push-signer", valid_days: int = 7) -> SigningIdentity:
    """Generate a 2048-bit RSA key and a self-signed certificate valid from one hour ago."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .sign(key, hashes.SHA256())
    )
    return SigningIdentity(key=key, cert_pem=cert.public_bytes(serialization.Encoding.PEM))
