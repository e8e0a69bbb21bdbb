"""Benchmark runs as audit evidence: find the runs on a pair and reduce one to a RunDigest.

The digest keeps what the gates and reports read (medians, p95, per-request speed-up spread,
equivalence per prompt, memory, per-position acceptance, the exact server command lines).
It is built from the runner's per condition x stratum summaries; request rows are read only
where the summaries cannot answer: which prompts changed their output (only when a summary
counts a mismatch) and the per-request speed-up spread (reports only). An audit over a
thousand runs therefore never reads a million request rows.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from specreg.benchmark.summary import percentile
from specreg.schemas.audit import ConditionDigest, RunDigest, StratumRow
from specreg.schemas.bench import (
    ALL_STRATA,
    BASELINE,
    BenchRun,
    ConditionRun,
    ConditionSpec,
    ConditionSummary,
    MemoryObservation,
    RunInfo,
    RunManifest,
    SpecCounters,
)
from specreg.schemas.registry import PairRecord

if TYPE_CHECKING:
    from specreg.registry.store import Registry

MIB = 1 << 20
Ratios = dict[tuple[str, str], list[float]]  # (condition, stratum) -> per-request speed-ups
Failing = set[tuple[str, str, str]]  # (condition, stratum, prompt id) whose output changed


class RunHead(NamedTuple):
    """A run's identity and manifest: enough to choose evidence without loading requests."""

    info: RunInfo
    manifest: RunManifest | None


def _mib(n: int | None) -> float | None:
    return None if n is None else n / MIB


def runtime_identity(manifest: RunManifest | None) -> str | None:
    """One line naming the server program (what a policy's `evidence.runtime` matches)."""
    if manifest is None:
        return None
    rt = manifest.runtime
    parts = [rt.kind, rt.version_text]
    if rt.xllamacpp_version and rt.xllamacpp_version not in rt.version_text:
        parts.append(f"xllamacpp {rt.xllamacpp_version}")
    return " ".join(p for p in parts if p)


def hardware_identity(manifest: RunManifest | None) -> str | None:
    """CPU, GPU(s) and placement in one line (what `evidence.hardware` matches)."""
    if manifest is None:
        return None
    hw = manifest.hardware
    gpus = ", ".join(d.name for d in hw.gpu.devices) if hw.gpu.present else "no GPU"
    return f"{hw.cpu_model or 'unknown CPU'} x{hw.logical_cores or '?'}; {gpus}; {hw.placement}"


def _condition(c: ConditionRun, base: ConditionRun | None) -> ConditionDigest:
    gpu = c.memory.gpu if c.memory else None
    bgpu = base.memory.gpu if base and base.memory else None
    peak_ram = _mib(c.memory.peak_rss_bytes) if c.memory else None
    base_ram = _mib(base.memory.peak_rss_bytes) if base and base.memory else None
    peak_vram = _mib(gpu.peak_vram_bytes) if gpu and gpu.present else None
    base_vram = _mib(bgpu.peak_vram_bytes) if bgpu and bgpu.present else None
    counters = c.counters
    by_pos: list[float | None] = []
    if counters and counters.per_position:
        # share of verification steps whose draft token at this position was accepted
        for pos in range(min(counters.per_position), max(counters.per_position) + 1):
            n = counters.per_position.get(pos, 0)
            by_pos.append(n / counters.steps if counters.steps else None)
    return ConditionDigest(
        label=c.spec.name, spec_type=c.spec.method, draft_sha256=c.spec.draft_sha256,
        params=dict(c.spec.params), status=c.status, failure=c.failure, command=list(c.argv),
        peak_ram_mib=peak_ram, peak_vram_mib=peak_vram,
        extra_ram_mib=None if c is base or peak_ram is None or base_ram is None else peak_ram - base_ram,
        extra_vram_mib=None if c is base or peak_vram is None or base_vram is None else peak_vram - base_vram,
        acceptance=counters.acceptance if counters else None, acceptance_by_position=by_pos,
    )


def _mismatch(s: ConditionSummary) -> bool:
    """Did any request of this summary change its output or fail its `expect`?"""
    return s.method != BASELINE and (s.n_equal < s.n_compared or s.n_expect_failed > 0)


