"""Surface: signatures - a signed bundle's DSSE envelope and a model's OpenSSF signature, damaged.

A real bundle (the bundle surface's seed) signed with an Ed25519 key made here, imported into
a copy of a registry that already holds records (with and without a policy naming the key);
and a real GGUF signed by model-signing with an ECDSA key (and by a certificate that expired),
registered with `--verify-signature`. The edits: a flipped byte of the payload, the signature
or anywhere in the envelope's bytes; a truncated, empty, 100 MB or non-JSON envelope; a valid
envelope naming a run the bundle lacks, copied onto another bundle, or filed under another
key's name; a key outside the policy, alone or beside the trusted one (both import); a model
signature with a flipped byte, a cut, a malformed or an expired certificate, a backdated
certificate from a retired intermediate, a key's signature checked with a CA. Every outcome
goes to the one oracle (fuzz.oracle): a result or one `error:` line, and the registry unchanged
when refused.
"""

from __future__ import annotations

import base64
import io
import json
import zipfile
from pathlib import Path
from typing import Any

from fuzz.oracle import Case

Members = dict[str, bytes]


class Signed:
    """The signed seed bundle, its key and policy, and a signed model, built once per folder."""

    def __init__(self, work: Path, seed: bytes, dest: Path, gguf: Path) -> None:
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from _signing_helpers import ca_and_leaf, ecdsa_key, ed25519_key, issue, pem_files, sign_model_with

        from specreg.exchange.bundle_signatures import envelope_name
        from specreg.exchange.bundle_signer import sign_bundle
        from specreg.signing.dsse import key_id, load_signer

        work.mkdir(parents=True, exist_ok=True)
        self.work, self.dest = work, dest
        priv, _ = ed25519_key(work / "signer.pem")
        self.priv = priv
        plain = work / "plain.zip"
        plain.write_bytes(seed)
        signer = load_signer(priv)
        sign_bundle(plain, signer, work / "signed.zip")
        self.bundle = (work / "signed.zip").read_bytes()
        self.name = envelope_name(key_id(signer))
        self.policy = work / "trust.toml"
        self.policy.write_text(f'[trust]\nsigners = {{ fuzz = "{key_id(signer)}" }}\nrequire_signed_evidence = true\n')
        self.other_policy = work / "other.toml"
        self.other_policy.write_text('[trust]\nsigners = { nobody = "' + "0" * 64 + '" }\n')
        # the trusted signature and a stranger's beside it (anyone in transit can add an envelope)
        stranger, _ = ed25519_key(work / "stranger.pem")
        sign_bundle(work / "signed.zip", load_signer(stranger), work / "cosigned.zip")
        self.cosigned = (work / "cosigned.zip").read_bytes()
        import model_signing

        self.gguf = gguf
        mpriv, self.model_pub = ecdsa_key(work / "model.pem")
        self.model_sig = work / "model.sig"
        model_signing.signing.Config().use_elliptic_key_signer(private_key=mpriv).sign(gguf, self.model_sig)
        # a backdated certificate from a retired intermediate: valid today, its issuer expired
        root = issue("fuzz root", None, (-400, 400))
        retired = issue("fuzz retired intermediate", root, (-300, -10))
        leaf = issue("fuzz publisher", retired, (-100, 30), ca=False)
        self.root_pem = pem_files(work, "root", root)
        self.backdated_sig = sign_model_with(gguf, leaf, [retired], work / "backdated.sig")
        pki = ca_and_leaf(work / "old-pki", expired=True)
        self.old_ca = pki["ca"]
        self.old_sig = work / "old.sig"
        model_signing.signing.Config().use_certificate_signer(
            private_key=pki["key"], signing_certificate=pki["leaf"], certificate_chain=[pki["ca"]]
        ).sign(gguf, self.old_sig)

    def members(self) -> Members:
        with zipfile.ZipFile(io.BytesIO(self.bundle)) as zf:
            return {n: zf.read(n) for n in zf.namelist()}


def pack(m: Members) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for n, b in m.items():
            zf.writestr(zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0)), b, compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def _envelope_edit(env: bytes, what: str) -> bytes:
    raw = json.loads(env)
    field = "payload" if what == "payload" else "sig"
    holder = raw if what == "payload" else raw["signatures"][0]
    blob = bytearray(base64.b64decode(holder[field]))
    at = blob.index(b'"sha256":"') + 10 if what == "payload" else 7
    blob[at] ^= 0x01
    holder[field] = base64.b64encode(bytes(blob)).decode()
    return json.dumps(raw).encode()


