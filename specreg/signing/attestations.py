"""Who vouched for what arrived in a bundle: the attestation tables, written at import, read by the audit.

An envelope that verified (exchange/bundle_signatures.py checks it against its bundle) is kept
as rows: one per run it names (`run_attestations`, m021). Each row holds the key id, the
policy's name for the key when the import had a policy, the bundle and the envelope's SHA-256.
Whether a key is trusted is not stored: the audit asks its own policy (signing/signers.py).
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


__all__ = [
    "Attestation",
    "RunSigner",
    "attestations_by_run",
    "record_attestations",
]
