"""Pairs and their verdicts: every verdict is kept; a pair stands on its latest normal verdict.

Owns the tables `pairs` and `verdicts`. A `--strict` check is recorded beside the normal verdict,
not over it (`strict_verdict_id`): strictness is a question a person asks, and its answer must
not withdraw an admission the benchmark runner and the audit rely on. A pair checked only
strictly stands on its strict verdict.
"""

from __future__ import annotations

import sqlite3

from specreg.errors import ArtifactNotFound, PairNotFound
from specreg.registry.db import Database, now_iso, records_in_batches, text
from specreg.schemas.checks import CheckResult, PairVerdict
from specreg.schemas.methods import Method
from specreg.schemas.record import adapter, from_json, stamp, timestamp, to_json
from specreg.schemas.registry import Elsewhere, PairRecord

_FROM = (
    "FROM pairs p {join} LEFT JOIN artifacts t ON t.sha256 = p.target_sha256 "
    "LEFT JOIN artifacts d ON d.sha256 = p.draft_sha256 "
)
# The latest verdict another machine made on the pair (m016: imported, never standing here).
_ELSEWHERE = (
    "(SELECT json_object('host', iv.host, 'specreg_version', iv.specreg_version, 'admitted', "
    "json(CASE WHEN iv.admitted THEN 'true' ELSE 'false' END), 'created_at', iv.created_at, "
    "'n', (SELECT count(*) FROM imported_verdicts c WHERE c.pair_id = p.id)) "
    "FROM imported_verdicts iv WHERE iv.pair_id = p.id ORDER BY iv.created_at DESC, iv.id DESC LIMIT 1)"
)
_PAIR_SELECT = (
    "SELECT p.id, p.target_sha256, p.draft_sha256, p.method, p.rule_set, {admitted} AS admitted, "
    "{strict} AS strict, {verdict} AS verdict_id, p.strict_admitted, p.strict_verdict_id, p.n_verdicts, "
    "p.created_at, p.updated_at, {checks} t.name AS target_name, d.name AS draft_name, "
    + _ELSEWHERE
    + " AS elsewhere "
    + _FROM
)
# The same row as one JSON object (PairRecord's fields) for db.records_in_batches. The stored
# checks are spliced in as they are stored, for the same parser `load_checks` uses: nothing
# re-encodes them in between. `json_valid` keeps a damaged record from running into the other
# fields: it becomes null, which fails validation, and the read takes the per-row path.
_PAIR_JSON = (
    "SELECT CAST('{{\"checks\":' || {checks} || ',' || substr(json_object('id', p.id, "
    "'target_sha256', p.target_sha256, 'draft_sha256', p.draft_sha256, 'method', p.method, "
    "'rule_set', p.rule_set, 'admitted', {admitted}, 'strict', {strict}, 'verdict_id', {verdict}, "
    "'strict_admitted', p.strict_admitted, 'strict_verdict_id', p.strict_verdict_id, "
    "'n_verdicts', p.n_verdicts, 'target_name', t.name, 'draft_name', d.name, "
    "'created_at', p.created_at, 'updated_at', p.updated_at, 'elsewhere', json("
    + _ELSEWHERE
    + ")), 2) AS BLOB) "
    + _FROM
)
_STORED_CHECKS = (
    "CASE WHEN v.id IS NULL THEN '[]' "  # no verdict made here (imported ones only): nothing checked
    "WHEN typeof(v.checks_json) = 'text' AND json_valid(v.checks_json) THEN v.checks_json ELSE 'null' END"
)
# The standing verdict (latest normal, else latest strict), or the latest strict one.
_VIEWS = {
    False: {"admitted": "p.admitted", "strict": "p.strict", "verdict": "p.latest_verdict_id"},
    True: {"admitted": "p.strict_admitted", "strict": "1", "verdict": "p.strict_verdict_id"},
}


def load_checks(raw: str | bytes | None) -> list[CheckResult] | None:
    """A stored verdict's checks, or None when the record cannot be read (a damaged or foreign
    row): one bad record is reported for its pair, never a crash for every pair."""
    try:
        checks: list[CheckResult] = adapter(list[CheckResult]).validate_json(raw or b"")
        return checks
    except ValueError:  # pydantic's ValidationError: invalid JSON, lone surrogates, wrong shape
        return None


