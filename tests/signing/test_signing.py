"""Signed evidence: `export --sign`, `sign`, `import` verifying every envelope, the audit's trust policy.

Keys are made here (cryptography); the bundle is the shared audit world's real run. Another
host's bundle is that run renamed and resealed (tests/_bundle_helpers.py), as in test_bundles.
Interoperability: the statement validates against in-toto's own Statement model, in-toto's
envelope class verifies what specreg signs, and specreg imports an envelope that only the
reference libraries (securesystemslib's signer, in-toto-attestation's Statement) made.
"""

from __future__ import annotations

import base64
import json
import zipfile
from pathlib import Path

import pytest
from _audit_world import AuditWorld, specreg
from _bundle_helpers import db_rows as _rows
from _bundle_helpers import dump, members, rename_run, rewrite
from _signing_helpers import ecdsa_key, ed25519_key, statement

from specreg.exchange.bundle_format import HEADER
from specreg.exchange.bundle_signatures import BUNDLE_PREDICATE, envelope_name
from specreg.signing.dsse import public_key


@pytest.fixture
def source(audit_world: AuditWorld, tmp_path: Path) -> Path:
    return audit_world.copy(tmp_path / "source.db")


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    d = tmp_path / "keys"
    d.mkdir()
    return {"alice": ed25519_key(d / "alice.pem"), "bob": ecdsa_key(d / "bob.pem")}


def _kid(pub: Path) -> str:
    return str(public_key(pub.read_bytes(), str(pub)).keyid)


def _signed(source: Path, tmp_path: Path, key: Path, name: str = "signed.zip") -> Path:
    out = tmp_path / name
    code, stdout, err = specreg("export", "--all", "--sign", str(key), "-o", str(out), db=source)
    assert code == 0, err
    assert "signed by key" in stdout
    return out


def _with(bundle: Path, dest: Path, name: str, data: bytes | None) -> Path:
    """The bundle with member `name` set to `data` (None: removed)."""
    m = members(bundle)
    if data is None:
        m.pop(name, None)
    else:
        m[name] = data
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for n, b in m.items():
            zf.writestr(n, b)
    return dest


def _refused(db: Path, bundle: Path, *words: str, policy: Path | None = None) -> str:
    before = dump(db) if db.exists() else None
    extra = ["--policy", str(policy)] if policy else []
    code, out, err = specreg("import", *extra, str(bundle), db=db)
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and err.count("error:") == 1, err
    line = err.strip().splitlines()[0]
    for w in words:
        assert w in err, (w, err)
    assert before is None or dump(db) == before  # nothing was imported
    return line


def test_export_sign_writes_an_in_toto_statement_over_runs_and_artifacts(
    audit_world: AuditWorld, source: Path, keys: dict, tmp_path: Path
) -> None:
    priv, pub = keys["alice"]
    bundle = _signed(source, tmp_path, priv)
    m = members(bundle)
    header = json.loads(m[HEADER])
    kid = _kid(pub)
    env = m[envelope_name(kid)]
    assert envelope_name(kid) not in {x["name"] for x in header["members"]}  # outside the manifest it signs
    st = statement(env)
    assert st["_type"] == "https://in-toto.io/Statement/v1" and st["predicateType"] == BUNDLE_PREDICATE
    subjects = {s["name"]: s["digest"]["sha256"] for s in st["subject"]}
    rid = audit_world.run_id
    assert subjects[f"runs/{rid}"] == header["runs"][0]["digest"]
    arts = [json.loads(x)["sha256"] for x in m["artifacts.jsonl"].splitlines()]
    assert arts and all(subjects[f"artifacts/{s}"] == s for s in arts)
    listed = {x["name"]: x["sha256"] for x in header["members"]}
    assert subjects["bundle/pairs.jsonl"] == listed["pairs.jsonl"]
    pred = st["predicate"]
    assert pred["bundle"]["digest"] == header["digest"] and pred["signer"]["keyid"] == kid
    run = pred["runs"][0]
    assert run["run_id"] == rid and run["hardware"] == header["runs"][0]["hardware"]
    assert "xllamacpp" in (run["runtime"] or "") and run["rule_set"] and pred["rule_sets"]


