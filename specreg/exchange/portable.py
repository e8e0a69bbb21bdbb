"""Registry records in a portable form (result bundles): artifacts and pairs with their verdicts.

A record is a table row as plain JSON: local row ids and paths are left out (the model bytes
stay on the machine that has them), `*_json` columns travel parsed under their name without the
suffix, and null values are dropped, so a column added by a later migration reads the same as
one that was never there. Merging is keyed by content, never by local ids: artifacts by SHA-256,
pairs by (target, draft, method, rule set), verdicts by what they say and when.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from specreg.errors import BundleError
from specreg.registry.db import now_iso

PairKey = tuple[str, str | None, str, str]  # target sha256, draft sha256, method, rule set


def canonical(obj: Any) -> bytes:
    """The one byte form of a JSON value that bundles hash: sorted keys, no spaces, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """The table's columns in order (what this registry's migrations built)."""
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def to_record(cols: list[str], row: Iterable[Any], skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A row as a portable record: `*_json` columns parsed, nulls and `skip` columns dropped."""
    out: dict[str, Any] = {}
    for col, value in zip(cols, row, strict=True):
        if value is None or col in skip:
            continue
        if col.endswith("_json"):
            out[col[:-5]] = json.loads(value)
        else:
            out[col] = value
    return out


class RowMaker:
    """Portable records back to row values for one table's columns (built once per table: an import
    of a million request rows calls it a million times)."""

    def __init__(self, table: str, cols: list[str], fixed: frozenset[str] = frozenset()) -> None:
        self.table, self.cols = table, cols
        self.keys = [c[:-5] if c.endswith("_json") else c for c in cols]
        self.is_json = [c.endswith("_json") for c in cols]
        self.known = frozenset(self.keys) | fixed
        self.plain = not any(self.is_json)

    def __call__(self, record: Mapping[str, Any]) -> list[Any]:
        """The values for `cols`; a field this registry has no column for is refused (it was written
        by a newer schema, and dropping it would lose what the bundle says)."""
        if not self.known.issuperset(record):
            unknown = sorted(set(record) - self.known)
            raise BundleError(
                f"bundle {self.table} record has fields this registry does not know: {', '.join(unknown)}",
                hint="the bundle comes from a newer specreg: upgrade specreg here (pip install -U specreg)",
            )
        get = record.get
        if self.plain:
            return [get(k) for k in self.keys]
        out = []
        for key, is_json in zip(self.keys, self.is_json, strict=True):
            value = get(key)
            out.append(json.dumps(value) if is_json and value is not None else value)
        return out


# -- artifacts ----------------------------------------------------------------------------------


def artifact_records(conn: sqlite3.Connection, shas: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Artifact rows (SHA-256, size, summary, licence record, provenance), sorted by SHA-256."""
    cols = columns(conn, "artifacts")
    cur = conn.execute(
        f"SELECT {', '.join(cols)} FROM artifacts WHERE sha256 IN (SELECT value FROM json_each(?)) ORDER BY sha256",
        (json.dumps(sorted(set(shas))),),
    )
    for row in cur:
        yield to_record(cols, row)


def merge_artifacts(conn: sqlite3.Connection, records: Iterable[Mapping[str, Any]]) -> int:
    """Add the artifacts this registry does not know (what it knows already stays as it is: its own
    licence and provenance facts win); returns how many were new. Call inside a write transaction."""
    cols = columns(conn, "artifacts")
    make = RowMaker("artifacts", cols)
    sql = f"INSERT OR IGNORE INTO artifacts ({', '.join(cols)}) VALUES ({','.join('?' * len(cols))})"
    new = 0
    for rec in records:
        sha = rec.get("sha256")
        if not isinstance(sha, str) or len(sha) != 64:
            raise BundleError(f"bundle artifact record without a valid sha256: {str(sha)[:80]!r}")
        new += conn.execute(sql, make(rec)).rowcount
    return new


# -- pairs and verdicts -------------------------------------------------------------------------


def pair_key(target: str, draft: str | None, method: str, rule_set: str) -> PairKey:
    return (target, draft, method, rule_set)


