"""Reading runs back for the audit: run heads matched to a pair, and each run's stored parts.

The run store owns the bench_* tables; the audit builds its evidence from what this returns.
Request rows are read only where summaries cannot answer: which prompts changed their output
(only when a summary counts a mismatch) and the per-request timings (reports only), so an audit
over a thousand runs never reads a million request rows.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from specreg.benchmark.store.runstore import run_info
from specreg.registry.db import rows
from specreg.schemas.bench import (
    ConditionRun,
    ConditionSpec,
    ConditionSummary,
    MemoryObservation,
    RunInfo,
    RunManifest,
    SpecCounters,
)
from specreg.schemas.methods import BASELINE
from specreg.schemas.registry import PairRecord
from specreg.schemas.triage import Triage

# `RequestRow.timed_ms` in SQL: the server's own time, the client's total where there is none
TIMED_MS = (
    "CASE WHEN prompt_ms IS NOT NULL AND predicted_ms IS NOT NULL AND prompt_ms + predicted_ms > 0 "
    "THEN prompt_ms + predicted_ms ELSE total_ms END"
)

if TYPE_CHECKING:
    from specreg.registry.store import Registry

# (condition, stratum, prompt id) whose output changed -> its mismatched rows' triages (None: not triaged)
Failing = dict[tuple[str, str, str], list[Triage | None]]
RequestTiming = tuple[str, str, str, int, bool, float | None]  # condition, stratum, prompt, repeat, ok, total ms


class RunHead(NamedTuple):
    """A run's identity and manifest: enough to choose evidence without loading requests."""

    info: RunInfo
    manifest: RunManifest | None


@dataclass
class RunParts:
    """What the bench tables hold for one run, short of its request rows."""

    conditions: list[ConditionRun] = field(default_factory=list)
    summaries: list[ConditionSummary] = field(default_factory=list)
    prompts: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # stratum -> prompt ids
    failing: Failing = field(default_factory=dict)
    timings: list[RequestTiming] | None = None  # only when asked for (per-request spread)


def triage_of(matches: bool | int | None, triage_json: str | None) -> Triage | None:
    """A failing row's triage: only a greedy mismatch (matches_baseline false) has one; an `expect`
    failure, or a row never triaged, has none."""
    if matches is None or matches or not triage_json:
        return None
    return Triage.model_validate_json(triage_json)


def mismatch(s: ConditionSummary) -> bool:
    """Did any request of this summary change its output or fail its `expect`?"""
    return s.method != BASELINE and (s.n_equal < s.n_compared or s.n_expect_failed > 0)


def _head(r: sqlite3.Row) -> RunHead:
    info = run_info(r)
    man = RunManifest.model_validate_json(r["manifest_json"]) if r["manifest_json"] else None
    return RunHead(info, man)


_HEAD_COLS = (
    "r.run_id, r.pair_id, r.status, r.status_reason, r.method, r.target_sha256, r.draft_sha256, "
    "r.started_at, r.finished_at, r.run_dir, r.manifest_json"
)


