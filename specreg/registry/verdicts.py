"""Pairs and their verdicts: every verdict is kept; a pair shows its latest one."""

from __future__ import annotations

import json
import sqlite3

from pydantic import TypeAdapter

from specreg.errors import ArtifactNotFound, PairNotFound
from specreg.registry._base import RegistryBase, no_gc, now_iso
from specreg.schemas.checks import CheckResult, PairVerdict
from specreg.schemas.registry import PairRecord

_CHECKS = TypeAdapter(list[CheckResult])

_PAIR_SELECT = (
    "SELECT p.id, p.target_sha256, p.draft_sha256, p.method, p.rule_set, p.admitted, p.strict, "
    "p.latest_verdict_id, p.n_verdicts, p.created_at, p.updated_at, {checks} "
    "t.name AS target_name, d.name AS draft_name FROM pairs p "
    "{join} LEFT JOIN artifacts t ON t.sha256 = p.target_sha256 "
    "LEFT JOIN artifacts d ON d.sha256 = p.draft_sha256 "
)


def _pair(row: sqlite3.Row, with_checks: bool) -> PairRecord:
    checks = _CHECKS.validate_json(row["checks_json"]) if with_checks else []
    return PairRecord(
        id=row["id"],
        target_sha256=row["target_sha256"],
        draft_sha256=row["draft_sha256"],
        method=row["method"],
        rule_set=row["rule_set"],
        admitted=bool(row["admitted"]),
        strict=bool(row["strict"]),
        checks=checks,
        verdict_id=row["latest_verdict_id"],
        n_verdicts=row["n_verdicts"],
        target_name=row["target_name"],
        draft_name=row["draft_name"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _select(with_checks: bool) -> str:
    if with_checks:
        return _PAIR_SELECT.format(checks="v.checks_json,", join="JOIN verdicts v ON v.id = p.latest_verdict_id")
    return _PAIR_SELECT.format(checks="", join="")


class VerdictStore(RegistryBase):
    """record_verdict / pairs / get_pair (CONTRACTS.md)."""

    def record_verdict(self, verdict: PairVerdict) -> int:
        """Store a verdict (history is kept) and return the stable id of its pair."""
        stamp = verdict.created_at.isoformat() if verdict.created_at else now_iso()
        checks_json = json.dumps([c.model_dump(mode="json") for c in verdict.checks])
        with self._transaction() as db:
            for role, sha in (("target", verdict.target_sha256), ("draft", verdict.draft_sha256)):
                if sha is not None and self._one("SELECT 1 FROM artifacts WHERE sha256 = ?", (sha,)) is None:
                    raise ArtifactNotFound(
                        f"verdict names {role} sha256 {sha}, which is not registered",
                        hint="register the file first: specreg register FILE",
                    )
            row = self._one(
                "SELECT id FROM pairs WHERE target_sha256 = ? AND ifnull(draft_sha256, '') = ? "
                "AND method = ? AND rule_set = ?",
                (verdict.target_sha256, verdict.draft_sha256 or "", verdict.method, verdict.rule_set),
            )
            if row is None:
                cur = db.execute(
                    "INSERT INTO pairs (target_sha256, draft_sha256, method, rule_set, admitted, "
                    "strict, n_verdicts, created_at, updated_at) VALUES (?,?,?,?,?,?,0,?,?)",
                    (
                        verdict.target_sha256,
                        verdict.draft_sha256,
                        verdict.method,
                        verdict.rule_set,
                        int(verdict.admitted),
                        int(verdict.strict),
                        stamp,
                        stamp,
                    ),
                )
                pair_id = int(cur.lastrowid or 0)
            else:
                pair_id = int(row["id"])
            cur = db.execute(
                "INSERT INTO verdicts (pair_id, admitted, strict, checks_json, created_at) VALUES (?,?,?,?,?)",
                (pair_id, int(verdict.admitted), int(verdict.strict), checks_json, stamp),
            )
            db.execute(
                "UPDATE pairs SET admitted = ?, strict = ?, latest_verdict_id = ?, "
                "n_verdicts = n_verdicts + 1, updated_at = ? WHERE id = ?",
                (int(verdict.admitted), int(verdict.strict), cur.lastrowid, stamp, pair_id),
            )
        return pair_id

    def pairs(self, admitted: bool | None = None, *, with_checks: bool = True) -> list[PairRecord]:
        """Every pair with its latest verdict, optionally only admitted (or rejected) ones."""
        sql = _select(with_checks)
        params: tuple[int, ...] = ()
        if admitted is not None:
            sql += "WHERE p.admitted = ? "
            params = (int(admitted),)
        rows = self._all(sql + "ORDER BY p.id", params)
        with no_gc():
            return [_pair(r, with_checks) for r in rows]

    def admitted_pairs(self) -> list[PairRecord]:
        """Pairs whose latest verdict admitted them (what the benchmark runner may use)."""
        return self.pairs(admitted=True)

    def get_pair(self, pair_id: int) -> PairRecord:
        """One pair by id, with the checks of its latest verdict."""
        row = self._one(_select(True) + "WHERE p.id = ?", (pair_id,))
        if row is None:
            raise PairNotFound(f"no pair with id {pair_id}", hint="`specreg pairs` lists them")
        return _pair(row, with_checks=True)

    def pair_history(self, pair_id: int) -> list[PairVerdict]:
        """Every verdict recorded for a pair, oldest first."""
        pair = self.get_pair(pair_id)
        rows = self._all(
            "SELECT admitted, strict, checks_json, created_at FROM verdicts WHERE pair_id = ? ORDER BY id",
            (pair_id,),
        )
        return [
            PairVerdict(
                admitted=bool(r["admitted"]),
                method=pair.method,
                target_sha256=pair.target_sha256,
                draft_sha256=pair.draft_sha256,
                rule_set=pair.rule_set,
                strict=bool(r["strict"]),
                checks=_CHECKS.validate_json(r["checks_json"]),
                created_at=r["created_at"],
            )
            for r in rows
        ]