def pair_records(conn: sqlite3.Connection, pair_ids: Iterable[int]) -> Iterator[dict[str, Any]]:
    """Each pair's identity with every verdict recorded for it (oldest first), sorted by identity."""
    ids = json.dumps(sorted(set(pair_ids)))
    verdicts: dict[int, list[dict[str, Any]]] = {}
    for pid, admitted, strict, checks, created in conn.execute(
        "SELECT pair_id, admitted, strict, checks_json, created_at FROM verdicts "
        "WHERE pair_id IN (SELECT value FROM json_each(?)) ORDER BY created_at, id",
        (ids,),
    ):
        verdicts.setdefault(pid, []).append(
            {"admitted": bool(admitted), "strict": bool(strict), "checks": json.loads(checks), "created_at": created}
        )
    rows = conn.execute(
        "SELECT id, target_sha256, draft_sha256, method, rule_set FROM pairs "
        "WHERE id IN (SELECT value FROM json_each(?))",
        (ids,),
    ).fetchall()
    for pid, target, draft, method, rule_set in sorted(rows, key=lambda r: (r[1], r[2] or "", r[3], r[4])):
        rec: dict[str, Any] = {"target_sha256": target, "method": method, "rule_set": rule_set}
        if draft is not None:
            rec["draft_sha256"] = draft
        rec["verdicts"] = verdicts.get(pid, [])
        yield rec


def pair_identity(conn: sqlite3.Connection, pair_id: int | None) -> dict[str, Any] | None:
    """A pair's identity as a record (what a bundled run names instead of a local pair id)."""
    if pair_id is None:
        return None
    row = conn.execute(
        "SELECT target_sha256, draft_sha256, method, rule_set FROM pairs WHERE id = ?", (pair_id,)
    ).fetchone()
    if row is None:
        return None
    rec = {"target_sha256": row[0], "method": row[2], "rule_set": row[3]}
    if row[1] is not None:
        rec["draft_sha256"] = row[1]
    return rec


def find_pair(conn: sqlite3.Connection, ident: Mapping[str, Any]) -> int | None:
    row = conn.execute(
        "SELECT id FROM pairs WHERE target_sha256 = ? AND ifnull(draft_sha256, '') = ? AND method = ? AND rule_set = ?",
        (ident.get("target_sha256"), ident.get("draft_sha256") or "", ident.get("method"), ident.get("rule_set")),
    ).fetchone()
    return None if row is None else int(row[0])


def merge_pairs(conn: sqlite3.Connection, records: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """Add unknown pairs and the verdicts this registry has not recorded yet; the latest verdict
    (by time) stays the pair's current one. Returns (new pairs, new verdicts). Inside a transaction."""
    new_pairs = new_verdicts = 0
    for rec in records:
        for field in ("target_sha256", "method", "rule_set"):
            if not isinstance(rec.get(field), str):
                raise BundleError(f"bundle pair record without {field}")
        stamp = now_iso()
        pid = find_pair(conn, rec)
        if pid is None:
            if not rec.get("verdicts"):
                raise BundleError(f"bundle pair {rec['target_sha256'][:12]} ({rec['method']}) carries no verdict")
            cur = conn.execute(
                "INSERT INTO pairs (target_sha256, draft_sha256, method, rule_set, admitted, strict, n_verdicts, "
                "created_at, updated_at) VALUES (?,?,?,?,0,0,0,?,?)",
                (rec["target_sha256"], rec.get("draft_sha256"), rec["method"], rec["rule_set"], stamp, stamp),
            )
            pid = int(cur.lastrowid or 0)
            new_pairs += 1
        known = {
            (bool(a), bool(s), canonical(json.loads(c)), t)
            for a, s, c, t in conn.execute(
                "SELECT admitted, strict, checks_json, created_at FROM verdicts WHERE pair_id = ?", (pid,)
            )
        }
        added = 0
        verdicts = rec.get("verdicts") or []
        if not isinstance(verdicts, list) or not all(isinstance(v, dict) for v in verdicts):
            what = f"bundle pair {rec['target_sha256'][:12]} ({rec['method']})"
            raise BundleError(f"{what}: verdicts is not a list of objects; nothing was imported")
        for v in verdicts:
            key = (bool(v.get("admitted")), bool(v.get("strict")), canonical(v.get("checks", [])), v.get("created_at"))
            if key in known:
                continue
            if not isinstance(key[3], str):
                raise BundleError(f"bundle verdict of pair {rec['target_sha256'][:12]} has no created_at")
            conn.execute(
                "INSERT INTO verdicts (pair_id, admitted, strict, checks_json, created_at) VALUES (?,?,?,?,?)",
                (pid, int(key[0]), int(key[1]), json.dumps(v.get("checks", [])), key[3]),
            )
            known.add(key)
            added += 1
        if added:
            new_verdicts += added
            latest = conn.execute(
                "SELECT id, admitted, strict, created_at FROM verdicts WHERE pair_id = ? "
                "ORDER BY created_at DESC, id DESC LIMIT 1",
                (pid,),
            ).fetchone()
            conn.execute(
                "UPDATE pairs SET admitted = ?, strict = ?, latest_verdict_id = ?, n_verdicts = "
                "(SELECT count(*) FROM verdicts WHERE pair_id = ?), updated_at = ? WHERE id = ?",
                (latest[1], latest[2], latest[0], pid, stamp, pid),
            )
    return new_pairs, new_verdicts