def test_statement_and_envelope_validate_with_the_reference_libraries(source: Path, keys: dict, tmp_path: Path) -> None:
    from google.protobuf import json_format
    from in_toto.models.metadata import Envelope as InTotoEnvelope
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement
    from securesystemslib.signer import SSlibKey

    priv, pub = keys["bob"]  # ECDSA P-256
    env = members(_signed(source, tmp_path, priv))[envelope_name(_kid(pub))]
    pb = json_format.Parse(json.dumps(statement(env)), statement_pb2.Statement())
    Statement.copy_from_pb(pb).validate()  # in-toto's own model of a Statement v1
    from cryptography.hazmat.primitives import serialization

    key = SSlibKey.from_crypto(serialization.load_pem_public_key(pub.read_bytes()))
    parsed = InTotoEnvelope.from_dict(json.loads(env))
    parsed.verify([key], 1)  # in-toto's DSSE envelope, its verification, our bytes


def test_import_verifies_and_records_who_signed_each_run(
    audit_world: AuditWorld, source: Path, keys: dict, tmp_path: Path
) -> None:
    bundle = _signed(source, tmp_path, keys["alice"][0])
    dest = tmp_path / "dest.db"
    code, out, err = specreg("import", str(bundle), db=dest)
    assert code == 0, err
    kid = _kid(keys["alice"][1])
    rows = _rows(dest, "SELECT run_id, key_id, signer FROM run_attestations")
    assert rows == [(audit_world.run_id, kid, None)]
    # the bundle's own verdicts are signed with it (the statement binds pairs.jsonl): one row each
    n_verdicts = len(members(bundle)["pairs.jsonl"].splitlines())
    assert _rows(dest, "SELECT count(*), count(DISTINCT verdict_id) FROM verdict_attestations") == [(4, 4)]
    assert n_verdicts == 4  # four pairs of one verdict each in the shared world
    # the counts printed are the rows stored: the same bundle three times stores each row once
    assert "signatures verified: 1 run attestation, 4 verdict attestations recorded" in " ".join(out.split())
    thrice = tmp_path / "thrice.db"
    code, out, err = specreg("import", str(bundle), str(bundle), str(bundle), db=thrice)
    assert code == 0, err
    assert "signatures verified: 1 run attestation, 4 verdict attestations recorded" in " ".join(out.split())
    assert _rows(thrice, "SELECT count(*) FROM run_attestations") == [(1,)]
    code, out, err = specreg("import", str(bundle), db=thrice)  # again: nothing new, nothing claimed
    assert code == 0 and "signatures verified" not in out, out
    # with a policy, the key gets the policy's name; importing again changes nothing else
    pol = tmp_path / "trust.toml"
    pol.write_text('[trust]\nsigners = { alice = "keys/alice.pub.pem" }\n')
    dest2 = tmp_path / "dest2.db"
    code, out, err = specreg("import", "--policy", str(pol), str(bundle), db=dest2)
    assert code == 0, err
    assert _rows(dest2, "SELECT signer FROM run_attestations") == [("alice",)]
    before = dump(dest2)
    assert specreg("import", "--policy", str(pol), str(bundle), db=dest2)[0] == 0
    assert dump(dest2) == before


def test_sign_command_cosigns_and_resigning_replaces(source: Path, keys: dict, tmp_path: Path) -> None:
    bundle = tmp_path / "plain.zip"
    assert specreg("export", "--all", "-o", str(bundle), db=source)[0] == 0
    for who in ("alice", "bob", "alice"):
        code, out, err = specreg("sign", str(bundle), "--key", str(keys[who][0]), db=source)
        assert code == 0, err
        assert f"with key {_kid(keys[who][1])}" in out
    sigs = sorted(n for n in members(bundle) if n.startswith("signatures/"))
    assert sigs == sorted(envelope_name(_kid(keys[w][1])) for w in ("alice", "bob"))
    dest = tmp_path / "dest.db"
    assert specreg("import", str(bundle), db=dest)[0] == 0
    assert len(_rows(dest, "SELECT key_id FROM run_attestations")) == 2


