"""Keys and DSSE envelopes: sign an in-toto Statement v1, and open one whose signature checks out.

The cryptography is securesystemslib's (CryptoSigner, SSlibKey, dsse.Envelope over pyca
`cryptography`), not ours: specreg only decides which key, which bytes, and what a failure says.
Keys are PEM files, Ed25519 or ECDSA (P-256/P-384). A key id is securesystemslib's default (the
SHA-256 of the public key's canonical form), so a policy can name a signer by PEM file or by id.

The envelope's statement carries the signer's public key inside the signed payload. That lets
`import` check every signature without being told any key (integrity of the claim and who
holds the key that made it); whether that key is trusted is the policy's question, asked by
key id, never by the key's own say-so.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specreg.errors import SIGNING_EXTRA, SignatureError
from specreg.signing.model_signature import read_signing_input

if TYPE_CHECKING:
    from securesystemslib.signer import Signer, SSlibKey

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
MAX_KEY_BYTES = 64 << 10  # a PEM key or certificate is a few hundred bytes
MAX_ENVELOPE_BYTES = 16 << 20  # ~4,000 runs' subjects and predicate entries; 100 MB is refused unread
KEY_ID = re.compile(r"[0-9a-f]{64}")
EXTRA = f"signing needs the optional extra: {SIGNING_EXTRA}"


def need_extra() -> None:
    """Raise the one-line error naming the extra when securesystemslib or cryptography is missing."""
    try:
        import cryptography  # noqa: F401
        import securesystemslib.dsse
        import securesystemslib.signer  # noqa: F401
    except ImportError:
        raise SignatureError(EXTRA) from None


def _pem(path: str | Path, what: str) -> bytes:
    return read_signing_input(path, MAX_KEY_BYTES, what)


def _supported(key: Any, path: str | Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and key.curve.name in (
        "secp256r1",
        "secp384r1",
    ):
        return
    raise SignatureError(f"{path}: not an Ed25519 or ECDSA P-256/P-384 key", hint="see docs/security.md: making a key")


def load_signer(path: str | Path) -> Signer:
    """A signer from an unencrypted PEM private key (PKCS#8 or the key type's own PEM)."""
    need_extra()
    from cryptography.hazmat.primitives import serialization
    from securesystemslib.signer import CryptoSigner

    data = _pem(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # what cryptography raises for an encrypted key without a password
        raise SignatureError(f"{path}: the private key is encrypted; give an unencrypted PEM key") from None
    except Exception:  # ValueError (not PEM, damaged), UnsupportedAlgorithm
        raise SignatureError(f"{path}: not a PEM private key (Ed25519 or ECDSA)") from None
    _supported(key, path)
    return CryptoSigner(key)


def public_key(pem: bytes, where: str) -> SSlibKey:
    """The securesystemslib key of a PEM public key (or of a private key's public half)."""
    need_extra()
    from cryptography.hazmat.primitives import serialization
    from securesystemslib.signer import SSlibKey

    key: Any
    try:
        key = serialization.load_pem_public_key(pem)
    except Exception:
        try:
            key = serialization.load_pem_private_key(pem, password=None).public_key()
        except Exception:
            raise SignatureError(f"{where}: not a PEM public key") from None
    _supported(key, where)
    return SSlibKey.from_crypto(key)


def public_pem(signer: Signer) -> str:
    """The signer's public key as PEM text (what an envelope's statement carries)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = signer.public_key
    value = key.keyval["public"]  # securesystemslib's form: raw hex for ed25519, PEM for ECDSA
    pub: Any = (
        ed25519.Ed25519PublicKey.from_public_bytes(bytes.fromhex(value))
        if key.keytype == "ed25519"
        else serialization.load_pem_public_key(value.encode())
    )
    return pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def key_id(signer: Signer) -> str:
    return str(signer.public_key.keyid)


def resolve_key_id(value: str, base: Path | None) -> str:
    """A policy's signer value: a key id as it is, a PEM file (relative to `base`) as its key id."""
    if KEY_ID.fullmatch(value):
        return value
    p = Path(value).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    return str(public_key(_pem(p, "public key"), str(p)).keyid)


def sign_statement(statement: dict[str, Any], signer: Signer) -> bytes:
    """The DSSE envelope (JSON bytes) of one statement, signed by `signer`."""
    from securesystemslib.dsse import Envelope

    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    env = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    env.sign(signer)
    return json.dumps(env.to_dict(), sort_keys=True, indent=1).encode() + b"\n"


@dataclass(frozen=True)
class Opened:
    """An envelope whose signature verified against the key its statement carries."""

    key_id: str
    statement: dict[str, Any]


def _bad(where: str, why: str) -> SignatureError:
    return SignatureError(f"{where}: {why}")


def open_envelope(data: bytes, where: str, predicate_type: str) -> Opened:
    """Parse a DSSE envelope of at most MAX_ENVELOPE_BYTES, check its one signature with the public
    key its statement names, and return the statement. Anything wrong raises SignatureError."""
    need_extra()
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError

    if len(data) > MAX_ENVELOPE_BYTES:
        raise _bad(where, f"envelope is larger than {MAX_ENVELOPE_BYTES >> 20} MiB")
    try:
        raw = json.loads(data)
    except RecursionError:
        raise _bad(where, "envelope is nested too deeply") from None
    except ValueError:
        raise _bad(where, "not a DSSE envelope (not JSON, or truncated)") from None
    if not isinstance(raw, dict) or raw.get("payloadType") != PAYLOAD_TYPE:
        raise _bad(where, f"not a DSSE envelope of an in-toto statement (payloadType is not {PAYLOAD_TYPE})")
    sigs = raw.get("signatures")
    if not isinstance(sigs, list) or len(sigs) != 1 or not isinstance(sigs[0], dict):
        raise _bad(where, "a specreg envelope carries exactly one signature")
    sig_keyid = sigs[0].get("keyid")
    try:
        env = Envelope.from_dict(copy.deepcopy(raw))  # from_dict pops the fields it reads
        statement = json.loads(base64.b64decode(raw["payload"], validate=True))
    except RecursionError:
        raise _bad(where, "statement is nested too deeply") from None
    except (ValueError, KeyError, TypeError, AttributeError):
        raise _bad(where, "envelope payload is not a base64 JSON statement") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise _bad(where, "payload is not an in-toto Statement v1")
    if statement.get("predicateType") != predicate_type:
        raise _bad(where, f"statement's predicateType is not {predicate_type}")
    pred = statement.get("predicate")
    signer = pred.get("signer") if isinstance(pred, dict) else None
    signer = signer if isinstance(signer, dict) else {}
    pem = signer.get("public_key")
    if not isinstance(pem, str):
        raise _bad(where, "statement names no signer public key")
    key = public_key(pem.encode(), f"{where}: the statement's signer key")
    try:
        env.verify([key], 1)
    except VerificationError:
        raise _bad(
            where, f"signature does not verify with key {key.keyid[:16]} (altered payload or signature)"
        ) from None
    except Exception as exc:  # a malformed signature value (not base64, wrong length)
        raise _bad(where, f"signature is malformed ({type(exc).__name__})") from None
    if sig_keyid != key.keyid or signer.get("keyid") != key.keyid:  # signed, yet labelled as another key's
        raise _bad(where, "the signature's key id is not the id of the key the statement names")
    return Opened(key_id=str(key.keyid), statement=statement)


__all__ = [
    "EXTRA",
    "MAX_ENVELOPE_BYTES",
    "Opened",
    "key_id",
    "load_signer",
    "need_extra",
    "open_envelope",
    "public_key",
    "public_pem",
    "resolve_key_id",
    "sign_statement",
]