def build_digest(head: RunHead, conditions: list[ConditionRun], summaries: list[ConditionSummary],
                 prompts: dict[str, list[str]], failing: Failing, ratios: Ratios | None = None) -> RunDigest:
    """The audit's and reports' view of one run.

    prompts: stratum -> prompt ids of the run's workload; failing: prompts whose output changed
    (and whose `expect` did not pass either); ratios: per-request speed-ups (optional spread).
    """
    info, man = head
    conc = man.request.concurrency if man else 1
    base = next((c for c in conditions if c.spec.method == BASELINE), None)
    every = sorted({p for ps in prompts.values() for p in ps})
    by_stratum = {st: sorted(ps) for st, ps in prompts.items()}  # once per stratum, not per summary
    rows: list[StratumRow] = []
    for s in summaries:
        ids = every if s.stratum == ALL_STRATA else by_stratum.get(s.stratum, [])
        is_base = s.method == BASELINE
        spread = ratios.get((s.condition, s.stratum), []) if ratios else []
        failed = sorted({p for c, st, p in failing
                         if c == s.condition and (s.stratum == ALL_STRATA or st == s.stratum)}) if failing else []
        # greedy runs compare outputs with the baseline; sampled runs only have their `expect` checks
        compared = s.n_compared or s.n_expect_checked
        passed = compared if not failed else (s.n_equal if s.n_compared else compared - s.n_expect_failed)
        rows.append(StratumRow(
            condition=s.condition, stratum=s.stratum, concurrency=conc, n_requests=s.n_requests,
            n_repetitions=s.n_requests // len(ids) if ids else 0,  # requests per prompt
            median_total_ms=s.total_ms.p50, p95_total_ms=s.total_ms.p95,
            median_ttft_ms=s.ttft_ms.p50, median_tpot_ms=s.tpot_ms.p50, acceptance=s.acceptance,
            speedup=s.speedup, speedup_p5=percentile(spread, 5), speedup_p95=percentile(spread, 95),
            errors=s.n_errors, timeouts=s.n_timeouts,
            equivalent=0 if is_base else passed, compared=0 if is_base else compared,
            failed_prompts=[] if is_base else failed, prompts=ids,
        ))
    total_vram = None
    if man and man.hardware.gpu.present:
        sizes = [d.memory_total_bytes for d in man.hardware.gpu.devices if d.memory_total_bytes]
        total_vram = _mib(sum(sizes)) if sizes else None
    return RunDigest(
        run_id=info.run_id, status=info.status, created_at=info.started_at,
        runtime=runtime_identity(man), hardware=hardware_identity(man),
        total_ram_mib=_mib(man.hardware.ram_bytes) if man else None, total_vram_mib=total_vram,
        target_sha256=info.target_sha256, workload=man.request.workload if man else None,
        repetitions=man.observation.repeat if man else 0,
        conditions=[_condition(c, base) for c in conditions], strata=rows,
    )


def _ratios(rows: Iterable[tuple[str, str, str, int, bool, float | None]], baseline: str | None) -> Ratios:
    """Per-request speed-ups: the baseline's total ms for the same prompt and repetition / this one's."""
    rows = list(rows)
    base = {(p, rep): ms for c, _, p, rep, ok, ms in rows if c == baseline and ok and ms}
    out: Ratios = defaultdict(list)
    for c, stratum, p, rep, ok, ms in rows:
        if c != baseline and ok and ms and (p, rep) in base:
            out[(c, stratum)].append(base[(p, rep)] / ms)
            out[(c, ALL_STRATA)].append(base[(p, rep)] / ms)
    return out


def _changed(matches: bool | None, expect_ok: bool | None) -> bool:
    """Output differs from the baseline (or `expect` failed) and nothing passed instead."""
    return not (matches is True or expect_ok is True) and (matches is False or expect_ok is False)


def digest_run(run: BenchRun) -> RunDigest:
    """Digest of a fully loaded run (`specreg runs show --report`), spread included."""
    prompts: dict[str, list[str]] = defaultdict(list)
    for p in run.prompts:
        prompts[p.stratum].append(p.id)
    failing = {(r.condition, r.stratum, r.prompt_id) for r in run.requests
               if _changed(r.matches_baseline, r.expect_ok)}
    base = next((c.spec.name for c in run.conditions if c.spec.method == BASELINE), None)
    ratios = _ratios(((r.condition, r.stratum, r.prompt_id, r.repeat, r.ok, r.total_ms) for r in run.requests), base)
    return build_digest(RunHead(run.info, run.manifest), run.conditions, run.summaries, prompts, failing, ratios)


# ---- reading runs from the registry ----------------------------------------------------------


def _rows(reg: Registry, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]:
    cur = reg.conn.execute(sql, params)
    cur.row_factory = sqlite3.Row
    return cur.fetchall()


def _head(r: sqlite3.Row) -> RunHead:
    info = RunInfo(run_id=r["run_id"], pair_id=r["pair_id"], status=r["status"], status_reason=r["status_reason"],
                   method=r["method"], target_sha256=r["target_sha256"], draft_sha256=r["draft_sha256"],
                   started_at=r["started_at"], finished_at=r["finished_at"], run_dir=r["run_dir"])
    man = RunManifest.model_validate_json(r["manifest_json"]) if r["manifest_json"] else None
    return RunHead(info, man)


_HEAD_COLS = ("r.run_id, r.pair_id, r.status, r.status_reason, r.method, r.target_sha256, r.draft_sha256, "
              "r.started_at, r.finished_at, r.run_dir, r.manifest_json")


