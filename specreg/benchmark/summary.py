"""Per condition x stratum summaries and output equivalence against the baseline.

Decisions use medians and p95 over repetitions (PROTOCOL §5). Speed-up is the median of
baseline / condition total time over the requests both ran (same prompt, repetition and
concurrency; >1 faster), with its bootstrap interval and the acceptance check (`statistics`). A condition
that did not run to the end (failed, cancelled, ...) has no speed-up at all, only the reason.
Acceptance for a whole condition comes from the `/metrics` deltas; per stratum from the
requests' own `timings` — None when nothing was drafted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from specreg.benchmark import statistics
from specreg.schemas.bench import (
    ALL_STRATA,
    BASELINE,
    ConditionRun,
    ConditionSummary,
    RequestRow,
    Stat,
)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stat(values: Iterable[float | None]) -> Stat:
    xs = [v for v in values if v is not None]
    return Stat(p50=percentile(xs, 50), p95=percentile(xs, 95))


def compare_outputs(base: RequestRow, row: RequestRow) -> tuple[bool, int | None, str]:
    """(equal, first differing position, unit): token ids when both have them, else characters."""
    if base.output_ids is not None and row.output_ids is not None:
        a: list[int] | str = base.output_ids
        b: list[int] | str = row.output_ids
        unit = "token"
    else:
        a, b, unit = base.output_text or "", row.output_text or "", "char"
    if a == b:
        return True, None, unit
    n = min(len(a), len(b))
    first = next((i for i in range(n) if a[i] != b[i]), n)
    return False, first, unit


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


@dataclass(frozen=True)
class StatSettings:
    """How intervals are drawn: the run's seed and the number of bootstrap resamples."""

    seed: int = 42
    resamples: int = 2000
    default_draft_length: int | None = None  # the build's --spec-draft-n-max


def _group(cond: ConditionRun, stratum: str, rows: list[RequestRow]) -> ConditionSummary:
    ok = [r for r in rows if r.ok]
    spec = cond.spec
    s = ConditionSummary(
        condition=spec.name,
        method=spec.method,
        stratum=stratum,
        status=cond.status,
        concurrency=spec.concurrency,
        draft_n_max=spec.draft_n_max,
        draft_n_min=spec.draft_n_min,
        params=dict(spec.params),
    )
    s.n_requests, s.n_ok = len(rows), len(ok)
    s.n_errors = sum(1 for r in rows if not r.ok and not r.timed_out)
    s.n_timeouts = sum(1 for r in rows if r.timed_out)
    s.total_ms, s.ttft_ms, s.tpot_ms = (
        stat(r.total_ms for r in ok),
        stat(r.ttft_ms for r in ok),
        stat(r.tpot_ms for r in ok),
    )
    s.output_tokens = sum(r.output_tokens or 0 for r in ok)
    decode_s = sum((r.predicted_ms or 0.0) for r in ok if r.output_tokens) / 1000.0
    s.decode_tps = s.output_tokens / decode_s if decode_s > 0 else None
    if cond.spec.method != BASELINE:
        drafted = [r.draft_n for r in ok if r.draft_n is not None]
        if drafted:
            s.drafted = sum(drafted)
            s.accepted = sum(r.draft_n_accepted or 0 for r in ok)
            s.acceptance = _ratio(s.accepted, s.drafted)
        compared = [r for r in rows if r.matches_baseline is not None]
        s.n_compared = len(compared)
        s.n_equal = sum(1 for r in compared if r.matches_baseline)
        bad = next((r for r in compared if not r.matches_baseline), None)
        if bad is not None:
            s.first_mismatch = f"{bad.prompt_id}#{bad.repeat} @ {bad.diff_unit} {bad.first_diff}"
    checked = [r for r in rows if r.expect_ok is not None]
    s.n_expect_checked, s.n_expect_failed = len(checked), sum(1 for r in checked if not r.expect_ok)
    return s


def summarize(
    conditions: list[ConditionRun], rows: list[RequestRow], stats: StatSettings | None = None
) -> list[ConditionSummary]:
    """One summary per condition for `all`, then one per stratum, in run order."""
    stats = stats or StatSettings()
    strata = list(dict.fromkeys(r.stratum for r in rows))
    by_cond: dict[int, list[RequestRow]] = {}
    for r in rows:
        by_cond.setdefault(r.condition_idx, []).append(r)
    bases = {c.spec.concurrency: c for c in reversed(conditions) if c.spec.method == BASELINE}
    out: list[ConditionSummary] = []
    for cond in conditions:
        base = bases.get(cond.spec.concurrency)
        mine = by_cond.get(cond.idx, [])
        theirs = by_cond.get(base.idx, []) if base is not None else []
        groups = [(ALL_STRATA, mine, theirs)] + [
            (st, [r for r in mine if r.stratum == st], [r for r in theirs if r.stratum == st]) for st in strata
        ]
        for stratum, group, base_group in groups:
            s = _group(cond, stratum, group)
            if stratum == ALL_STRATA:
                _whole_condition(s, cond, base)
            _speed(s, cond, base, group, base_group, stats)
            out.append(s)
    return out


