"""Signed evidence: verifying the in-toto statements (DSSE envelopes) a bundle carries, and recording them.

Bundle digests prove a bundle is whole, not who measured it. A signature adds who: the holder
of a key attests "these runs, with these digests, measured on this hardware with this runtime,
judged under this rule set". The statement's subjects are each run (`runs/<id>`, its content
digest), each artifact (`artifacts/<sha256>`) and the artifact and pair record members by
SHA-256; its predicate names the runs, hardware, runtime build, rule sets and the bundle digest.

The envelope lives in the bundle as `signatures/<key id>.intoto.json`, outside the manifest it
signs (so `specreg sign` adds one to a finished bundle and several keys can co-sign; the signing
side is exchange/bundle_signer.py). `import`
checks every envelope before it writes: the signature against the key the statement carries,
every subject against this bundle (an envelope copied from another bundle, or naming a run this
one lacks, is refused), and - with a policy - the key against `[trust] signers`. What verified is
recorded per run (table run_attestations, owned here): run, run digest, key id, the policy's name
for the key when one was given, bundle digest, the envelope's SHA-256.

A signature proves who vouches for the numbers, never that the numbers are right: a trusted
signer with a busy machine or a bad workload still measures badly (docs/security.md).
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from typing import Any

from specreg.errors import BundleError, SignatureError
from specreg.exchange.bundle_format import Bundle
from specreg.exchange.dsse import open_envelope

BUNDLE_PREDICATE = "https://specreg.dev/attestation/bench-evidence/v1"
RECORD_MEMBERS = ("artifacts.jsonl", "pairs.jsonl")


def artifact_shas(bundle: Bundle) -> set[str]:
    """The SHA-256 of every artifact record the bundle carries."""
    return {a["sha256"] for a in bundle.records("artifacts.jsonl") if isinstance(a.get("sha256"), str)}


def envelope_name(kid: str) -> str:
    return f"signatures/{kid}.intoto.json"


@dataclass(frozen=True)
class Attestation:
    """One run vouched for by one verified envelope."""

    run_id: str
    run_digest: str
    key_id: str
    signer: str | None  # the policy's name for the key, when import was given a policy
    bundle_digest: str
    envelope_sha256: str
    signed_at: str | None


def _refuse(bundle: Bundle, name: str, why: str) -> BundleError:
    return BundleError(f"{bundle.path}: {name}: {why}; nothing was imported")


def _check_subjects(bundle: Bundle, name: str, statement: dict[str, Any]) -> list[tuple[str, str]]:
    """Every subject names something this bundle holds, with the same digest; returns the runs."""
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise _refuse(bundle, name, "the statement has no subjects")
    runs = {r.run_id: r.digest for r in bundle.header.runs}
    shas = artifact_shas(bundle)
    members = {m.name: m.sha256 for m in bundle.header.members}
    signed: list[tuple[str, str]] = []
    for s in subjects:
        sub_name = s.get("name") if isinstance(s, dict) else None
        digest = s.get("digest") if isinstance(s, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(sub_name, str) or not isinstance(sha, str):
            raise _refuse(bundle, name, "a subject has no name or no sha256 digest")
        kind, _, ident = sub_name.partition("/")
        shown = sub_name[:80]
        if kind == "runs":
            if ident not in runs:
                raise _refuse(bundle, name, f"names run {shown[5:]!r}, which this bundle lacks")
            if runs[ident] != sha:
                raise _refuse(bundle, name, f"subject {shown} does not match this bundle (copied from another bundle?)")
            signed.append((ident, sha))
        elif kind == "artifacts":
            if ident != sha or sha not in shas:
                raise _refuse(bundle, name, f"names artifact {sha[:12]}, which this bundle lacks")
        elif kind == "bundle":
            if members.get(ident) != sha:
                raise _refuse(bundle, name, f"subject {shown} does not match this bundle (copied from another bundle?)")
        else:
            raise _refuse(bundle, name, f"subject {shown!r} is not one specreg signs")
    return signed


def verify_bundle(bundle: Bundle, trusted: dict[str, str] | None = None, require: bool = False) -> list[Attestation]:
    """Every envelope the bundle carries, verified (see the module docstring); raises BundleError.

    `trusted`: key id -> signer name from a policy; given, a key outside it is refused, and
    `require` refuses a run no trusted key signed. Without it, every key is recorded by its id.
    """
    out: list[Attestation] = []
    for name, data in sorted(bundle.envelopes.items()):
        try:
            opened = open_envelope(data, name, BUNDLE_PREDICATE)
        except SignatureError as exc:
            raise BundleError(f"{bundle.path}: {exc}; nothing was imported", hint=exc.hint) from None
        if name != envelope_name(opened.key_id):
            raise _refuse(bundle, name, f"holds a signature by key {opened.key_id[:16]}, not the key it is named for")
        pred = opened.statement["predicate"]
        signed = _check_subjects(bundle, name, opened.statement)
        made_for = pred.get("bundle", {}).get("digest") if isinstance(pred.get("bundle"), dict) else None
        if made_for != bundle.header.digest:
            raise _refuse(
                bundle, name, f"was made for bundle {str(made_for)[:16]}, not this one (copied from another bundle?)"
            )
        who = None
        if trusted is not None:
            who = trusted.get(opened.key_id)
            if who is None:
                raise _refuse(bundle, name, f"signed by key {opened.key_id[:16]}, which is not in [trust] signers")
        at = pred.get("signed_at") if isinstance(pred.get("signed_at"), str) else None
        env_sha = hashlib.sha256(data).hexdigest()
        out += [Attestation(rid, d, opened.key_id, who, bundle.header.digest, env_sha, at) for rid, d in signed]
    if require and trusted is not None:
        vouched = {a.run_id for a in out}
        for r in bundle.header.runs:
            if r.run_id not in vouched:
                raise BundleError(
                    f"{bundle.path}: run {r.run_id} is not signed by a signer in [trust] signers "
                    "(require_signed_evidence); nothing was imported",
                    hint="ask its host to sign the bundle: specreg sign BUNDLE --key KEY",
                )
    return out


def record_attestations(conn: sqlite3.Connection, attestations: list[Attestation], imported_at: str) -> None:
    """Record who vouched for which run (inside the import's transaction; a repeat changes nothing)."""
    conn.executemany(
        "INSERT OR IGNORE INTO run_attestations (run_id, run_digest, key_id, signer, bundle_digest, "
        "envelope_sha256, signed_at, imported_at) VALUES (?,?,?,?,?,?,?,?)",
        [
            (a.run_id, a.run_digest, a.key_id, a.signer, a.bundle_digest, a.envelope_sha256, a.signed_at, imported_at)
            for a in attestations
        ],
    )


@dataclass(frozen=True)
class RunSigner:
    key_id: str
    signer: str | None
    bundle_digest: str


def attestations_by_run(conn: sqlite3.Connection) -> dict[str, list[RunSigner]]:
    """run id -> every key that vouched for the run's current content, with where it came from."""
    out: dict[str, list[RunSigner]] = {}
    rows = conn.execute(
        "SELECT a.run_id, a.key_id, a.signer, a.bundle_digest FROM run_attestations a "
        "JOIN run_origins o ON o.run_id = a.run_id AND o.run_digest = a.run_digest ORDER BY a.rowid"
    )
    for rid, kid, who, bdig in rows:
        out.setdefault(rid, []).append(RunSigner(kid, who, bdig))
    return out


__all__ = [
    "BUNDLE_PREDICATE",
    "Attestation",
    "RunSigner",
    "attestations_by_run",
    "record_attestations",
    "verify_bundle",
]