def unreadable(verdict_id: object) -> CheckResult:
    """The check that stands in for a verdict that cannot be read: an error, so nothing relies on it."""
    return CheckResult(
        code="registry.unreadable",
        severity="error",
        message=f"stored verdict {verdict_id} cannot be read (damaged record); check the pair again",
    )


def _pair(row: sqlite3.Row, with_checks: bool) -> PairRecord:
    here = row["verdict_id"] is not None
    checks = load_checks(row["checks_json"]) if with_checks and here else []
    admitted = bool(row["admitted"]) and here
    if checks is None:  # never treat an admission we cannot read back as one
        checks, admitted = [unreadable(row["verdict_id"])], False
    strict_admitted = row["strict_admitted"]
    return PairRecord(
        id=row["id"],
        target_sha256=text(row["target_sha256"]),
        draft_sha256=text(row["draft_sha256"]),
        method=Method(text(row["method"])),
        rule_set=text(row["rule_set"]),
        admitted=admitted,
        strict=bool(row["strict"]),
        checks=checks,
        verdict_id=row["verdict_id"],
        strict_admitted=None if strict_admitted is None else bool(strict_admitted),
        strict_verdict_id=row["strict_verdict_id"],
        n_verdicts=row["n_verdicts"],
        target_name=text(row["target_name"]),
        draft_name=text(row["draft_name"]),
        created_at=stamp(row["created_at"]),
        updated_at=stamp(row["updated_at"]),
        elsewhere=_elsewhere(row["elsewhere"]),
    )


def _elsewhere(raw: str | None) -> Elsewhere | None:
    """The latest imported verdict's summary, or None (none imported, or a record that cannot be
    read: evidence from elsewhere is never needed to judge anything here)."""
    if raw is None:
        return None
    try:
        return from_json(Elsewhere, raw)
    except ValueError:
        return None


def _select(with_checks: bool, strict: bool = False, *, as_json: bool = False) -> str:
    view = _VIEWS[strict]
    join = f"LEFT JOIN verdicts v ON v.id = {view['verdict']}" if with_checks else ""
    if as_json:
        return _PAIR_JSON.format(checks=_STORED_CHECKS if with_checks else "'[]'", join=join, **view)
    return _PAIR_SELECT.format(checks="v.checks_json," if with_checks else "", join=join, **view)


def pairs_by_row(found: list[sqlite3.Row], with_checks: bool) -> list[PairRecord]:
    """Rows of `_select()` one by one: the path that reports a damaged record for its own pair."""
    return [_pair(r, with_checks) for r in found]