class RunIndex:
    """Every run's head row, keyed by (target, condition method), read once: audits of thousands of
    pairs ask often. Manifests are parsed only for runs a pair actually asks for, once each."""

    def __init__(self, reg: Registry) -> None:
        methods: dict[str, list[str]] = defaultdict(list)
        for run_id, method in reg.conn.execute("SELECT DISTINCT run_id, method FROM bench_conditions"):
            methods[run_id].append(method)
        # (target, method) -> runs holding a condition of that method, newest first
        self._runs: dict[tuple[str, str], list[sqlite3.Row]] = defaultdict(list)
        for r in rows(reg.conn, f"SELECT {_HEAD_COLS} FROM bench_runs r ORDER BY r.started_at DESC, r.run_id DESC"):
            for method in methods.get(r["run_id"], ()):
                self._runs[(r["target_sha256"], method)].append(r)
        self._heads: dict[str, RunHead] = {}

    def partition(self, group_of: dict[str, str]) -> dict[str, RunIndex]:
        """The index split by a run id -> group mapping (e.g. hardware classes), one view per group,
        sharing parsed heads; runs the mapping leaves out are in no view."""
        views: dict[str, RunIndex] = {}
        for key, held in self._runs.items():
            for r in held:
                group = group_of.get(r["run_id"])
                if group is None:
                    continue
                view = views.get(group)
                if view is None:
                    view = views[group] = object.__new__(RunIndex)
                    view._runs, view._heads = defaultdict(list), self._heads
                view._runs[key].append(r)
        return views

    def _rows(self, pair: PairRecord) -> list[sqlite3.Row]:
        held = self._runs.get((pair.target_sha256, pair.method), [])
        return held if pair.draft_sha256 is None else [r for r in held if r["draft_sha256"] == pair.draft_sha256]

    def measured(self, slots: Mapping[tuple[str, str], list[tuple[int, PairRecord]]]) -> list[PairRecord]:
        """The pairs some run of this index holds a condition for, in their order; `slots` holds the
        pairs to consider by (target, method), each with its position. No manifest is parsed."""
        found = [(i, p) for key in self._runs if key in slots for i, p in slots[key] if self._rows(p)]
        return [p for _, p in sorted(found, key=lambda ip: ip[0])]

    def __call__(self, reg: Registry, pair: PairRecord) -> list[RunHead]:
        out = []
        for r in self._rows(pair):
            head = self._heads.get(r["run_id"])
            if head is None:
                head = self._heads[r["run_id"]] = _head(r)
            out.append(head)
        return out


def heads_of(reg: Registry, run_ids: Iterable[str]) -> list[RunHead]:
    """The heads of these runs (unknown ids are left out), in run id order."""
    found = rows(
        reg.conn,
        f"SELECT {_HEAD_COLS} FROM bench_runs r WHERE r.{_IN_RUNS} ORDER BY r.run_id",
        (json.dumps(sorted(set(run_ids))),),
    )
    return [_head(r) for r in found]


def runs_for_pair(reg: Registry, pair: PairRecord) -> list[RunHead]:
    """Runs holding a condition for this pair (same target, method, draft), newest first.

    An n-gram pair is measured inside any run on its target (every run includes the n-gram
    conditions), so runs are matched by their conditions, not by the pair id they were started for.
    """
    where = "r.target_sha256 = ?" + (" AND r.draft_sha256 = ?" if pair.draft_sha256 else "")
    params = (pair.target_sha256, *([pair.draft_sha256] if pair.draft_sha256 else []), pair.method)
    return [
        _head(r)
        for r in rows(
            reg.conn,
            f"SELECT {_HEAD_COLS} FROM bench_runs r WHERE {where} AND EXISTS (SELECT 1 FROM bench_conditions c "
            "WHERE c.run_id = r.run_id AND c.method = ?) ORDER BY r.started_at DESC, r.run_id DESC",
            params,
        )
    ]


_MISMATCH = (
    "AND NOT (ifnull(matches_baseline, 0) = 1 OR ifnull(expect_ok, 0) = 1) AND (matches_baseline = 0 OR expect_ok = 0)"
)
_IN_RUNS = "run_id IN (SELECT value FROM json_each(?))"


def _condition_run(c: sqlite3.Row) -> ConditionRun:
    return ConditionRun(
        idx=c["idx"],
        spec=ConditionSpec.model_validate_json(c["spec_json"]),
        status=c["status"],
        failure=c["failure"],
        argv=json.loads(c["argv_json"]),
        counters=SpecCounters.model_validate_json(c["counters_json"]) if c["counters_json"] else None,
        memory=MemoryObservation.model_validate_json(c["memory_json"]) if c["memory_json"] else None,
    )