def _paired(base_rows: list[RequestRow], rows: list[RequestRow]) -> tuple[list[float], list[float]]:
    """Total ms of the units both ran successfully: (prompt, repetition), in a stable order."""
    base = {(r.prompt_id, r.repeat): r.total_ms for r in base_rows if r.ok and r.total_ms is not None}
    mine = {(r.prompt_id, r.repeat): r.total_ms for r in rows if r.ok and r.total_ms is not None}
    keys = sorted(base.keys() & mine.keys())
    return [float(base[k] or 0.0) for k in keys], [float(mine[k] or 0.0) for k in keys]


def _per_token_ms(rows: list[RequestRow], accepted: bool) -> float | None:
    """Median decode ms per verification step (accepted=True) or per generated token (baseline)."""
    values = []
    for r in rows:
        if r.ok and r.predicted_ms and r.output_tokens:
            steps = r.output_tokens - ((r.draft_n_accepted or 0) if accepted else 0)
            values.append(r.predicted_ms / max(1, steps))
    return percentile(values, 50)


def _speed(
    s: ConditionSummary,
    cond: ConditionRun,
    base: ConditionRun | None,
    rows: list[RequestRow],
    base_rows: list[RequestRow],
    stats: StatSettings,
) -> None:
    """Speed-up, its interval and the acceptance check; a condition that did not finish gets none."""
    if cond.status != "ok":
        s.speedup_note = f"condition {cond.status}: {cond.failure or 'no reason recorded'}"
        return
    if base is None:
        s.speedup_note = f"no baseline at concurrency {cond.spec.concurrency}"
        return
    if base.status != "ok":
        s.speedup_note = f"baseline {base.status}: {base.failure or 'no reason recorded'}"
        return
    if cond is base:
        s.speedup, s.speedup_note = 1.0, "reference"
        return
    base_ms, cond_ms = _paired(base_rows, rows)
    s.n_paired = len(base_ms)
    s.speedup = statistics.paired_speedup(base_ms, cond_ms)
    if s.speedup is None:
        s.speedup_note = "no request pair measured in both conditions"
        return
    label = f"{s.condition}|{s.stratum}|{cond.spec.concurrency}"
    s.speedup_ci95 = statistics.bootstrap_ci(base_ms, cond_ms, seed=stats.seed, label=label, resamples=stats.resamples)
    s.difference = statistics.difference(s.speedup_ci95)
    if s.speedup_ci95 is None:
        s.speedup_note = f"no interval from {s.n_paired} request pair(s)"
    counters = cond.counters
    k = None
    if counters is not None and counters.steps:
        k = counters.drafted / counters.steps
    elif cond.spec.draft_n_max is not None:
        k = float(cond.spec.draft_n_max)
    elif stats.default_draft_length is not None:
        k = float(stats.default_draft_length)
    step, token = _per_token_ms(rows, True), _per_token_ms(base_rows, False)
    whole = s.stratum == ALL_STRATA and counters is not None
    c = statistics.consistency(
        drafted=s.drafted,
        accepted=s.accepted,
        draft_length=k,
        per_position=counters.per_position if whole and counters else None,
        steps=counters.steps if whole and counters else None,
        step_cost=step / token if step is not None and token else None,
        ci=s.speedup_ci95,
    )
    s.alpha, s.draft_length, s.expected_accepted_length = c.alpha, c.draft_length, c.expected_accepted_length
    s.accepted_length_source = c.source
    s.step_cost, s.predicted_speedup = c.step_cost, c.predicted_speedup
    s.unexplained, s.unexplained_reason = c.unexplained, c.reason


def _whole_condition(s: ConditionSummary, cond: ConditionRun, base: ConditionRun | None) -> None:
    """Counters (authoritative acceptance) and memory, which exist per condition, not per stratum."""
    if cond.counters is not None and cond.spec.method != BASELINE:
        s.drafted, s.accepted = cond.counters.drafted, cond.counters.accepted
        s.acceptance = cond.counters.acceptance
        s.mean_accepted_per_step = cond.counters.mean_accepted_per_step
    mem = cond.memory
    bmem = base.memory if base is not None else None
    if mem is not None:
        s.peak_rss_bytes = mem.peak_rss_bytes
        s.peak_vram_bytes = mem.gpu.peak_vram_bytes if mem.gpu.present else None
        if bmem is not None and cond is not base:
            if mem.peak_rss_bytes is not None and bmem.peak_rss_bytes is not None:
                s.rss_overhead_bytes = mem.peak_rss_bytes - bmem.peak_rss_bytes
            if s.peak_vram_bytes is not None and bmem.gpu.peak_vram_bytes is not None:
                s.vram_overhead_bytes = s.peak_vram_bytes - bmem.gpu.peak_vram_bytes
