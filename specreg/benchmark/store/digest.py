"""Benchmark runs as audit evidence: reduce a run to the RunDigest the gates and reports read.

The digest keeps medians, p95, speed-ups with their intervals and the acceptance check,
per-request speed-up spread, equivalence per prompt, memory, per-position acceptance and the
exact server command lines; every condition with its draft length and concurrency. It is built from the runner's per
condition x stratum summaries (read by `benchmark.run_index`, which owns the queries).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from specreg.benchmark.store import contention, digest_cache
from specreg.benchmark.store.condition_summary import percentile
from specreg.benchmark.store.run_index import Failing, RequestTiming, RunHead, heads_of, load_parts
from specreg.benchmark.store.sampling import arm
from specreg.errors import RunUnreadable, SpecregError, first_error
from specreg.schemas.audit import ConditionDigest, RunDigest, StratumRow
from specreg.schemas.bench import ALL_STRATA, BenchRun, ConditionRun, ConditionSummary, RunManifest
from specreg.schemas.methods import BASELINE
from specreg.schemas.triage import Triage, worst
from specreg.servers.hardware import hardware_class
from specreg.units import to_mib

if TYPE_CHECKING:
    from specreg.registry.store import Registry

Ratios = dict[tuple[str, str], list[float]]  # (condition, stratum) -> per-request speed-ups


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
    return None if manifest is None else hardware_class(manifest.hardware.model_dump(mode="json"))


def _concurrency_of(c: ConditionRun, default: int) -> int:
    """A condition's concurrency; runs stored before it was per condition used one for all."""
    return c.spec.concurrency if "concurrency" in c.spec.model_fields_set else default


def _condition(c: ConditionRun, base: ConditionRun | None, conc: int) -> ConditionDigest:
    gpu = c.memory.gpu if c.memory else None
    bgpu = base.memory.gpu if base and base.memory else None
    peak_ram = to_mib(c.memory.peak_rss_bytes) if c.memory else None
    base_ram = to_mib(base.memory.peak_rss_bytes) if base and base.memory else None
    peak_vram = to_mib(gpu.peak_vram_bytes) if gpu and gpu.present else None
    base_vram = to_mib(bgpu.peak_vram_bytes) if bgpu and bgpu.present else None
    counters = c.counters
    by_pos: list[float | None] = []
    if counters and counters.per_position:
        # share of verification steps whose draft token at this position was accepted
        for pos in range(min(counters.per_position), max(counters.per_position) + 1):
            n = counters.per_position.get(pos, 0)
            by_pos.append(n / counters.steps if counters.steps else None)
    return ConditionDigest(
        label=c.spec.name,
        spec_type=c.spec.method,
        draft_sha256=c.spec.draft_sha256,
        params=dict(c.spec.params),
        concurrency=conc,
        draft_n_max=c.spec.draft_n_max,
        draft_n_min=c.spec.draft_n_min,
        status=c.status,
        failure=c.failure,
        command=list(c.argv),
        peak_ram_mib=peak_ram,
        predicted_ram_mib=to_mib(c.memory.predicted_rss_bytes) if c.memory else None,
        peak_vram_mib=peak_vram,
        extra_ram_mib=None if c is base or peak_ram is None or base_ram is None else peak_ram - base_ram,
        extra_vram_mib=None if c is base or peak_vram is None or base_vram is None else peak_vram - base_vram,
        acceptance=counters.acceptance if counters else None,
        acceptance_by_position=by_pos,
        drafts=counters.steps if counters else None,
        drafted_tokens=counters.drafted if counters else None,
        warmup_notes=[
            f"round {w.round}: {len(w.latencies_ms)} warm-up requests never agreed within {w.tolerance:.0%} "
            f"({', '.join(f'{x:.0f}' for x in w.latencies_ms)} ms)"
            for w in c.warmup
            if w.steady is False
        ],
        temperature=c.spec.temperature,
        top_p=c.spec.top_p,
        top_k=c.spec.top_k,
        min_p=c.spec.min_p,
        draft_sampling=c.spec.draft_sampling,
    )


