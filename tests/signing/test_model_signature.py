"""Signed models: `register --verify-signature` checks a GGUF's OpenSSF model signature offline.

The signatures are made by the reference tool itself (`model_signing` CLI for the key method,
its API for the certificate method) with keys and a CA made here; specreg verifies them, and
model_signing's own verifier agrees with specreg on a good and on a tampered file. The identity
lands in provenance and shows in check pair, the audit's integrity gate and the ML-BOM.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _audit_world import AuditWorld, specreg
from _bundle_helpers import dump
from _signing_helpers import Issued, ca_and_leaf, ecdsa_key, issue, pem_files, sign_model_with

from specreg.testing import ModelSpec, write_model

CLI = Path(sys.executable).with_name("model_signing")


def _ms(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=120)


def _sign_key(model: Path, priv: Path, sig: Path) -> None:
    done = _ms("sign", "key", "--private_key", str(priv), "--signature", str(sig), str(model))
    assert done.returncode == 0, done.stderr


def _sign_cert(model: Path, pki: dict[str, Path], sig: Path) -> None:
    import model_signing

    model_signing.signing.Config().use_certificate_signer(
        private_key=pki["key"], signing_certificate=pki["leaf"], certificate_chain=[pki["ca"]]
    ).sign(model, sig)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_model(tmp_path / "m" / "target.gguf", ModelSpec())


def test_key_signature_from_the_reference_cli_is_verified_and_recorded(model: Path, tmp_path: Path) -> None:
    priv, pub = ecdsa_key(tmp_path / "publisher.pem")
    _sign_key(model, priv, model.with_name("target.gguf.sig"))
    db = tmp_path / "r.db"
    code, out, err = specreg("register", str(model), "--verify-signature", str(pub), db=db)
    assert code == 0, err
    assert "model signature verified: signed by key sha256:" in out
    code, out, _ = specreg("artifacts", "--json", db=db)
    sig = json.loads(out)[0]["provenance"]["extra"]["model_signature"]
    assert sig["method"] == "key" and sig["signed_sha256"] == json.loads(out)[0]["sha256"]
    assert sig["identity"] == f"key sha256:{sig['key_sha256'][:16]}"
    # model_signing's own verifier agrees: this file verifies, a changed one does not (and specreg refuses it too)
    assert (
        _ms("verify", "key", "--public_key", str(pub), "--signature", str(sig["signature"]), str(model)).returncode == 0
    )
    changed = tmp_path / "changed" / "target.gguf"
    changed.parent.mkdir()
    shutil.copy(model, changed)
    with changed.open("ab") as f:
        f.write(b"\0")
    assert _ms("verify", "key", "--public_key", str(pub), "--signature", sig["signature"], str(changed)).returncode != 0
    before = dump(db)
    code, _, err = specreg(
        "register", str(changed), "--verify-signature", str(pub), "--signature", sig["signature"], db=db
    )
    assert code == 2 and "does not verify" in err and err.count("error:") == 1 and "Traceback" not in err, err
    assert dump(db) == before


def test_certificate_signature_names_the_certificate_subject(model: Path, tmp_path: Path) -> None:
    pki = ca_and_leaf(tmp_path / "pki")
    sig = tmp_path / "model.sig"
    _sign_cert(model, pki, sig)
    db = tmp_path / "r.db"
    code, out, err = specreg(
        "register", str(model), "--verify-signature", str(pki["ca"]), "--signature", str(sig), "--json", db=db
    )
    assert code == 0, err
    rec = json.loads(out)[0]["provenance"]["extra"]["model_signature"]
    assert rec["method"] == "certificate" and rec["identity"] == "release@example.org"
    assert rec["issuer"] == "specreg test CA"
    # the reference verifier takes the same signature
    done = _ms("verify", "certificate", "--certificate_chain", str(pki["ca"]), "--signature", str(sig), str(model))
    assert done.returncode == 0, done.stderr


def test_bad_signatures_are_one_line_errors_and_register_nothing(model: Path, tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    assert specreg("register", str(write_model(tmp_path / "other.gguf", ModelSpec(name="x"))), db=db)[0] == 0
    before = dump(db)
    priv, pub = ecdsa_key(tmp_path / "a.pem")
    _, stranger = ecdsa_key(tmp_path / "b.pem")
    sig = tmp_path / "k.sig"
    _sign_key(model, priv, sig)
    expired = ca_and_leaf(tmp_path / "old", expired=True)
    old_sig = tmp_path / "old.sig"
    _sign_cert(model, expired, old_sig)
    bad_cert = tmp_path / "badcert.sig"
    raw = json.loads(old_sig.read_text())
    chain = raw["verificationMaterial"]["x509CertificateChain"]["certificates"]
    chain[0]["rawBytes"] = chain[0]["rawBytes"][:40]
    bad_cert.write_text(json.dumps(raw))
    flipped = tmp_path / "flipped.sig"
    raw = json.loads(sig.read_text())
    s = raw["dsseEnvelope"]["signatures"][0]["sig"]
    raw["dsseEnvelope"]["signatures"][0]["sig"] = ("A" if s[10] != "A" else "B").join([s[:10], s[11:]])
    flipped.write_text(json.dumps(raw))
    junk_ca = tmp_path / "junk.pem"
    junk_ca.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    huge = tmp_path / "huge.sig"
    huge.write_bytes(b" " * (5 << 20))
    cases = [
        (["--verify-signature", str(stranger), "--signature", str(sig)], "does not verify"),
        (["--verify-signature", str(pub), "--signature", str(flipped)], "does not verify"),
        (["--verify-signature", str(expired["ca"]), "--signature", str(old_sig)], "CN=model publisher"),
        (["--verify-signature", str(expired["ca"]), "--signature", str(old_sig)], "has expired"),
        (["--verify-signature", str(pub), "--signature", str(old_sig)], "made with a certificate, not a key"),
        (["--verify-signature", str(expired["ca"]), "--signature", str(sig)], "made with a key, not a certificate"),
        (["--verify-signature", str(expired["ca"]), "--signature", str(bad_cert)], "certificate is malformed"),
        (["--verify-signature", str(junk_ca), "--signature", str(sig)], "not a PEM certificate chain"),
        (["--verify-signature", str(pub), "--signature", str(huge)], "larger than 4 MiB"),
        (["--verify-signature", str(pub)], "no model signature found"),
        (["--signature", str(sig)], "--signature FILE goes with --verify-signature"),
    ]
    for args, words in cases:
        code, _, err = specreg("register", str(model), *args, db=db)
        assert code == 2 and words in err and err.count("error:") == 1 and "Traceback" not in err, (args, err)
        assert dump(db) == before, args


def test_certificate_chains_are_checked_whole_now_and_when_signed(model: Path, tmp_path: Path) -> None:
    """Every certificate from the signer up to the trust anchor must be valid now and at the
    signing time (the signing certificate's notBefore: offline, the only one a signature
    carries), with its CA constraints. model-signing checks the chain at that notBefore only, so
    a retired CA's key can mint a backdated certificate that it accepts today; specreg refuses
    it, naming the certificate (subject, notAfter). Signatures by the model-signing reference."""
    db = tmp_path / "r.db"
    assert specreg("register", str(write_model(tmp_path / "other.gguf", ModelSpec(name="x"))), db=db)[0] == 0
    before = dump(db)
    w = tmp_path / "pki"
    root = issue("specreg root", None, (-400, 400))
    inter = issue("specreg intermediate", root, (-300, 300))

    def leaf_of(issuer: Issued, days: tuple[int, int]) -> Issued:
        return issue("model publisher", issuer, days, ca=False, email="pub@example.com")

    def register(tag: str, anchor: Issued, chain: list[Issued], leaf: Issued) -> tuple[int, str, Path, Path]:
        sig = sign_model_with(model, leaf, chain, w / f"{tag}.sig")
        pem = pem_files(w, f"{tag}-anchor", anchor)
        code, out, err = specreg("register", str(model), "--verify-signature", str(pem), "--signature", str(sig), db=db)
        return code, out + err, sig, pem

    retired = issue("retired intermediate", root, (-300, -10))  # expired ten days ago
    old_root = issue("retired root", None, (-400, -10))
    under_old_root = issue("intermediate of a retired root", old_root, (-300, 300))
    future = issue("future intermediate", root, (10, 300))
    late = issue("late intermediate", root, (-20, 300))  # issued after the leaf below says it signed
    not_ca = issue("not a CA", root, (-300, 300), ca=False)
    no_cert_sign = issue("no keyCertSign", root, (-300, 300), cert_sign=False)
    root0 = issue("root with path length 0", None, (-400, 400), path_length=0)
    under_root0 = issue("intermediate under path length 0", root0, (-300, 300))
    # (case, trust anchor, chain in the signature, signing certificate, the one named, words)
    refused = [
        # a backdated leaf from a retired CA: dated inside the CA's old validity, valid today
        ("backdated", root, [retired], leaf_of(retired, (-100, 30)), retired, ("has expired", "valid now")),
        ("expired-intermediate", root, [retired], leaf_of(retired, (-5, 30)), retired, ("has expired",)),
        ("expired-root", old_root, [under_old_root], leaf_of(under_old_root, (-100, 30)), old_root, ("has expired",)),
        ("future-intermediate", root, [future], leaf_of(future, (-5, 30)), future, ("is not valid yet",)),
        ("before-its-issuer", root, [late], leaf_of(late, (-50, 30)), late, ("was not valid yet", "when it signed")),
        ("not-a-ca", root, [not_ca], leaf_of(not_ca, (-5, 30)), not_ca, ("basicConstraints CA=true",)),
        ("no-cert-sign", root, [no_cert_sign], leaf_of(no_cert_sign, (-5, 30)), no_cert_sign, ("keyCertSign",)),
        ("path-length", root0, [under_root0], leaf_of(under_root0, (-5, 30)), root0, ("path length",)),
    ]
    for tag, anchor, chain, leaf, named, words in refused:
        code, said, sig, pem = register(tag, anchor, chain, leaf)
        assert code == 2 and said.count("error:") == 1 and "Traceback" not in said, (tag, said)
        line = " ".join(said.split("hint:")[0].split())  # the console wraps at 80 columns
        assert named.subject in line and f"notAfter {named.cert.not_valid_after_utc:%Y-%m-%d}" in line, (tag, line)
        assert all(w in line for w in words), (tag, line)
        assert dump(db) == before, tag
        if tag in ("backdated", "expired-root"):  # the reference verifier alone accepts these: the gap closed here
            done = _ms("verify", "certificate", "--certificate_chain", str(pem), "--signature", str(sig), str(model))
            assert done.returncode == 0, (tag, done.stderr)
    # the same chain, every certificate valid now and when it signed: verified, the signer named
    code, said, _, _ = register("good", root, [inter], leaf_of(inter, (-1, 30)))
    assert code == 0 and "signed by pub@example.com" in said, said


def test_without_the_extra_register_names_it(model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "model_signing", None)
    code, _, err = specreg("register", str(model), "--verify-signature", str(tmp_path / "k.pem"), db=tmp_path / "r.db")
    assert code == 2 and "pip install 'specreg[signing]'" in err


def test_signer_shows_in_check_pair_audit_and_ml_bom(audit_world: AuditWorld, tmp_path: Path) -> None:
    db = audit_world.copy(tmp_path / "r.db")
    priv, pub = ecdsa_key(tmp_path / "publisher.pem")
    sig = tmp_path / "target.sig"  # beside the test, not in the shared world's folder
    _sign_key(audit_world.target, priv, sig)
    code, out, err = specreg(
        "register", str(audit_world.target), "--verify-signature", str(pub), "--signature", str(sig), db=db
    )
    assert code == 0, err
    who = out.split("signed by ", 1)[1].split()[0:2]
    identity = " ".join(who)
    code, out, err = specreg("check", "pair", str(audit_world.target), str(audit_world.draft), db=db)
    assert f"model signed by {identity}" in out, out
    policy = audit_world.policy_file(tmp_path)
    strict = tmp_path / "strict.toml"
    strict.write_text(policy.read_text().replace("require_model_signature = false", "require_model_signature = true"))
    pair = str(audit_world.pairs["draft-simple"])
    code, out, err = specreg("audit", "--pair", pair, "--policy", str(policy), "--trust-stat-cache", "--json", db=db)
    integrity = next(g for g in json.loads(out)["pairs"][0]["gates"] if g["gate"] == "integrity")
    assert integrity["passed"] and f"target signed by {identity}" in integrity["message"]
    assert integrity["evidence"]["artifacts"]["target"]["signed_by"] == identity
    code, out, err = specreg("audit", "--pair", pair, "--policy", str(strict), "--trust-stat-cache", "--json", db=db)
    integrity = next(g for g in json.loads(out)["pairs"][0]["gates"] if g["gate"] == "integrity")
    assert code == 1 and not integrity["passed"]
    assert "draft" in integrity["message"] and "no verified model signature" in integrity["message"]
    code, out, err = specreg("export", "--format", "cyclonedx", pair, "--policy", str(policy), db=db)
    assert code == 0, err
    bom = json.loads(out)
    props = {
        p["name"]: p["value"]
        for c in bom["components"]
        if c.get("type") == "machine-learning-model"
        for p in c.get("properties", [])
    }
    assert props["specreg:model_signature.identity"] == identity
    assert props["specreg:model_signature.method"] == "key"