def bundle_input(s: Signed, kind: str, at: float = 0.5) -> tuple[bytes, str | None]:
    """(the bundle bytes, the policy the import gets: "trusted", "other" or none) for one named edit."""
    from specreg.signing.dsse import load_signer, sign_statement

    m = s.members()
    env = m[s.name]
    if kind == "seed":
        return s.bundle, None
    if kind == "seed-policy":
        return s.bundle, "trusted"
    if kind == "unknown-key":
        return s.bundle, "other"
    if kind == "unknown-cosigner":  # recorded, ignored for trust: imports as the trusted signature alone does
        return s.cosigned, "trusted"
    if kind in ("payload", "signature"):
        m[s.name] = _envelope_edit(env, "payload" if kind == "payload" else "sig")
    elif kind == "flip":
        buf = bytearray(env)
        buf[min(len(buf) - 1, int(at * len(buf)))] ^= 0xFF
        m[s.name] = bytes(buf)
    elif kind == "cut":
        m[s.name] = env[: int(at * len(env))]
    elif kind == "huge":
        m[s.name] = b" " * (100 << 20)
    elif kind == "not-json":
        m[s.name] = b"\x00\xff" * 64
    elif kind == "extra-run":
        st = json.loads(base64.b64decode(json.loads(env)["payload"]))
        st["subject"].append({"name": "runs/not-in-this-bundle", "digest": {"sha256": "ab" * 32}})
        m[s.name] = sign_statement(st, load_signer(s.priv))
    elif kind == "copied":  # the envelope on another bundle: the same records, another manifest
        from specreg.exchange.bundle_format import HEADER, BundleHeader

        header = json.loads(m["bundle.json"])
        header["created_at"] = "2030-01-01T00:00:00+00:00"
        header["digest"] = BundleHeader.model_validate(header).body_digest()
        m[HEADER] = json.dumps(header).encode()
    elif kind == "misfiled":
        m["signatures/" + "0" * 64 + ".intoto.json"] = m.pop(s.name)
    else:
        raise ValueError(kind)
    return pack(m), None


def model_input(s: Signed, kind: str, at: float = 0.5) -> tuple[bytes, Path]:
    """(the signature bytes, the trust PEM) for one named model-signature edit."""
    sig, pem = s.model_sig.read_bytes(), s.model_pub
    if kind == "model-seed":
        return sig, pem
    if kind == "model-flip":
        buf = bytearray(sig)
        buf[min(len(buf) - 1, int(at * len(buf)))] ^= 0xFF
        return bytes(buf), pem
    if kind == "model-cut":
        return sig[: int(at * len(sig))], pem
    if kind == "model-expired":
        return s.old_sig.read_bytes(), s.old_ca
    if kind == "model-backdated":
        return s.backdated_sig.read_bytes(), s.root_pem
    if kind == "model-key-as-certificate":  # a key's signature checked with a CA
        return sig, s.root_pem
    if kind == "model-malformed-cert":
        raw = json.loads(s.old_sig.read_bytes())
        cert = raw["verificationMaterial"]["x509CertificateChain"]["certificates"][0]
        cert["rawBytes"] = cert["rawBytes"][: int(at * len(cert["rawBytes"]))]
        return json.dumps(raw).encode(), s.old_ca
    raise ValueError(kind)


def cases(s: Signed, recipes: list[tuple[str, dict[str, Any]]], work: Path, empty_db: Path) -> list[Case]:
    work.mkdir(parents=True, exist_ok=True)
    out: list[Case] = []
    for name, r in recipes:
        kind, at = r["kind"], float(r.get("at", 0.5))
        db = work / f"{name}.db"
        if kind.startswith("model-"):
            sig_bytes, pem = model_input(s, kind, at)
            sig = work / f"{name}.sig"
            sig.write_bytes(sig_bytes)
            argv = ["--db", str(db), "register", str(s.gguf), "--verify-signature", str(pem), "--signature", str(sig)]
            out.append(Case(id=f"signature:{name}", argv=argv, db=str(db), copy_db_from=str(empty_db)))
            continue
        data, policy = bundle_input(s, kind, at)
        path = work / f"{name}.zip"
        path.write_bytes(data)
        pol = {"trusted": ["--policy", str(s.policy)], "other": ["--policy", str(s.other_policy)]}.get(policy or "", [])
        argv = ["--db", str(db), "import", *pol, str(path)]
        out.append(Case(id=f"signature:{name}", argv=argv, db=str(db), copy_db_from=str(s.dest)))
    return out


RANDOM_KINDS = ("flip", "cut", "model-flip", "model-cut", "model-malformed-cert")