def build_digest(
    head: RunHead,
    conditions: list[ConditionRun],
    summaries: list[ConditionSummary],
    prompts: dict[str, list[str]],
    failing: Failing,
    ratios: Ratios | None = None,
) -> RunDigest:
    """The audit's and reports' view of one run.

    prompts: stratum -> prompt ids of the run's workload; failing: prompts whose output changed
    (and whose `expect` did not pass either); ratios: per-request speed-ups (optional spread).
    """
    info, man = head
    conc = man.request.concurrency if man else 1
    levels = {c.idx: _concurrency_of(c, conc) for c in conditions}
    arms = {c.idx: (levels[c.idx], arm(c.spec)[1]) for c in conditions}  # same concurrency and sampler
    bases = {arms[c.idx]: c for c in reversed(conditions) if c.spec.method == BASELINE}
    every = sorted({p for ps in prompts.values() for p in ps})
    by_stratum = {st: sorted(ps) for st, ps in prompts.items()}  # once per stratum, not per summary
    rows: list[StratumRow] = []
    for s in summaries:
        ids = every if s.stratum == ALL_STRATA else by_stratum.get(s.stratum, [])
        is_base = s.method == BASELINE
        spread = ratios.get((s.condition, s.stratum), []) if ratios else []
        mine = [(p, ts) for (c, st, p), ts in failing.items() if c == s.condition and s.stratum in (ALL_STRATA, st)]
        failed = sorted({p for p, _ in mine})
        triages: dict[str, list[Triage | None]] = {}
        for p, ts in mine:
            triages.setdefault(p, []).extend(ts)
        triage = {p: t for p, ts in triages.items() if (t := worst(ts)) is not None}
        # greedy runs compare outputs with the baseline; sampled runs only have their `expect` checks
        compared = s.n_compared or s.n_expect_checked
        passed = compared if not failed else (s.n_equal if s.n_compared else compared - s.n_expect_failed)
        rows.append(
            StratumRow(
                condition=s.condition,
                stratum=s.stratum,
                concurrency=s.concurrency or conc,
                draft_n_max=s.draft_n_max,
                status=s.status,
                n_requests=s.n_requests,
                n_repetitions=s.n_requests // len(ids) if ids else 0,  # requests per prompt
                median_total_ms=s.total_ms.p50,
                p95_total_ms=s.total_ms.p95,
                median_ttft_ms=s.ttft_ms.p50,
                median_tpot_ms=s.tpot_ms.p50,
                p50_itl_ms=s.itl_ms.p50,
                p95_itl_ms=s.itl_ms.p95,
                median_server_tpot_ms=s.server_tpot_ms.p50,
                tpot_below_server=s.n_tpot_flagged,
                acceptance=s.acceptance,
                speedup=s.speedup,
                speedup_ci95=s.speedup_ci95,
                difference=s.difference,
                speedup_note=s.speedup_note,
                n_paired=s.n_paired,
                decision=s.decision,
                decision_ci=s.decision_ci,
                decision_min_speedup=s.decision_min_speedup,
                decision_more_rounds=s.decision_more_rounds,
                decision_budget=s.decision_budget,
                drafted=s.drafted,
                accepted=s.accepted,
                expected_accepted_length=s.expected_accepted_length,
                predicted_speedup=s.predicted_speedup,
                tune=s.tune,
                unexplained=s.unexplained,
                unexplained_reason=s.unexplained_reason,
                speedup_p5=percentile(spread, 5),
                speedup_p95=percentile(spread, 95),
                errors=s.n_errors,
                timeouts=s.n_timeouts,
                equivalent=0 if is_base else passed,
                compared=0 if is_base else compared,
                compared_text_only=0 if is_base else s.n_text_only,
                first_mismatch=None if is_base or not s.first_mismatch else _mismatch(s),
                failed_prompts=[] if is_base else failed,
                triage={} if is_base else triage,
                prompts=ids,
                temperature=s.temperature,
                draft_sampling=s.draft_sampling,
                expect_checked=s.n_expect_checked,
                expect_failed=s.n_expect_failed,
                base_expect_checked=s.n_base_expect_checked,
                base_expect_failed=s.n_base_expect_failed,
                expect_diff=s.expect_diff,
                expect_diff_ci95=s.expect_diff_ci95,
                dist_p=s.dist_p,
                dist_n=s.dist_n,
                dist_note=s.dist_note,
            )
        )
    total_vram = None
    if man and man.hardware.gpu.present:
        sizes = [d.memory_total_bytes for d in man.hardware.gpu.devices if d.memory_total_bytes]
        total_vram = to_mib(sum(sizes)) if sizes else None
    return RunDigest(
        run_id=info.run_id,
        status=info.status,
        created_at=info.started_at,
        runtime=runtime_identity(man),
        hardware=hardware_identity(man),
        total_ram_mib=to_mib(man.hardware.ram_bytes) if man else None,
        total_vram_mib=total_vram,
        target_sha256=info.target_sha256,
        workload=man.request.workload if man else None,
        repetitions=man.observation.repeat if man else 0,
        until_decided=bool(man and man.settings and man.settings.budget_s is not None),
        conditions=[_condition(c, bases.get(arms[c.idx]), levels[c.idx]) for c in conditions],
        strata=rows,
        set_aside=contention.run_notes(summaries),
    )


def _ratios(rows: Iterable[RequestTiming], conditions: list[ConditionRun], default_conc: int) -> Ratios:
    """Per-request speed-ups: the baseline's total ms (same prompt, repetition, concurrency) / this one's."""
    rows = list(rows)
    level = {c.spec.name: (_concurrency_of(c, default_conc), arm(c.spec)[1]) for c in conditions}
    baselines = {c.spec.name for c in conditions if c.spec.method == BASELINE}
    base = {(level.get(c), p, rep): ms for c, _, p, rep, ok, ms in rows if c in baselines and ok and ms}
    out: Ratios = defaultdict(list)
    for c, stratum, p, rep, ok, ms in rows:
        b = base.get((level.get(c), p, rep))
        if c not in baselines and ok and ms and b:
            out[(c, stratum)].append(b / ms)
            out[(c, ALL_STRATA)].append(b / ms)
    return out