def test_an_envelope_made_by_the_reference_libraries_is_accepted(
    audit_world: AuditWorld, source: Path, keys: dict, tmp_path: Path
) -> None:
    """The reverse direction: securesystemslib signs, in-toto-attestation builds the statement."""
    from cryptography.hazmat.primitives import serialization
    from google.protobuf import json_format
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    bundle = tmp_path / "plain.zip"
    assert specreg("export", "--all", "-o", str(bundle), db=source)[0] == 0
    header = json.loads(members(bundle)[HEADER])
    priv, pub = keys["alice"]
    signer = CryptoSigner(serialization.load_pem_private_key(priv.read_bytes(), None))
    run = header["runs"][0]
    subject = ResourceDescriptor(name=f"runs/{run['run_id']}", digest={"sha256": run["digest"]}).pb
    predicate = {
        "bundle": {"digest": header["digest"]},
        "signer": {"keyid": signer.public_key.keyid, "public_key": pub.read_text()},
    }
    st = Statement([subject], BUNDLE_PREDICATE, predicate)
    st.validate()
    payload = json.dumps(json_format.MessageToDict(st.pb)).encode()
    env = Envelope(payload=payload, payload_type="application/vnd.in-toto+json", signatures={})
    env.sign(signer)
    theirs = _with(
        bundle, tmp_path / "theirs.zip", envelope_name(signer.public_key.keyid), json.dumps(env.to_dict()).encode()
    )
    dest = tmp_path / "dest.db"
    code, _out, err = specreg("import", str(theirs), db=dest)
    assert code == 0, err
    assert _rows(dest, "SELECT run_id, key_id FROM run_attestations") == [(audit_world.run_id, _kid(pub))]


def _edit_envelope(env: bytes, change) -> bytes:  # type: ignore[no-untyped-def]
    raw = json.loads(env)
    change(raw)
    return json.dumps(raw).encode()


def _flip_payload(raw: dict) -> None:
    """One bit of the first subject's digest (a run digest) flipped: still a well-formed statement."""
    payload = bytearray(base64.b64decode(raw["payload"]))
    at = payload.index(b'"sha256":"') + len(b'"sha256":"')
    payload[at] ^= 0x01
    raw["payload"] = base64.b64encode(bytes(payload)).decode()


