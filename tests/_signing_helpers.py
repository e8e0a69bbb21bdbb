"""Keys and certificates made in the tests (cryptography), and envelopes taken apart."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _write(path: Path, key: Any) -> tuple[Path, Path]:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    pub = path.with_suffix(".pub.pem")
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return path, pub


def ed25519_key(path: Path) -> tuple[Path, Path]:
    """(private PEM, public PEM) of a new Ed25519 key."""
    return _write(path, ed25519.Ed25519PrivateKey.generate())


def ecdsa_key(path: Path, curve: ec.EllipticCurve | None = None) -> tuple[Path, Path]:
    """(private PEM, public PEM) of a new ECDSA key (P-256 unless told)."""
    return _write(path, ec.generate_private_key(curve or ec.SECP256R1()))


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def ca_and_leaf(folder: Path, *, expired: bool = False, email: str = "release@example.org") -> dict[str, Path]:
    """A CA and a code-signing leaf it issued (EC P-256): the files model-signing's certificate method takes."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("specreg test CA"))
        .issuer_name(_name("specreg test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=30))
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    start, end = (
        (now - timedelta(days=20), now - timedelta(days=10))
        if expired
        else (now - timedelta(days=1), now + timedelta(days=30))
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name("model publisher"))
        .issuer_name(ca.subject)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.RFC822Name(email)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    out = {"ca": folder / "ca.pem", "leaf": folder / "leaf.pem", "key": folder / "leaf-key.pem"}
    out["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out["leaf"].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    out["key"].write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return out


def statement(envelope: bytes) -> dict[str, Any]:
    return json.loads(base64.b64decode(json.loads(envelope)["payload"]))
