"""Who vouched for what arrived in a bundle: the attestation tables, written at import, read by the audit.

An envelope that verified (exchange/bundle_signatures.py checks it against its bundle) is kept
as rows: one per run it names (`run_attestations`, m021) and one per verdict it covers
(`verdict_attestations`, m022: the bundle's own verdicts, bound by the statement's
`bundle/pairs.jsonl` subject). Each row holds the key id, the policy's name for the key when the
import had a policy, the bundle and the envelope's SHA-256. Whether a key is trusted is not
stored: the audit asks its own policy (signing/signers.py) each time.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


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


@dataclass(frozen=True)
class Envelope:
    """One verified envelope of a bundle: whose it is, and whether it covers the bundle's verdicts."""

    key_id: str
    signer: str | None
    bundle_digest: str
    envelope_sha256: str
    signed_at: str | None
    covers_verdicts: bool  # the statement binds pairs.jsonl (every envelope specreg makes does)


def record_attestations(conn: sqlite3.Connection, attestations: list[Attestation], imported_at: str) -> int:
    """Record who vouched for which run (inside the import's transaction); returns the rows stored
    (a repeat stores none)."""
    return _stored(
        conn,
        "INSERT OR IGNORE INTO run_attestations (run_id, run_digest, key_id, signer, bundle_digest, "
        "envelope_sha256, signed_at, imported_at) VALUES (?,?,?,?,?,?,?,?)",
        [
            (a.run_id, a.run_digest, a.key_id, a.signer, a.bundle_digest, a.envelope_sha256, a.signed_at, imported_at)
            for a in attestations
        ],
    )


def record_verdict_attestations(
    conn: sqlite3.Connection, envelopes: list[Envelope], verdict_ids: list[int], imported_at: str
) -> int:
    """Record that each envelope covering the bundle's verdicts vouches for these imported
    verdicts (ids in imported_verdicts); returns the rows stored."""
    return _stored(
        conn,
        "INSERT OR IGNORE INTO verdict_attestations (verdict_id, key_id, signer, bundle_digest, envelope_sha256, "
        "signed_at, imported_at) VALUES (?,?,?,?,?,?,?)",
        [
            (vid, e.key_id, e.signer, e.bundle_digest, e.envelope_sha256, e.signed_at, imported_at)
            for e in envelopes
            if e.covers_verdicts
            for vid in verdict_ids
        ],
    )


def _stored(conn: sqlite3.Connection, sql: str, rows: list[tuple[object, ...]]) -> int:
    before = conn.total_changes
    conn.executemany(sql, rows)
    return conn.total_changes - before


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


@dataclass(frozen=True)
class SignedVerdict:
    """A verdict another machine made, with every key whose verified envelope covered it."""

    verdict_id: int
    pair_id: int
    admitted: bool
    strict: bool
    checks_json: str
    created_at: str
    host: str
    specreg_version: str
    bundle_digest: str
    key_ids: frozenset[str]


def signed_verdicts(conn: sqlite3.Connection) -> dict[int, list[SignedVerdict]]:
    """pair id -> the signed verdicts imported for pairs with no verdict made here, oldest first
    (a pair checked here stands on its own checks: nothing imported is read for it)."""
    out: dict[int, list[SignedVerdict]] = {}
    rows = conn.execute(
        "SELECT iv.id, iv.pair_id, iv.admitted, iv.strict, iv.checks_json, iv.created_at, iv.host, "
        "iv.specreg_version, iv.bundle_digest, group_concat(va.key_id) FROM imported_verdicts iv "
        "JOIN verdict_attestations va ON va.verdict_id = iv.id "
        "WHERE NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.pair_id = iv.pair_id) "
        "GROUP BY iv.id ORDER BY iv.created_at, iv.id"
    )
    for vid, pid, admitted, strict, checks, created, host, version, bundle, keys in rows:
        keyset = frozenset(keys.split(","))
        verdict = SignedVerdict(vid, pid, bool(admitted), bool(strict), checks, created, host, version, bundle, keyset)
        out.setdefault(pid, []).append(verdict)
    return out


__all__ = [
    "Attestation",
    "Envelope",
    "RunSigner",
    "SignedVerdict",
    "attestations_by_run",
    "record_attestations",
    "record_verdict_attestations",
    "signed_verdicts",
]
