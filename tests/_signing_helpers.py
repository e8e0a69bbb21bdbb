"""Keys and certificates made in the tests (cryptography), and envelopes taken apart."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
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


@dataclass
class Issued:
    """A certificate and its private key (EC P-256)."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def subject(self) -> str:
        return self.cert.subject.rfc4514_string()


def issue(
    cn: str,
    issuer: Issued | None,
    days: tuple[int, int],
    *,
    ca: bool = True,
    path_length: int | None = None,
    cert_sign: bool = True,
    email: str | None = None,
) -> Issued:
    """A certificate valid from `days[0]` to `days[1]` days from now, issued by `issuer` (None:
    self-signed); a CA by default (basicConstraints, keyUsage keyCertSign unless `cert_sign` is
    False), else a code-signing certificate for `email`."""
    now = datetime.now(UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer.cert.subject if issuer else _name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + timedelta(days=days[0]))
        .not_valid_after(now + timedelta(days=days[1]))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length if ca else None), critical=True)
    )
    if ca:
        usage = x509.KeyUsage(True, False, False, False, False, cert_sign, True, False, False)
        b = b.add_extension(usage, critical=True)
    else:
        b = b.add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        san = x509.SubjectAlternativeName([x509.RFC822Name(email or f"{cn}@example.org")])
        b = b.add_extension(san, critical=False)
    return Issued(b.sign(issuer.key if issuer else key, hashes.SHA256()), key)


def pem_files(folder: Path, name: str, *certs: Issued) -> Path:
    """The certificates as one PEM file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.pem"
    path.write_bytes(b"".join(c.cert.public_bytes(serialization.Encoding.PEM) for c in certs))
    return path


def sign_model_with(model: Path, leaf: Issued, chain: list[Issued], sig: Path) -> Path:
    """`model` signed by the model-signing reference's certificate method: `leaf` with its key,
    `chain` (the intermediates) embedded in the signature."""
    import model_signing

    folder = sig.parent / f"{sig.stem}-pki"
    key = folder / "leaf-key.pem"
    folder.mkdir(parents=True, exist_ok=True)
    pkcs8 = serialization.PrivateFormat.PKCS8
    key.write_bytes(leaf.key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption()))
    model_signing.signing.Config().use_certificate_signer(
        private_key=key,
        signing_certificate=pem_files(folder, "leaf", leaf),
        certificate_chain=[pem_files(folder, "chain", *chain)] if chain else [],
    ).sign(model, sig)
    return sig
