"""OpenSSF model signatures on GGUF files: verify one offline, say who signed it.

The verification is the `model-signing` package's own (a Sigstore bundle holding a DSSE
envelope whose statement lists the file's SHA-256), with its two offline methods: an elliptic
public key, or a certificate chain up to a CA the user names. specreg adds what the library
leaves to its caller: which signature file (FILE.sig, else model.sig beside it), that the
signed digest is the SHA-256 the registry records, that every certificate of the chain is valid
now and when it signed (signing/chain.py: model-signing checks the chain at the signing
certificate's start date only), and the identity in words: the key's SHA-256 fingerprint, or
the certificate's subject and issuer. That identity goes into the artifact's
provenance (`provenance.extra["model_signature"]`), which check pair, audit and the ML-BOM read.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specreg.errors import SIGNING_EXTRA, SignatureError
from specreg.paths import read_regular
from specreg.signing.chain import check_chain, signature_chain

PROVENANCE_KEY = "model_signature"
MAX_SIGNATURE_BYTES = 4 << 20  # a Sigstore bundle of one file's manifest is a few KB
MAX_PEM_BYTES = 256 << 10
NEEDS_EXTRA = f"model signatures need the optional extra: {SIGNING_EXTRA}"


def signature_identity(extra: dict[str, Any], sha256: str) -> str | None:
    """The recorded signer of the model with this SHA-256 (from its provenance extra), or None
    when unsigned or when the signature was verified over other bytes than these."""
    sig = extra.get(PROVENANCE_KEY)
    if not isinstance(sig, dict) or sig.get("signed_sha256") != sha256:
        return None
    ident = sig.get("identity")
    return ident if isinstance(ident, str) else None


def find_signature(model: Path, given: Path | None) -> Path:
    """The signature file: `given`, else MODEL.sig, else model.sig in the model's folder."""
    if given is not None:
        return given
    for cand in (model.with_name(model.name + ".sig"), model.with_name("model.sig")):
        if cand.is_file():
            return cand
    raise SignatureError(
        f"{model}: no model signature found ({model.name}.sig or model.sig beside it)",
        hint="name it with --signature FILE",
    )


def read_signing_input(path: str | Path, limit: int, what: str) -> bytes:
    """A key, certificate or signature file: a regular file of at most `limit` bytes, or one line."""
    try:
        return read_regular(path, limit)
    except FileNotFoundError:
        raise SignatureError(f"{path}: {what} not found") from None
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise SignatureError(f"{path}: cannot read {what}: {why}") from None


def _bundle_parts(sig: Path, data: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """(verification material, statement) of a Sigstore bundle, read as plain JSON."""
    try:
        raw = json.loads(data)
        material = raw["verificationMaterial"]
        payload = json.loads(base64.b64decode(raw["dsseEnvelope"]["payload"], validate=True))
    except RecursionError:
        raise SignatureError(f"{sig}: not a Sigstore bundle (nested too deeply)") from None
    except (ValueError, KeyError, TypeError):
        raise SignatureError(f"{sig}: not a Sigstore bundle of a model signature") from None
    if not isinstance(material, dict) or not isinstance(payload, dict):
        raise SignatureError(f"{sig}: not a Sigstore bundle of a model signature")
    return material, payload


def _signed_sha256(sig: Path, statement: dict[str, Any]) -> str:
    """The file digest the signature covers: one resource (a single-file model), SHA-256."""
    pred = statement.get("predicate")
    res = pred.get("resources") if isinstance(pred, dict) else None
    if not isinstance(res, list) or len(res) != 1 or not isinstance(res[0], dict):
        raise SignatureError(f"{sig}: the signature does not cover exactly one file")
    if res[0].get("algorithm") != "sha256" or not isinstance(res[0].get("digest"), str):
        raise SignatureError(f"{sig}: the signature's file digest is not SHA-256")
    return str(res[0]["digest"])


def _cert_identity(cert: Any) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(v) for v in san.get_values_for_type(x509.RFC822Name)]
        names += [str(v) for v in san.get_values_for_type(x509.UniformResourceIdentifier)]
    except x509.ExtensionNotFound:
        pass
    cn = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    issuer = [str(a.value) for a in cert.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return (names or cn or [cert.subject.rfc4514_string()])[0], (issuer or [cert.issuer.rfc4514_string()])[0]


def verify_model(model: str | Path, trust_pem: str | Path, signature: str | Path | None = None) -> dict[str, Any]:
    """Verify `model`'s OpenSSF signature with a public key or a CA certificate (chain) PEM; the
    provenance record of who signed it. Raises SignatureError with one line saying what failed."""
    try:
        import model_signing
        from cryptography import x509
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes, serialization
    except ImportError:
        raise SignatureError(NEEDS_EXTRA) from None
    path = Path(model)
    sig = find_signature(path, Path(signature) if signature is not None else None)
    pem = read_signing_input(Path(trust_pem), MAX_PEM_BYTES, "key or certificate")
    material, statement = _bundle_parts(sig, read_signing_input(sig, MAX_SIGNATURE_BYTES, "model signature"))
    config = model_signing.verifying.Config()
    record: dict[str, Any] = {"signature": str(sig.resolve())}
    if b"-----BEGIN CERTIFICATE-----" in pem:
        try:
            anchors = x509.load_pem_x509_certificates(pem)
        except ValueError:
            raise SignatureError(f"{trust_pem}: not a PEM certificate chain") from None
        chain = signature_chain(sig, material)
        check_chain(sig, chain, anchors)
        leaf = chain[0]
        identity, issuer = _cert_identity(leaf)
        config.use_certificate_verifier(certificate_chain=[Path(trust_pem)])
        record |= {"method": "certificate", "identity": identity, "issuer": issuer}
        record["certificate_sha256"] = leaf.fingerprint(hashes.SHA256()).hex()
    else:
        try:
            key = serialization.load_pem_public_key(pem)
        except Exception:
            raise SignatureError(f"{trust_pem}: not a PEM public key or certificate") from None
        if "publicKey" not in material and "x509CertificateChain" in material:
            raise SignatureError(
                f"{sig}: this model signature was made with a certificate, not a key; "
                "verify it with the certificate of the CA that issued it"
            )
        der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        fingerprint = hashlib.sha256(der).hexdigest()
        config.use_elliptic_key_verifier(public_key=Path(trust_pem))
        record |= {"method": "key", "identity": f"key sha256:{fingerprint[:16]}", "key_sha256": fingerprint}
    try:
        with contextlib.redirect_stdout(sys.stderr):  # model-signing prints its warnings: never into --json
            config.verify(path, sig)
    except (ValueError, InvalidSignature) as exc:  # what model-signing raises for a signature that fails
        why = " ".join(str(exc).split())[:160] or "the signature does not match"
        raise SignatureError(f"{path}: model signature {sig.name} does not verify ({why})") from None
    except Exception as exc:  # anything else: a bundle of a shape its code does not expect
        raise SignatureError(
            f"{path}: model signature {sig.name} cannot be checked: it is not a signature in the form "
            f"model-signing writes ({type(exc).__name__})"
        ) from None
    record["signed_sha256"] = _signed_sha256(sig, statement)
    record["verified_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return record


__all__ = ["PROVENANCE_KEY", "find_signature", "signature_identity", "verify_model"]