class RunIndex:
    """Every run's head and condition methods, read once: audits of thousands of pairs ask often."""

    def __init__(self, reg: Registry) -> None:
        methods: dict[str, set[str]] = defaultdict(set)
        for run_id, method in reg.conn.execute("SELECT run_id, method FROM bench_conditions"):
            methods[run_id].add(method)
        self.by_target: dict[str, list[tuple[sqlite3.Row, set[str]]]] = defaultdict(list)
        for r in _rows(reg, f"SELECT {_HEAD_COLS} FROM bench_runs r ORDER BY r.started_at DESC, r.run_id DESC"):
            self.by_target[r["target_sha256"]].append((r, methods.get(r["run_id"], set())))
        self._heads: dict[str, RunHead] = {}

    def __call__(self, reg: Registry, pair: PairRecord) -> list[RunHead]:
        out = []
        for r, methods in self.by_target.get(pair.target_sha256, []):
            if pair.method in methods and (pair.draft_sha256 is None or r["draft_sha256"] == pair.draft_sha256):
                if r["run_id"] not in self._heads:
                    self._heads[r["run_id"]] = _head(r)
                out.append(self._heads[r["run_id"]])
        return out


def runs_for_pair(reg: Registry, pair: PairRecord) -> list[RunHead]:
    """Runs holding a condition for this pair (same target, method, draft), newest first.

    An n-gram pair is measured inside any run on its target (every run includes the n-gram
    conditions), so runs are matched by their conditions, not by the pair id they were started for.
    """
    where = "r.target_sha256 = ?" + (" AND r.draft_sha256 = ?" if pair.draft_sha256 else "")
    params = (pair.target_sha256, *([pair.draft_sha256] if pair.draft_sha256 else []), pair.method)
    return [_head(r) for r in _rows(
        reg, f"SELECT {_HEAD_COLS} FROM bench_runs r WHERE {where} AND EXISTS (SELECT 1 FROM bench_conditions c "
             "WHERE c.run_id = r.run_id AND c.method = ?) ORDER BY r.started_at DESC, r.run_id DESC", params)]


_MISMATCH = (
    "AND NOT (ifnull(matches_baseline, 0) = 1 OR ifnull(expect_ok, 0) = 1) "
    "AND (matches_baseline = 0 OR expect_ok = 0)"
)
_IN_RUNS = "run_id IN (SELECT value FROM json_each(?))"


def _condition_run(c: sqlite3.Row) -> ConditionRun:
    return ConditionRun(idx=c["idx"], spec=ConditionSpec.model_validate_json(c["spec_json"]), status=c["status"],
                        failure=c["failure"], argv=json.loads(c["argv_json"]),
                        counters=SpecCounters.model_validate_json(c["counters_json"]) if c["counters_json"] else None,
                        memory=MemoryObservation.model_validate_json(c["memory_json"]) if c["memory_json"] else None)


def load_digest(reg: Registry, head: RunHead, *, spread: bool = True) -> RunDigest:
    """Digest one run from the bench tables; request rows are read only when needed (see above)."""
    return load_digests(reg, [head], spread=spread)[head.info.run_id]


def load_digests(reg: Registry, heads: Iterable[RunHead], *, spread: bool = True) -> dict[str, RunDigest]:
    """Digests of many runs (run id -> digest), each table read once for all of them: an audit of
    thousands of pairs would otherwise pay three or four queries per run."""
    heads = list(heads)
    if not heads:
        return {}
    ids = json.dumps(sorted({h.info.run_id for h in heads}))
    conds: dict[str, list[ConditionRun]] = defaultdict(list)
    for c in _rows(reg, "SELECT run_id, idx, status, failure, spec_json, argv_json, counters_json, memory_json "
                        f"FROM bench_conditions WHERE {_IN_RUNS} ORDER BY run_id, idx", (ids,)):
        conds[c["run_id"]].append(_condition_run(c))
    sums: dict[str, list[ConditionSummary]] = defaultdict(list)
    for rid, text in reg.conn.execute(
            f"SELECT run_id, summary_json FROM bench_summaries WHERE {_IN_RUNS} ORDER BY rowid", (ids,)):
        sums[rid].append(ConditionSummary.model_validate_json(text))
    prompts: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for rid, stratum, pid in reg.conn.execute(
            f"SELECT run_id, stratum, prompt_id FROM bench_prompts WHERE {_IN_RUNS}", (ids,)):
        prompts[rid][stratum].append(pid)
    failing: dict[str, Failing] = defaultdict(set)
    mismatched = sorted(rid for rid, ss in sums.items() if any(_mismatch(s) for s in ss))
    if mismatched:
        for rid, *key in reg.conn.execute(
                f"SELECT run_id, condition, stratum, prompt_id FROM bench_requests WHERE {_IN_RUNS} {_MISMATCH}",
                (json.dumps(mismatched),)):
            failing[rid].add(tuple(key))  # type: ignore[arg-type]
    out: dict[str, RunDigest] = {}
    for head in heads:
        rid = head.info.run_id
        ratios = None
        if spread:  # reports only: every request row of the run, one run at a time
            base = next((c.spec.name for c in conds[rid] if c.spec.method == BASELINE), None)
            cur = reg.conn.execute(
                "SELECT condition, stratum, prompt_id, repeat, ok, total_ms FROM bench_requests WHERE run_id = ?",
                (rid,))
            ratios = _ratios(cur.fetchall(), base)
        out[rid] = build_digest(head, conds[rid], sums[rid], prompts[rid], failing[rid], ratios)
    return out