def _flip_signature(raw: dict) -> None:
    sig = bytearray(base64.b64decode(raw["signatures"][0]["sig"]))
    sig[5] ^= 0x01
    raw["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()


def test_every_damaged_or_misplaced_envelope_is_refused_and_nothing_is_imported(
    audit_world: AuditWorld, source: Path, keys: dict, tmp_path: Path
) -> None:
    from specreg.signing.dsse import load_signer, sign_statement

    priv, pub = keys["alice"]
    bundle = _signed(source, tmp_path, priv)
    name = envelope_name(_kid(pub))
    env = members(bundle)[name]
    dest = audit_world.copy(tmp_path / "dest.db")  # a registry that already holds records: kept byte for byte
    w = tmp_path / "bad"
    w.mkdir()

    def case(tag: str, data: bytes | None, member: str = name) -> Path:
        return _with(bundle, w / f"{tag}.zip", member, data)

    assert "does not verify" in _refused(dest, case("payload", _edit_envelope(env, _flip_payload)), name)
    assert "does not verify" in _refused(dest, case("sig", _edit_envelope(env, _flip_signature)), name)
    assert "not a DSSE envelope" in _refused(dest, case("cut", env[: len(env) // 2]))
    assert "not a DSSE envelope" in _refused(dest, case("garbage", b"\x00\xff" * 40))
    assert "more than a signature can be" in _refused(dest, case("huge", b" " * (100 << 20)))
    # a run the bundle lacks: a statement signed with the right key, naming one run more
    st = statement(env)
    st["subject"].append({"name": "runs/not-in-this-bundle", "digest": {"sha256": "ab" * 32}})
    extra = sign_statement(st, load_signer(priv))
    assert "which this bundle lacks" in _refused(dest, case("extra-run", extra), "not-in-this-bundle")
    # a valid envelope copied onto another bundle: the same runs under other ids there
    unsigned = _with(bundle, w / "unsigned-src.zip", name, None)
    other = rewrite(unsigned, w / "other.zip", lambda d, h: rename_run(d, h, audit_world.run_id, "zz-other-1"))
    _refused(dest, _with(other, w / "copied.zip", name, env), "which this bundle lacks", audit_world.run_id)

    # ... and onto a bundle of the same run whose records differ (another host's pairs file)
    def more_pairs(d: dict[str, bytes], h: dict) -> None:
        d["pairs.jsonl"] = d["pairs.jsonl"] + d["pairs.jsonl"].splitlines(keepends=True)[0]

    twin = rewrite(unsigned, w / "twin.zip", more_pairs)
    _refused(dest, _with(twin, w / "twin-copied.zip", name, env), "bundle/pairs.jsonl", "copied from another bundle")
    # ... and onto the same records in another bundle (its manifest differs: another creation time)
    later = rewrite(unsigned, w / "later.zip", lambda d, h: h.update(created_at="2030-01-01T00:00:00+00:00"))
    _refused(dest, _with(later, w / "later-copied.zip", name, env), "was made for bundle", "not this one")
    # a signature named for one key and made by another
    bob_kid = _kid(keys["bob"][1])
    assert "not the key it is named for" in _refused(dest, case("renamed", env, envelope_name(bob_kid)))
    # a key the policy does not name; and an unsigned run where the policy demands signatures
    pol = tmp_path / "bob-only.toml"
    pol.write_text(f'[trust]\nsigners = {{ bob = "{bob_kid}" }}\nrequire_signed_evidence = true\n')
    _refused(dest, bundle, "which is not in [trust] signers", _kid(pub)[:16], policy=pol)
    _refused(dest, unsigned, f"run {audit_world.run_id} is unsigned", "require_signed_evidence", policy=pol)
    # a resealed bundle listing a signature in its manifest
    listed = rewrite(bundle, w / "listed.zip", lambda d, h: None)
    _refused(dest, listed, "the manifest lists a signature")


def test_an_untrusted_extra_envelope_is_recorded_and_ignored_for_trust(
    audit_world: AuditWorld, source: Path, keys: dict, tmp_path: Path
) -> None:
    """Envelopes sit outside the manifest: anyone in transit can add one. A verified envelope by a
    key the policy does not name is recorded, never trusted, and never blocks a bundle that the
    trusted signatures cover (it imports the same as with that envelope stripped)."""
    bundle = _signed(source, tmp_path, keys["alice"][0])
    assert specreg("sign", str(bundle), "--key", str(keys["bob"][0]), db=source)[0] == 0  # bob: a stranger
    alice, bob = _kid(keys["alice"][1]), _kid(keys["bob"][1])
    stripped = _with(bundle, tmp_path / "stripped.zip", envelope_name(bob), None)
    pol = tmp_path / "alice.toml"
    pol.write_text(f'[trust]\nsigners = {{ alice = "{alice}" }}\nrequire_signed_evidence = true\n')
    with_bob, without = tmp_path / "with-bob.db", tmp_path / "without.db"
    code, out, err = specreg("import", "--policy", str(pol), str(bundle), db=with_bob)
    assert code == 0, err
    assert f"signed by key {bob[:16]}, not in [trust] signers: recorded, not trusted" in " ".join(out.split())
    assert specreg("import", "--policy", str(pol), str(stripped), db=without)[0] == 0
    signers = "SELECT key_id, signer FROM run_attestations ORDER BY key_id"
    assert sorted(_rows(with_bob, signers)) == sorted([(alice, "alice"), (bob, None)])
    assert _rows(without, signers) == [(alice, "alice")]
    same = "SELECT run_id, run_digest FROM run_origins"
    assert _rows(with_bob, same) == _rows(without, same)
    # a bundle only the stranger signed: recorded under a policy that does not require signatures ...
    only_bob = _with(bundle, tmp_path / "only-bob.zip", envelope_name(alice), None)
    loose = tmp_path / "loose.toml"
    loose.write_text(f'[trust]\nsigners = {{ alice = "{alice}" }}\n')
    assert specreg("import", "--policy", str(loose), str(only_bob), db=tmp_path / "loose.db")[0] == 0
    assert _rows(tmp_path / "loose.db", signers) == [(bob, None)]
    # ... and refused, naming the stranger's key, where the policy requires a trusted signer
    line = _refused(tmp_path / "strict.db", only_bob, f"signed only by key {bob[:16]}", policy=pol)
    assert "not in [trust] signers" in line


def test_sign_refuses_what_import_would_refuse(source: Path, keys: dict, tmp_path: Path) -> None:
    """`sign` checks the envelopes a bundle already carries (it never signs a bundle that import
    will refuse), and says what it did not do: sign."""
    import os

    bundle = _signed(source, tmp_path, keys["alice"][0])
    name = envelope_name(_kid(keys["alice"][1]))
    damaged = _with(bundle, tmp_path / "damaged.zip", name, _edit_envelope(members(bundle)[name], _flip_signature))
    before = damaged.read_bytes()
    code, _, err = specreg("sign", str(damaged), "--key", str(keys["bob"][0]), db=source)
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    line = " ".join(err.split())
    assert "does not verify" in line and name in line and "nothing was signed" in line, line
    assert damaged.read_bytes() == before
    fifo = tmp_path / "fifo.zip"
    os.mkfifo(fifo)
    code, _, err = specreg("sign", str(fifo), "--key", str(keys["bob"][0]), db=source)
    line = " ".join(err.split())
    assert code == 2 and "not a regular file" in line and "nothing was signed" in line, line
    assert "imported" not in line


def _other_host(audit_world: AuditWorld, bundle: Path, dest: Path) -> Path:
    """The shared run as another box would have sent it (new id, sorting as the newest run)."""

    def edit(data: dict[str, bytes], header: dict) -> None:
        rename_run(data, header, audit_world.run_id, "zz-other-1")
        header["origin"] = {"host": "other-box", "specreg_version": "0.1.0"}
        header["runs"][0]["origin"] = header["origin"]

    return rewrite(bundle, dest, edit)


def _trust_policy(audit_world: AuditWorld, folder: Path, signers: dict[str, str], require: bool) -> Path:
    """The lenient audit policy with a [trust] table (policy_file writes JSON values: no inline tables)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = audit_world.policy_file(folder)
    table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in signers.items())
    text = path.read_text().replace("signers = {}", f"signers = {{ {table} }}")
    path.write_text(
        text.replace("require_signed_evidence = false", f"require_signed_evidence = {str(require).lower()}")
    )
    return path


def _audit(audit_world: AuditWorld, db: Path, policy: Path) -> dict:
    pair = audit_world.pairs["draft-simple"]
    code, out, err = specreg(
        "audit", "--pair", str(pair), "--policy", str(policy), "--trust-stat-cache", "--json", db=db
    )
    assert code in (0, 1), err
    return json.loads(out)


def test_audit_takes_only_runs_measured_here_or_signed_by_a_named_signer(
    audit_world: AuditWorld, source: Path, keys: dict, tmp_path: Path
) -> None:
    plain = tmp_path / "plain.zip"
    assert specreg("export", "--all", "-o", str(plain), db=source)[0] == 0
    other = _other_host(audit_world, plain, tmp_path / "other.zip")
    rid = audit_world.run_id
    policy = _trust_policy(audit_world, tmp_path / "strict", {"alice": str(keys["alice"][1])}, True)
    # unsigned: refused with one line naming the run, the bundle and the missing signer; the local run decides
    db = audit_world.copy(tmp_path / "unsigned.db")
    assert specreg("import", str(other), db=db)[0] == 0
    report = _audit(audit_world, db, policy)
    assert report["pairs"][0]["run_id"] == rid
    digest = json.loads(members(other)[HEADER])["digest"]
    refusal = (
        f"run zz-other-1 (bundle {digest[:16]}, host other-box): refused as evidence: not signed by any [trust] signer"
    )
    assert refusal in report["notes"], report["notes"]
    assert {r["run_id"]: r["attested_by"] for r in report["runs"]} == {rid: "measured on this machine"}
    # without require_signed_evidence the same run is evidence, and the record says it is unsigned
    loose = _trust_policy(audit_world, tmp_path / "loose", {"alice": str(keys["alice"][1])}, False)
    report = _audit(audit_world, db, loose)
    assert report["pairs"][0]["run_id"] == "zz-other-1"
    assert report["runs"][0]["attested_by"] == f"unsigned; measured on other-box, bundle {digest[:16]}"
    # signed by bob, whom the policy does not name: refused, naming the unknown key
    db = audit_world.copy(tmp_path / "bob.db")
    assert specreg("sign", str(other), "--key", str(keys["bob"][0]), db=db)[0] == 0
    assert specreg("import", str(other), db=db)[0] == 0
    report = _audit(audit_world, db, policy)
    assert report["pairs"][0]["run_id"] == rid
    assert any(f"signed only by unknown key {_kid(keys['bob'][1])[:16]}" in n for n in report["notes"])
    # signed by alice too: evidence, and the record names her
    db = audit_world.copy(tmp_path / "alice.db")
    assert specreg("sign", str(other), "--key", str(keys["alice"][0]), db=db)[0] == 0
    assert specreg("import", str(other), db=db)[0] == 0
    report = _audit(audit_world, db, policy)
    assert report["pairs"][0]["run_id"] == "zz-other-1"
    assert report["runs"][0]["attested_by"].startswith("signed by alice; measured on other-box")
    assert not any("refused as evidence" in n for n in report["notes"])
    # the Markdown report names the signer of the run it rests on
    pair = audit_world.pairs["draft-simple"]
    md = tmp_path / "audit.md"
    specreg("audit", "--pair", str(pair), "--policy", str(policy), "--trust-stat-cache", "--report", str(md), db=db)
    assert "signed by alice" in md.read_text()


def test_audit_sign_writes_a_verifiable_result(
    audit_world: AuditWorld, source: Path, keys: dict, tmp_path: Path
) -> None:
    from specreg.audit.attest import open_audit

    priv, pub = keys["bob"]
    out = tmp_path / "audit.intoto.json"
    pair = str(audit_world.pairs["draft-simple"])
    policy = audit_world.policy_file(tmp_path)
    code, _, err = specreg(
        "audit", "--pair", pair, "--policy", str(policy), "--sign", str(priv), "--attestation", str(out), db=source
    )
    assert code in (0, 1), err
    # what docs/security.md tells a deployment pipeline to run: securesystemslib alone, no specreg
    import base64

    from cryptography.hazmat.primitives import serialization
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    env = json.loads(out.read_text())
    key = SSlibKey.from_crypto(serialization.load_pem_public_key(pub.read_bytes()))
    Envelope.from_dict(dict(env)).verify([key], 1)
    assert json.loads(base64.b64decode(env["payload"]))["predicate"]["audit"]["passed"] in (True, False)
    kid, record = open_audit(out.read_bytes(), str(out))
    assert kid == _kid(pub) and record["pairs"][0]["pair_id"] == int(pair)
    assert record["runs"][0]["attested_by"] == "measured on this machine"
    assert statement(out.read_bytes())["subject"][0]["name"].startswith("models/")
    # one half without the other is a usage error, before any work
    code, _, err = specreg("audit", "--pair", pair, "--sign", str(priv), db=source)
    assert code == 2 and "--attestation FILE" in err


def test_bad_keys_and_policies_are_one_line_errors(source: Path, keys: dict, tmp_path: Path) -> None:
    out = tmp_path / "x.zip"
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key\n")
    for key, words in ((junk, "not a PEM private key"), (tmp_path / "none.pem", "not found")):
        code, _, err = specreg("export", "--all", "--sign", str(key), "-o", str(out), db=source)
        assert code == 2 and words in err and "Traceback" not in err, err
        assert not out.exists()
    from cryptography.hazmat.primitives.asymmetric import ec

    p384 = ecdsa_key(tmp_path / "p384.pem", ec.SECP384R1())[0]
    assert specreg("export", "--all", "--sign", str(p384), "-o", str(out), db=source)[0] == 0
    rsa_like = ecdsa_key(tmp_path / "k1.pem", ec.SECP256K1())[0]
    code, _, err = specreg("sign", str(out), "--key", str(rsa_like), db=source)
    assert code == 2 and "not an Ed25519 or ECDSA P-256/P-384 key" in err
    pol = tmp_path / "p.toml"
    pol.write_text('[trust]\nsigners = { carol = "missing.pem" }\n')
    code, _, err = specreg("import", "--policy", str(pol), str(out), db=tmp_path / "d.db")
    assert code == 2 and "signers.carol" in err and "not found" in err


def test_without_the_extra_signing_names_it(
    source: Path, keys: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "securesystemslib", None)
    monkeypatch.setitem(sys.modules, "securesystemslib.signer", None)
    code, _, err = specreg("export", "--all", "--sign", str(keys["alice"][0]), "-o", str(tmp_path / "x"), db=source)
    assert code == 2 and "pip install 'specreg[signing]'" in err
    assert err.count("\n") <= 2  # the error line (and at most its hint)


def test_an_unsigned_bundle_needs_no_extra(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    bundle = tmp_path / "plain.zip"
    assert specreg("export", "--all", "-o", str(bundle), db=source)[0] == 0
    monkeypatch.setitem(sys.modules, "securesystemslib", None)
    assert specreg("import", str(bundle), db=tmp_path / "d.db")[0] == 0


def test_the_example_fleet_policy_requires_signed_evidence_and_the_local_one_does_not() -> None:
    from specreg.audit.policy import example_policy_text, load_policy, parse_policy

    root = Path(__file__).resolve().parents[2]
    fleet, _ = load_policy(root / "examples" / "fleet-policy.toml")
    assert fleet.trust.require_signed_evidence is True and fleet.trust.require_model_signature is False
    local = parse_policy(example_policy_text())
    assert local.trust.require_signed_evidence is False and local.trust.signers == {}
    # otherwise the same policy: only the name, the trust table and comments differ
    assert fleet.model_dump(exclude={"name", "trust"}) == local.model_dump(exclude={"name", "trust"})


def test_a_signed_verdict_stands_where_the_files_are_not(
    audit_world: AuditWorld, source: Path, keys: dict, tmp_path: Path
) -> None:
    """A central registry audits a fleet from signed bundles alone: the shared world's real run and
    verdicts, exported signed by lab-a, imported where no model file is. Under a policy naming
    lab-a its verdicts stand as lab-a's ("admitted by lab-a, signed") in `pairs`, the audit and
    the report; the integrity gate says it re-hashed nothing and whose SHA-256s it rests on.
    Under a policy naming someone else, or with the envelope stripped, nothing stands; a check
    made here wins over the signed verdict."""
    lab_a, lab_b = keys["alice"], keys["bob"]
    bundle = _signed(source, tmp_path, lab_a[0])
    trusting = _trust_policy(audit_world, tmp_path / "trusting", {"lab-a": str(lab_a[1])}, True)
    other = _trust_policy(audit_world, tmp_path / "other", {"lab-b": str(lab_b[1])}, False)
    central = tmp_path / "central.db"
    code, out, err = specreg("import", "--policy", str(trusting), str(bundle), db=central)
    assert code == 0, err
    assert "4 verdict attestations recorded" in " ".join(out.split())

    def ident(p: dict) -> tuple[str, str | None, str]:
        return p["target_sha256"], p.get("draft_sha256"), p["method"]

    # pair ids are this registry's own: the world's pairs found here by what they are
    theirs = {ident(p): p["id"] for p in json.loads(specreg("pairs", "--json", db=source)[1])}
    here = {ident(p): p["id"] for p in json.loads(specreg("pairs", "--json", db=central)[1])}
    ids = {name: here[next(k for k, v in theirs.items() if v == pid)] for name, pid in audit_world.pairs.items()}
    pair = str(ids["draft-simple"])
    # pairs: as recorded (another machine's word), and as the policy has it stand
    rows = {p["id"]: p for p in json.loads(specreg("pairs", "--json", db=central)[1])}
    assert not rows[int(pair)]["checked_here"] and not rows[int(pair)]["admitted"]
    code, out, _ = specreg("pairs", "--policy", str(trusting), "--json", db=central)
    stood = {p["id"]: p for p in json.loads(out)}
    assert stood[int(pair)]["admitted"] and stood[int(pair)]["signed_verdict"]["signed_by"] == ["lab-a"]
    assert not stood[ids["near-miss"]]["admitted"]  # lab-a rejected it: signed, still rejected
    code, out, _ = specreg("pairs", "--policy", str(trusting), "--admitted", db=central)
    assert "admitted by lab-a, signed" in out and "near-miss" not in out
    # the audit of every pair: lab-a's admitted pairs, judged on lab-a's signed run
    md = tmp_path / "central.md"
    code, out, err = specreg("audit", "--all", "--policy", str(trusting), "--report", str(md), db=central)
    assert code in (0, 1), err
    assert f"pair {pair} verdict: admitted by lab-a, signed" in " ".join(out.split())
    report = json.loads(specreg("audit", "--all", "--policy", str(trusting), "--json", db=central)[1])
    audited = {p["pair_id"]: p for p in report["pairs"]}
    assert set(audited) == {ids[m] for m in ("draft-simple", "ngram-simple", "ngram-mod")}
    mine = audited[int(pair)]
    gates = {g["gate"]: g for g in mine["gates"]}
    assert mine["passed"] and mine["signed_verdict"] == "admitted by lab-a, signed"
    assert gates["verdict"]["message"].startswith("admitted by lab-a, signed (made on ")
    header = json.loads(members(bundle)[HEADER])
    for role, sha in (("target", mine["target_sha256"]), ("draft", mine["draft_sha256"])):
        assert (
            f"{role} not on this machine, not re-hashed here: sha256 {sha} as lab-a signed it"
            in (gates["integrity"]["message"])
        )
        art = gates["integrity"]["evidence"]["artifacts"][role]
        assert art["ok"] is None and art["vouched_by"] == "lab-a"
    assert "match" not in gates["integrity"]["message"]  # nothing claims a re-hash it did not do
    assert gates["rollback"]["passed"] and "lab-a's run" in gates["rollback"]["message"]
    assert report["runs"][0]["attested_by"].startswith("signed by lab-a")
    assert f"pair {pair} draft-simple: passes every gate (verdict admitted by lab-a, signed)" in md.read_text()
    assert header["digest"][:16] in gates["verdict"]["message"]
    # a policy that names someone else: nothing stands, and the refusal names the key that signed
    code, _, err = specreg("audit", "--all", "--policy", str(other), db=central)
    line = " ".join(err.split())
    assert code == 2 and err.count("error:") == 1, err
    assert "no admitted pairs to audit" in line and f"signed only by key {_kid(lab_a[1])[:16]}" in line
    assert "not in [trust] signers" in line
    report = json.loads(specreg("audit", "--pair", pair, "--policy", str(other), "--json", db=central)[1])
    verdict = next(g for g in report["pairs"][0]["gates"] if g["gate"] == "verdict")
    assert not verdict["passed"] and f"signed only by key {_kid(lab_a[1])[:16]}" in verdict["message"]
    assert report["pairs"][0]["signed_verdict"] is None
    # the same bundle without its envelope: the verdicts are evidence only, under the trusting policy too
    bare = tmp_path / "bare.db"
    stripped = _with(bundle, tmp_path / "stripped.zip", envelope_name(_kid(lab_a[1])), None)
    assert specreg("import", str(stripped), db=bare)[0] == 0
    code, _, err = specreg("audit", "--all", "--policy", str(trusting), db=bare)
    assert code == 2 and "no admitted pairs to audit" in err, err
    # a check made here wins: with the files registered and checked, the verdict is this machine's
    for f in (audit_world.target, audit_world.draft):
        assert specreg("register", str(f), db=central)[0] == 0
    assert specreg("check", "pair", str(audit_world.target), str(audit_world.draft), db=central)[0] == 0
    report = json.loads(specreg("audit", "--pair", pair, "--policy", str(trusting), "--json", db=central)[1])
    checked = report["pairs"][0]
    verdict = next(g for g in checked["gates"] if g["gate"] == "verdict")
    assert checked["signed_verdict"] is None and verdict["passed"] and "lab-a" not in verdict["message"]
    integrity = next(g for g in checked["gates"] if g["gate"] == "integrity")
    assert (
        "match their registered SHA-256" in integrity["message"] and "not on this machine" not in integrity["message"]
    )