def load_parts(reg: Registry, run_ids: Iterable[str], *, timings: bool = False) -> dict[str, RunParts]:
    """The stored parts of many runs (run id -> parts), each table read once for all of them: an audit
    of thousands of pairs would otherwise pay three or four queries per run."""
    wanted = sorted(set(run_ids))
    out: dict[str, RunParts] = {rid: RunParts() for rid in wanted}
    if not wanted:
        return out
    ids = json.dumps(wanted)
    for c in rows(
        reg.conn,
        "SELECT run_id, idx, status, failure, spec_json, argv_json, counters_json, memory_json "
        f"FROM bench_conditions WHERE {_IN_RUNS} ORDER BY run_id, idx",
        (ids,),
    ):
        out[c["run_id"]].conditions.append(_condition_run(c))
    # in the order they were written (rowid), sorted here: SQLite would sort the JSON texts in a temporary B-tree
    found = reg.conn.execute(f"SELECT rowid, run_id, summary_json FROM bench_summaries WHERE {_IN_RUNS}", (ids,))
    for _, rid, text in sorted(found):
        out[rid].summaries.append(ConditionSummary.model_validate_json(text))
    for rid, stratum, pid in reg.conn.execute(
        f"SELECT run_id, stratum, prompt_id FROM bench_prompts WHERE {_IN_RUNS}", (ids,)
    ):
        out[rid].prompts[stratum].append(pid)
    mismatched = sorted(rid for rid, parts in out.items() if any(mismatch(s) for s in parts.summaries))
    if mismatched:
        for rid, cond, stratum, pid, matches, triage in reg.conn.execute(
            "SELECT run_id, condition, stratum, prompt_id, matches_baseline, triage_json "
            f"FROM bench_requests WHERE {_IN_RUNS} {_MISMATCH}",
            (json.dumps(mismatched),),
        ):
            out[rid].failing.setdefault((cond, stratum, pid), []).append(triage_of(matches, triage))
    if timings:  # reports only: every request row of the run, one run at a time
        for rid in wanted:
            out[rid].timings = reg.conn.execute(
                f"SELECT condition, stratum, prompt_id, repeat, ok, {TIMED_MS} FROM bench_requests WHERE run_id = ?",
                (rid,),
            ).fetchall()
    return out


@dataclass(frozen=True)
class RunResult:
    """What a run found, in one line of `specreg runs`: its fastest speculative condition over all
    strata (with the interval), and the conditions whose outputs differ from the baseline or that failed."""

    best_condition: str | None = None
    best_speedup: float | None = None
    best_ci95: tuple[float, float] | None = None
    mismatched: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()


def _finite(x: object) -> bool:
    return x is None or (isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x))


def run_results(reg: Registry) -> dict[str, RunResult]:
    """Every run's result from its `all` summaries (one query, no request rows read)."""
    # one json_extract with several paths parses each summary once (a thousand runs: one pass)
    sql = (
        "SELECT run_id, condition, json_extract(summary_json, '$.method', '$.status', '$.speedup', "
        "'$.speedup_ci95', '$.first_mismatch') FROM bench_summaries WHERE stratum = 'all' AND json_valid(summary_json) "
        "ORDER BY run_id, rowid"
    )  # a summary that is not JSON (a NaN written into it) gives no result: `runs show` names it
    found: dict[str, list[tuple[str, str, str, float | None, list[float] | None, str | None]]] = defaultdict(list)
    for rid, cond, fields in reg.conn.execute(sql):
        method, status, speedup, ci, mismatch = json.loads(fields)
        if not _finite(speedup) or not (
            ci is None or (isinstance(ci, list) and len(ci) == 2 and all(map(_finite, ci)))
        ):
            speedup, ci = None, None  # never a number no statistic can be
        found[rid].append((cond, method, status, speedup, ci, mismatch))
    out: dict[str, RunResult] = {}
    for rid, conds in found.items():
        measured = [c for c in conds if c[1] != BASELINE and c[3] is not None and c[2] == "ok"]
        best = max(measured, key=lambda c: c[3] or 0.0) if measured else None
        ci = best[4] if best is not None else None
        out[rid] = RunResult(
            best_condition=best[0] if best else None,
            best_speedup=best[3] if best else None,
            best_ci95=(float(ci[0]), float(ci[1])) if ci else None,
            mismatched=tuple(c[0] for c in conds if c[5]),
            failed=tuple(c[0] for c in conds if c[2] not in ("ok", "running", "pending")),
        )
    return out
