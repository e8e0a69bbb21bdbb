"""Registry records in a portable form (result bundles): artifacts and pairs with their verdicts.

A record is a table row as plain JSON: local row ids and paths are left out (the model bytes
stay on the machine that has them), `*_json` columns travel parsed under their name without the
suffix, and null values are dropped, so a column added by a later migration reads the same as
one that was never there. Merging is keyed by content, never by local ids: artifacts by SHA-256,
pairs by (target, draft, method, rule set), verdicts by what they say, when and who said it. An
imported verdict is evidence about the machine that made it (table imported_verdicts), never
this machine's verdict: a pair is admitted here only by checks made here.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from specreg.errors import BundleError
from specreg.registry.db import now_iso


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
        self.known = frozenset(self.keys) | fixed
        self.json_at = [i for i, c in enumerate(cols) if c.endswith("_json")]

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
        out = [get(k) for k in self.keys]
        for i in self.json_at:  # a few of ~40 columns: not a test per column per row
            if out[i] is not None:
                out[i] = json.dumps(out[i])
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


def pair_records(conn: sqlite3.Connection, pair_ids: Iterable[int]) -> Iterator[dict[str, Any]]:
    """Each pair's identity with every verdict recorded for it (oldest first), sorted by identity:
    the verdicts made here without an `origin` (the bundle's own), those imported from elsewhere
    with the origin they came with (so a re-export never passes another machine's word as ours)."""
    ids = json.dumps(sorted(set(pair_ids)))
    verdicts: dict[int, list[tuple[str, int, dict[str, Any]]]] = {}
    for pid, admitted, strict, checks, created, vid in conn.execute(
        "SELECT pair_id, admitted, strict, checks_json, created_at, id FROM verdicts "
        "WHERE pair_id IN (SELECT value FROM json_each(?))",
        (ids,),
    ):
        mine = {"admitted": bool(admitted), "strict": bool(strict), "checks": json.loads(checks), "created_at": created}
        verdicts.setdefault(pid, []).append((created, vid, mine))
    for pid, admitted, strict, checks, created, host, version, vid in conn.execute(
        "SELECT pair_id, admitted, strict, checks_json, created_at, host, specreg_version, id FROM imported_verdicts "
        "WHERE pair_id IN (SELECT value FROM json_each(?))",
        (ids,),
    ):
        theirs = {
            "admitted": bool(admitted),
            "strict": bool(strict),
            "checks": json.loads(checks),
            "created_at": created,
        }
        theirs["origin"] = {"host": host, "specreg_version": version}
        verdicts.setdefault(pid, []).append((created, (1 << 62) + vid, theirs))
    rows = conn.execute(
        "SELECT id, target_sha256, draft_sha256, method, rule_set FROM pairs "
        "WHERE id IN (SELECT value FROM json_each(?))",
        (ids,),
    ).fetchall()
    for pid, target, draft, method, rule_set in sorted(rows, key=lambda r: (r[1], r[2] or "", r[3], r[4])):
        rec: dict[str, Any] = {"target_sha256": target, "method": method, "rule_set": rule_set}
        if draft is not None:
            rec["draft_sha256"] = draft
        rec["verdicts"] = [v for _, _, v in sorted(verdicts.get(pid, []), key=lambda x: (x[0], x[1]))]
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


@dataclass(frozen=True)
class PairsMerged:
    """What merging a bundle's pairs added: pairs new here, imported verdicts new here, the pairs
    this machine has not checked itself (no verdict of its own: to be checked here), and the
    imported verdicts (ids, new or held already) that the bundle's own host made: those a
    signature over the bundle vouches for (a verdict it relays from elsewhere names its origin)."""

    pairs: int
    verdicts: int
    unchecked: list[int]
    own: list[int]


_SHA = re.compile(r"[0-9a-f]{64}")
_MAX_TEXT = 200  # a host name, a specreg version


def _refuse_pair(rec: Mapping[str, Any], why: str) -> BundleError:
    sha = rec.get("target_sha256")
    what = f"{sha[:12]} ({str(rec.get('method'))[:40]})" if isinstance(sha, str) else "record"
    return BundleError(f"bundle pair {what}: {why}; nothing was imported")


def _check_pair_record(rec: Mapping[str, Any]) -> None:
    """A pair's identity as specreg writes it: SHA-256 digests, a method and a rule set this specreg knows."""
    from specreg.schemas.methods import Method
    from specreg.validators.ruleset import current_rule_set_id

    for field in ("target_sha256", "method", "rule_set"):
        if not isinstance(rec.get(field), str):
            raise BundleError(f"bundle pair record without {field}; nothing was imported")
    draft = rec.get("draft_sha256")
    draft_ok = draft is None or (isinstance(draft, str) and _SHA.fullmatch(draft))
    if not _SHA.fullmatch(rec["target_sha256"]) or not draft_ok:
        raise _refuse_pair(rec, "a SHA-256 is not 64 hex digits")
    if rec["method"] not in {m.value for m in Method}:
        raise _refuse_pair(rec, f"unknown method {rec['method'][:40]!r}")
    if current_rule_set_id(rec["rule_set"]) is None or not re.fullmatch(r"[^/]+/r[0-9]+", rec["rule_set"]):
        raise _refuse_pair(rec, f"unknown rule set {rec['rule_set'][:60]!r}")


def imported_verdict(rec: Mapping[str, Any], v: object, origin: tuple[str, str]) -> dict[str, Any]:
    """One bundled verdict checked as evidence worth keeping: a verdict with its own checks (at
    least one, each of the shape specreg writes), an outcome those checks give (admitted iff no
    error), a real ISO 8601 time and who made it. Anything else is refused: a verdict is only
    evidence when it says what it rests on."""
    from datetime import datetime

    from specreg.registry.pairs import load_checks
    from specreg.schemas.record import to_python

    if not isinstance(v, dict):
        raise _refuse_pair(rec, "a verdict is not an object")
    admitted, strict, created = v.get("admitted"), v.get("strict", False), v.get("created_at")
    if not isinstance(admitted, bool) or not isinstance(strict, bool):
        raise _refuse_pair(rec, "a verdict's admitted or strict is not true or false")
    raw = v.get("checks")
    checks = load_checks(json.dumps(raw)) if isinstance(raw, list) and raw else None
    if not checks:
        raise _refuse_pair(rec, "a verdict carries no checks (or checks of another shape)")
    if admitted == any(c.severity == "error" for c in checks):
        raise _refuse_pair(rec, "a verdict's outcome is not what its checks give")
    try:
        if not isinstance(created, str) or len(created) > 40:
            raise ValueError
        datetime.fromisoformat(created)
    except ValueError:
        raise _refuse_pair(rec, f"a verdict's created_at {str(created)[:40]!r} is not an ISO 8601 time") from None
    who = v.get("origin", {"host": origin[0], "specreg_version": origin[1]})
    host, version = (who.get("host"), who.get("specreg_version")) if isinstance(who, dict) else (None, None)
    if not all(isinstance(x, str) and 0 < len(x) <= _MAX_TEXT for x in (host, version)):
        raise _refuse_pair(rec, "a verdict's origin is not a host and a specreg version")
    return {
        "admitted": admitted,
        "strict": strict,
        "checks": [to_python(c) for c in checks],
        "created_at": created,
        "host": host,
        "specreg_version": version,
    }


def merge_pairs(
    conn: sqlite3.Connection, records: Iterable[Mapping[str, Any]], origin: tuple[str, str], bundle_digest: str
) -> PairsMerged:
    """Add unknown pairs and, as evidence about the machine that made them, the verdicts this
    registry has not recorded yet (`origin`: the bundle's host and specreg version, for verdicts
    that name none). Nothing here changes a pair's standing verdict: that is made of this
    machine's own checks alone (registry/evidence.py). Inside the caller's transaction."""
    new_pairs = new_verdicts = 0
    unchecked: list[int] = []
    own: list[int] = []
    for rec in records:
        _check_pair_record(rec)
        verdicts = rec.get("verdicts")
        if not isinstance(verdicts, list) or not verdicts:
            raise _refuse_pair(rec, "verdicts is not a non-empty list of objects")
        found = [imported_verdict(rec, v, origin) for v in verdicts]  # every one checked before any write
        relayed = [isinstance(v, dict) and "origin" in v for v in verdicts]
        stamp = now_iso()
        pid = find_pair(conn, rec)
        if pid is None:
            cur = conn.execute(
                "INSERT INTO pairs (target_sha256, draft_sha256, method, rule_set, admitted, strict, n_verdicts, "
                "created_at, updated_at) VALUES (?,?,?,?,0,0,0,?,?)",
                (rec["target_sha256"], rec.get("draft_sha256"), rec["method"], rec["rule_set"], stamp, stamp),
            )
            pid = int(cur.lastrowid or 0)
            new_pairs += 1
        mine = {
            (bool(a), bool(s), canonical(json.loads(c)), t)
            for a, s, c, t in conn.execute(
                "SELECT admitted, strict, checks_json, created_at FROM verdicts WHERE pair_id = ?", (pid,)
            )
        }
        known = {
            (bool(a), bool(s), canonical(json.loads(c)), t, h): vid
            for vid, a, s, c, t, h in conn.execute(
                "SELECT id, admitted, strict, checks_json, created_at, host FROM imported_verdicts WHERE pair_id = ?",
                (pid,),
            )
        }
        for v, elsewhere in zip(found, relayed, strict=True):
            key = (v["admitted"], v["strict"], canonical(v["checks"]), v["created_at"])
            if key in mine:  # our own verdict coming back
                continue
            held = known.get((*key, v["host"]))
            if held is not None:  # one we hold already
                if not elsewhere:
                    own.append(held)
                continue
            cur = conn.execute(
                "INSERT INTO imported_verdicts (pair_id, admitted, strict, checks_json, created_at, host, "
                "specreg_version, bundle_digest, imported_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    pid,
                    int(v["admitted"]),
                    int(v["strict"]),
                    json.dumps(v["checks"]),
                    v["created_at"],
                    v["host"],
                    v["specreg_version"],
                    bundle_digest,
                    stamp,
                ),
            )
            known[(*key, v["host"])] = int(cur.lastrowid or 0)
            if not elsewhere:
                own.append(known[(*key, v["host"])])
            new_verdicts += 1
        if not mine:
            unchecked.append(pid)
    return PairsMerged(new_pairs, new_verdicts, sorted(set(unchecked)), sorted(set(own)))
