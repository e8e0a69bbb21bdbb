"""Signed evidence: verifying the in-toto statements (DSSE envelopes) a bundle carries against that bundle.

Bundle digests prove a bundle is whole, not who measured it. A signature adds who: the holder
of a key attests "these runs, with these digests, measured on this hardware with this runtime,
judged under this rule set". The statement's subjects are each run (`runs/<id>`, its content
digest), each artifact (`artifacts/<sha256>`) and the artifact and pair record members by
SHA-256; its predicate names the runs, hardware, runtime build, rule sets and the bundle digest.

The envelope lives in the bundle as `signatures/<key id>.intoto.json`, outside the manifest it
signs (so `specreg sign` adds one to a finished bundle and several keys can co-sign; the signing
side is exchange/bundle_signer.py). `import` checks every envelope before it writes: the
signature against the key the statement carries, every subject against this bundle (an envelope
copied from another bundle, or naming a run this one lacks, is refused), and - with a policy -
the key against `[trust] signers`. What verified is recorded (signing/attestations.py): per run,
and per verdict the bundle's own host made (the `bundle/pairs.jsonl` subject binds them).

An envelope by a key the policy does not name is recorded and ignored for trust, never fatal:
envelopes sit outside the manifest, so anyone in transit can add one, and refusing the bundle
for it would let a stranger block what imports when the envelope is stripped. Whether the runs
are covered by a trusted signer is `require_signed_evidence`'s question, asked of the trusted
envelopes alone. An envelope that does not verify is refused: something altered the bundle.

A signature proves who vouches for the numbers, never that the numbers are right: a trusted
signer with a busy machine or a bad workload still measures badly (docs/security.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from specreg.errors import BundleError, SignatureError
from specreg.exchange.bundle_format import Bundle
from specreg.signing.attestations import Attestation, Envelope
from specreg.signing.dsse import open_envelope

BUNDLE_PREDICATE = "https://specreg.dev/attestation/bench-evidence/v1"
RECORD_MEMBERS = ("artifacts.jsonl", "pairs.jsonl")


def artifact_shas(bundle: Bundle) -> set[str]:
    """The SHA-256 of every artifact record the bundle carries."""
    return {a["sha256"] for a in bundle.records("artifacts.jsonl") if isinstance(a.get("sha256"), str)}


def envelope_name(kid: str) -> str:
    return f"signatures/{kid}.intoto.json"


def _refuse(bundle: Bundle, name: str, why: str) -> BundleError:
    return BundleError(f"{bundle.path}: {name}: {why}; {bundle.then}")


def _check_subjects(bundle: Bundle, name: str, statement: dict[str, Any]) -> list[tuple[str, str]]:
    """Every subject names something this bundle holds, with the same digest; returns the runs
    (the member subjects, `bundle/pairs.jsonl` among them, are checked here and read by the caller)."""
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


@dataclass(frozen=True)
class Verified:
    """What a bundle's envelopes vouch for: each run a verified envelope names, and each envelope."""

    runs: list[Attestation]
    envelopes: list[Envelope]


def verify_bundle(bundle: Bundle, trusted: dict[str, str] | None = None, require: bool = False) -> Verified:
    """Every envelope the bundle carries, verified (see the module docstring); raises BundleError.

    `trusted`: key id -> signer name from a policy: a key in it is recorded under its name, a key
    outside it by its id alone; `require` refuses a run no trusted key signed.
    """
    runs: list[Attestation] = []
    envelopes: list[Envelope] = []
    for name, data in sorted(bundle.envelopes.items()):
        try:
            opened = open_envelope(data, name, BUNDLE_PREDICATE)
        except SignatureError as exc:
            raise BundleError(f"{bundle.path}: {exc}; {bundle.then}", hint=exc.hint) from None
        if name != envelope_name(opened.key_id):
            raise _refuse(bundle, name, f"holds a signature by key {opened.key_id[:16]}, not the key it is named for")
        pred = opened.statement["predicate"]
        signed = _check_subjects(bundle, name, opened.statement)
        made_for = pred.get("bundle", {}).get("digest") if isinstance(pred.get("bundle"), dict) else None
        if made_for != bundle.header.digest:
            raise _refuse(
                bundle, name, f"was made for bundle {str(made_for)[:16]}, not this one (copied from another bundle?)"
            )
        who = trusted.get(opened.key_id) if trusted is not None else None
        at = pred.get("signed_at") if isinstance(pred.get("signed_at"), str) else None
        env_sha = hashlib.sha256(data).hexdigest()
        covers = any(isinstance(x, dict) and x.get("name") == "bundle/pairs.jsonl" for x in opened.statement["subject"])
        envelopes.append(Envelope(opened.key_id, who, bundle.header.digest, env_sha, at, covers))
        runs += [Attestation(rid, d, opened.key_id, who, bundle.header.digest, env_sha, at) for rid, d in signed]
    if require and trusted is not None:
        for r in bundle.header.runs:
            if any(a.run_id == r.run_id and a.signer is not None for a in runs):
                continue
            others = sorted({a.key_id[:16] for a in runs if a.run_id == r.run_id})
            by = f"signed only by key {', '.join(others)}, which is not in [trust] signers" if others else "unsigned"
            raise BundleError(
                f"{bundle.path}: run {r.run_id} is {by}, and require_signed_evidence wants a signer from "
                f"[trust] signers; {bundle.then}",
                hint="ask its host to sign the bundle: specreg sign BUNDLE --key KEY",
            )
    return Verified(runs, envelopes)


__all__ = ["BUNDLE_PREDICATE", "Verified", "verify_bundle"]
