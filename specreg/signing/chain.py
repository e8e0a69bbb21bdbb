"""A model signature's certificate chain, checked whole: now, and when the signature was made.

model-signing verifies the chain at one instant only, the signing certificate's notBefore,
which whoever issued that certificate chose. Offline there is no timestamp authority, so that
is the only signing time a signature carries; checked alone, it lets the holder of a retired
CA key mint a certificate dated inside the CA's old validity and sign with it today. Here
every certificate from the signer up to the trust anchor must be valid at both instants, and
each issuer must be a CA (basicConstraints CA=true, keyUsage keyCertSign where the extension is
present, path length): OpenSSL's own chain verification (pyOpenSSL, as model-signing uses it)
at each time, then each certificate's dates read again here, so the promise does not rest on a
verifier flag. A failure names the certificate: its role, subject and notAfter.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specreg.errors import SignatureError

if TYPE_CHECKING:
    from cryptography import x509

MAX_CHAIN = 10  # a signer, a few intermediates: a longer list is not a chain anyone issues


def signature_chain(sig: Path, material: dict[str, Any]) -> list[x509.Certificate]:
    """The certificates a Sigstore bundle's verification material carries, the signer's first."""
    from cryptography import x509

    chain = material.get("x509CertificateChain")
    certs = chain.get("certificates") if isinstance(chain, dict) else None
    if not isinstance(certs, list) or not certs:
        single = material.get("certificate")
        certs = [single] if isinstance(single, dict) else []
    if not certs:
        if "publicKey" in material:
            raise SignatureError(
                f"{sig}: this model signature was made with a key, not a certificate; "
                "verify it with the signer's public key"
            )
        raise SignatureError(f"{sig}: the model signature carries no signing certificate")
    if len(certs) > MAX_CHAIN:
        raise SignatureError(f"{sig}: the signature carries {len(certs)} certificates, more than a chain ({MAX_CHAIN})")
    out = []
    for i, entry in enumerate(certs):
        raw = entry.get("rawBytes") if isinstance(entry, dict) else None
        try:
            out.append(x509.load_der_x509_certificate(base64.b64decode(str(raw), validate=True)))
        except ValueError:
            what = "the signing certificate" if i == 0 else f"certificate {i + 1} of the signature's chain"
            raise SignatureError(f"{sig}: {what} is malformed") from None
    return out


_MISSING = "was issued by a certificate that is neither in the signature nor among the trust anchors given"
_SELF = "is self-signed and not among the trust anchors given"
# OpenSSL's words for a failed check (X509_verify_cert_error_string: the codes differ between
# OpenSSL releases, the words do not), said of the certificate it failed at
_WHY = {
    "unable to get local issuer certificate": _MISSING,
    "unable to get issuer certificate": _MISSING,
    "self-signed certificate": _SELF,
    "self signed certificate": _SELF,
    "self-signed certificate in certificate chain": _SELF,
    "self signed certificate in certificate chain": _SELF,
    "invalid CA certificate": "may not issue certificates (it needs basicConstraints CA=true, and keyCertSign "
    "in its keyUsage)",
    "key usage does not include certificate signing": "may not sign certificates (its keyUsage lacks keyCertSign)",
    "path length constraint exceeded": "issued a longer chain below it than its path length allows",
    "certificate signature failure": "carries a signature its issuer's key did not make",
}


def _named(cert: x509.Certificate, role: str) -> str:
    return f"{role} {cert.subject.rfc4514_string() or '(no subject)'} (notAfter {cert.not_valid_after_utc:%Y-%m-%d})"


def _role(cert: x509.Certificate, depth: int, anchors: list[x509.Certificate]) -> str:
    if depth == 0:
        return "the signing certificate"
    if cert in anchors:
        return "the trust anchor"
    return "the root certificate" if cert.issuer == cert.subject else "the intermediate certificate"


def _dates(cert: x509.Certificate, when: datetime, past: bool) -> str | None:
    """Why `cert` is not valid at `when`, or None when it is."""
    if cert.not_valid_after_utc < when:
        return "had expired" if past else "has expired"
    if cert.not_valid_before_utc > when:
        return "was not valid yet" if past else "is not valid yet"
    return None


def _refusal(sig: Path, cert: x509.Certificate, role: str, when: datetime, said: str, text: str = "") -> SignatureError:
    dates = _dates(cert, when, past=said != "now")
    if dates is not None:
        return SignatureError(
            f"{sig}: {_named(cert, role)} {dates}: every certificate up to the trust anchor must be valid {said}"
        )
    why = _WHY.get(text, f"fails the chain check (OpenSSL: {text})")
    return SignatureError(f"{sig}: the certificate chain does not verify: {_named(cert, role)} {why}")


def check_chain(sig: Path, chain: list[x509.Certificate], anchors: list[x509.Certificate]) -> None:
    """Every certificate from `chain[0]` (the signer) to one of `anchors` valid now and at the
    signing time, with its CA constraints; raises SignatureError naming the certificate."""
    from OpenSSL import crypto

    leaf, rest = chain[0], chain[1:]
    signed_at = leaf.not_valid_before_utc
    instants = (
        (datetime.now(UTC), "now"),
        (signed_at, f"when it signed ({signed_at:%Y-%m-%d %H:%M} UTC, the signing certificate's notBefore)"),
    )
    for when, said in instants:
        store = crypto.X509Store()
        for a in anchors:
            store.add_cert(crypto.X509.from_cryptography(a))
        store.set_time(when)
        ctx = crypto.X509StoreContext(
            store, crypto.X509.from_cryptography(leaf), [crypto.X509.from_cryptography(c) for c in rest]
        )
        try:
            path = [c.to_cryptography() for c in ctx.get_verified_chain()]
        except crypto.X509StoreContextError as exc:
            _, depth, text = exc.errors
            cert = exc.certificate.to_cryptography()
            raise _refusal(sig, cert, _role(cert, int(depth), anchors), when, said, str(text)) from None
        for depth, cert in enumerate(path):  # OpenSSL checked the dates; the promise is ours: read them again
            if _dates(cert, when, False) is not None:
                raise _refusal(sig, cert, _role(cert, depth, anchors), when, said)


__all__ = ["check_chain", "signature_chain"]