class PairStore:
    """record_verdict / pairs / get_pair / pair_history (CONTRACTS.md)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record_verdict(self, verdict: PairVerdict) -> int:
        """Store a verdict (history is kept) and return the stable id of its pair."""
        stamp = verdict.created_at.isoformat() if verdict.created_at else now_iso()
        checks_json = to_json(verdict.checks)
        admitted, strict = int(verdict.admitted), int(verdict.strict)
        with self.db.transaction() as conn:
            for role, sha in (("target", verdict.target_sha256), ("draft", verdict.draft_sha256)):
                if sha is not None and self.db.one("SELECT 1 FROM artifacts WHERE sha256 = ?", (sha,)) is None:
                    raise ArtifactNotFound(
                        f"verdict names {role} sha256 {sha}, which is not registered",
                        hint="register the file first: specreg register FILE",
                    )
            row = self.db.one(
                "SELECT id FROM pairs WHERE target_sha256 = ? AND ifnull(draft_sha256, '') = ? "
                "AND method = ? AND rule_set = ?",
                (verdict.target_sha256, verdict.draft_sha256 or "", verdict.method, verdict.rule_set),
            )
            if row is None:
                cur = conn.execute(
                    "INSERT INTO pairs (target_sha256, draft_sha256, method, rule_set, admitted, "
                    "strict, n_verdicts, created_at, updated_at) VALUES (?,?,?,?,?,?,0,?,?)",
                    (
                        verdict.target_sha256,
                        verdict.draft_sha256,
                        verdict.method,
                        verdict.rule_set,
                        admitted,
                        strict,
                        stamp,
                        stamp,
                    ),
                )
                pair_id = int(cur.lastrowid or 0)
            else:
                pair_id = int(row["id"])
            cur = conn.execute(
                "INSERT INTO verdicts (pair_id, admitted, strict, checks_json, created_at) VALUES (?,?,?,?,?)",
                (pair_id, admitted, strict, checks_json, stamp),
            )
            vid = cur.lastrowid
            conn.execute("UPDATE pairs SET n_verdicts = n_verdicts + 1, updated_at = ? WHERE id = ?", (stamp, pair_id))
            if strict:
                conn.execute(
                    "UPDATE pairs SET strict_admitted = ?, strict_verdict_id = ? WHERE id = ?", (admitted, vid, pair_id)
                )
            # A strict verdict stands only where no normal one does.
            conn.execute(
                "UPDATE pairs SET admitted = ?, strict = ?, latest_verdict_id = ? "
                "WHERE id = ? AND (? = 0 OR latest_verdict_id IS NULL OR strict = 1)",
                (admitted, strict, vid, pair_id, strict),
            )
        return pair_id

    def pairs(
        self, admitted: bool | None = None, *, with_checks: bool = True, strict: bool = False
    ) -> list[PairRecord]:
        """Every pair with its standing verdict, optionally only admitted (or rejected) ones.

        `strict=True` shows each pair's latest strict verdict instead (pairs never checked
        strictly are left out).
        """
        where: list[str] = ["p.strict_verdict_id IS NOT NULL"] if strict else []
        params: tuple[int, ...] = ()
        if admitted is not None:
            where.append(f"{_VIEWS[strict]['admitted']} = ?")
            params = (int(admitted),)
        tail = ("WHERE " + " AND ".join(where) + " " if where else "") + "ORDER BY p.id"
        fast = records_in_batches(
            self.db.conn, _select(with_checks, strict, as_json=True) + tail, params, adapter(list[PairRecord])
        )
        if fast is not None:
            return fast
        return pairs_by_row(self.db.rows(_select(with_checks, strict) + tail, params), with_checks)

    def admitted_artifacts(self) -> set[str]:
        """The SHA-256 of every target and draft of a pair whose standing verdict admits it."""
        found = self.db.conn.execute("SELECT target_sha256, draft_sha256 FROM pairs WHERE admitted = 1")
        return {sha for row in found for sha in row if sha}

    def admitted_pairs(self, *, strict: bool = False) -> list[PairRecord]:
        """Pairs whose standing verdict admits them (what the benchmark runner may use);
        `strict=True`: those whose latest strict verdict admits them."""
        return self.pairs(admitted=True, strict=strict)

    def get_pair(self, pair_id: int) -> PairRecord:
        """One pair by id, with the checks of its standing verdict."""
        row = self.db.one(_select(True) + "WHERE p.id = ?", (pair_id,))
        if row is None:
            raise PairNotFound(f"no pair with id {pair_id}", hint="`specreg pairs` lists them")
        return _pair(row, with_checks=True)

    def pair_history(self, pair_id: int) -> list[PairVerdict]:
        """Every verdict recorded for a pair, oldest first."""
        pair = self.get_pair(pair_id)
        found = self.db.rows(
            "SELECT id, admitted, strict, checks_json, created_at FROM verdicts WHERE pair_id = ? ORDER BY id",
            (pair_id,),
        )
        out = []
        for r in found:
            checks = load_checks(r["checks_json"])
            out.append(
                PairVerdict(
                    admitted=bool(r["admitted"]) and checks is not None,
                    method=pair.method,
                    target_sha256=pair.target_sha256,
                    draft_sha256=pair.draft_sha256,
                    rule_set=pair.rule_set,
                    strict=bool(r["strict"]),
                    checks=checks if checks is not None else [unreadable(r["id"])],
                    created_at=timestamp(r["created_at"]),
                )
            )
        return out
