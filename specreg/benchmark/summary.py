"""Per condition x stratum summaries and output equivalence against the baseline.

Decisions use medians and p95 over repetitions (PROTOCOL §5). Speed-up is baseline median /
condition median total time (>1 faster). Acceptance for a whole condition comes from the
`/metrics` deltas; per stratum from the requests' own `timings` — None when nothing was drafted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

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


def _group(cond: ConditionRun, stratum: str, rows: list[RequestRow]) -> ConditionSummary:
    ok = [r for r in rows if r.ok]
    s = ConditionSummary(condition=cond.spec.name, method=cond.spec.method, stratum=stratum, status=cond.status)
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


def summarize(conditions: list[ConditionRun], rows: list[RequestRow]) -> list[ConditionSummary]:
    """One summary per condition for `all`, then one per stratum, in run order."""
    strata = list(dict.fromkeys(r.stratum for r in rows))
    by_cond: dict[int, list[RequestRow]] = {}
    for r in rows:
        by_cond.setdefault(r.condition_idx, []).append(r)
    base = next((c for c in conditions if c.spec.method == BASELINE), None)
    out: list[ConditionSummary] = []
    base_stats: dict[str, ConditionSummary] = {}
    for cond in conditions:
        mine = by_cond.get(cond.idx, [])
        groups = [(ALL_STRATA, mine)] + [(st, [r for r in mine if r.stratum == st]) for st in strata]
        for stratum, group in groups:
            s = _group(cond, stratum, group)
            if stratum == ALL_STRATA:
                _whole_condition(s, cond, base)
            if cond is base:
                base_stats[stratum] = s
            ref = base_stats.get(stratum)
            if ref is not None:
                s.speedup = _ratio(ref.total_ms.p50, s.total_ms.p50)
            out.append(s)
    return out


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