def _changed(matches: bool | None, expect_ok: bool | None) -> bool:
    """Output differs from the baseline (or `expect` failed) and nothing passed instead."""
    return not (matches is True or expect_ok is True) and (matches is False or expect_ok is False)


def digest_run(run: BenchRun) -> RunDigest:
    """Digest of a fully loaded run (`specreg runs show --report`), spread included."""
    prompts: dict[str, list[str]] = defaultdict(list)
    for p in run.prompts:
        prompts[p.stratum].append(p.id)
    failing: Failing = {}
    for r in run.requests:
        if _changed(r.matches_baseline, r.expect_ok):
            triage = r.triage if r.matches_baseline is False else None
            failing.setdefault((r.condition, r.stratum, r.prompt_id), []).append(triage)
    conc = run.manifest.request.concurrency if run.manifest else 1
    timings = ((r.condition, r.stratum, r.prompt_id, r.repeat, r.ok, r.timed_ms) for r in run.requests)
    ratios = _ratios(timings, run.conditions, conc)
    return build_digest(RunHead(run.info, run.manifest), run.conditions, run.summaries, prompts, failing, ratios)


def load_digest(reg: Registry, head: RunHead, *, spread: bool = True) -> RunDigest:
    """Digest one run from the bench tables; request rows are read only when needed. A run whose
    stored records cannot be read raises RunUnreadable naming it and the first bad field."""
    rid = head.info.run_id
    found = load_digests(reg, [head], spread=spread)
    if rid in found:
        return found[rid]
    try:
        build_digests(reg, [head], spread=spread, skip_unreadable=False)
    except ValueError as exc:
        raise RunUnreadable(f"run {rid}: a stored record cannot be read ({first_error(exc)})") from None
    raise RunUnreadable(f"run {rid}: its stored records cannot be read")


def load_digests(reg: Registry, heads: Iterable[RunHead], *, spread: bool = True) -> dict[str, RunDigest]:
    """Digests of many runs (run id -> digest): the kept ones read back, the rest built from the
    bench tables (each read once for all of them) and kept for next time where the registry can
    be written (see digest_cache)."""
    heads = list(heads)
    out = digest_cache.get(reg.conn, (h.info.run_id for h in heads), spread=spread)
    built = build_digests(reg, [h for h in heads if h.info.run_id not in out], spread=spread)
    if built and not reg.read_only:
        try:
            with reg.keeping() as conn:
                digest_cache.put(conn, built.values(), spread=spread)
        except SpecregError:  # locked, full or read-only: the digests are right anyway, just not kept
            pass
    out.update(built)
    return {h.info.run_id: out[h.info.run_id] for h in heads if h.info.run_id in out}


def build_digests(
    reg: Registry, heads: Iterable[RunHead], *, spread: bool = True, skip_unreadable: bool = True
) -> dict[str, RunDigest]:
    """Digests built from the bench tables, read once for all of these runs (no cache). A run
    whose stored records cannot be read is left out (`skip_unreadable`), the others still built:
    one damaged run is that run's failure (`load_digest` names it), not every pair's."""
    heads = list(heads)
    try:
        parts = load_parts(reg, (h.info.run_id for h in heads), timings=spread)
    except ValueError:
        if not skip_unreadable or len(heads) == 1:
            if skip_unreadable:
                return {}
            raise
        out: dict[str, RunDigest] = {}
        for head in heads:  # one at a time: the damaged run alone is left out
            out.update(build_digests(reg, [head], spread=spread))
        return out
    out = {}
    for head in heads:
        p = parts[head.info.run_id]
        try:
            ratios = None
            if p.timings is not None:
                conc = head.manifest.request.concurrency if head.manifest else 1
                ratios = _ratios(p.timings, p.conditions, conc)
            out[head.info.run_id] = build_digest(head, p.conditions, p.summaries, p.prompts, p.failing, ratios)
        except ValueError:
            if not skip_unreadable:
                raise
    return out


def keep_digests(reg: Registry, run_ids: Iterable[str]) -> int:
    """Build and keep the digests of runs just written (an import, a finished run), inside the
    caller's write transaction; a digest that cannot be built is left to the audit, which then
    reports the damage. Returns how many were kept."""
    try:
        with reg.write() as conn:  # a savepoint of the caller's transaction
            return digest_cache.put(
                conn, build_digests(reg, heads_of(reg, run_ids), spread=False).values(), spread=False
            )
    except (ValueError, SpecregError):  # ValidationError of a damaged stored part, or a failed write
        return 0


def _mismatch(s: ConditionSummary) -> str:
    return f"{s.first_mismatch}: {s.mismatch_context}" if s.mismatch_context else str(s.first_mismatch)
