"""Per condition x stratum summaries and output equivalence against the baseline.

Decisions use medians and p95 over repetitions (PROTOCOL §5). Speed-up is the median of
baseline / condition total time over the requests both ran (same prompt, repetition and
concurrency; >1 faster), with its bootstrap interval and the acceptance check (`statistics`). A condition
that did not run to the end (failed, cancelled, ...) has no speed-up at all, only the reason.
Acceptance for a whole condition comes from the `/metrics` deltas; per stratum from the
requests' own `timings` (a request without draft counts drafted nothing: llama.cpp leaves them
out at 0), so E[L], tokens per step and the predicted speed-up are each stratum's own; acceptance
is None when nothing was drafted, never 0. Rounds that ran under contention (a busy machine:
`contention.set_aside`) are counted but left out of every timing: medians, the speed-up, its
interval, the decision and the step costs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from specreg.benchmark.store import contention, statistics, stepcost
from specreg.benchmark.store.sampling import arm, sampled_checks
from specreg.decision import bar
from specreg.schemas.bench import ALL_STRATA, ConditionRun, ConditionSummary, Stat
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.methods import BASELINE, MODEL_DRAFTED
from specreg.schemas.request_row import RequestRow
from specreg.text import plural


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


CONTEXT = 3  # tokens (or 12 characters) shown either side of the first difference


@dataclass(frozen=True)
class Comparison:
    """One row's output against the baseline's: equal ids and equal text when both rows hold
    every id (`RequestRow.ids_complete`), else equal text alone (`unit` "char")."""

    equal: bool
    unit: str  # "token": ids and text compared; "char": text only
    first_token: int | None = None
    first_char: int | None = None
    context: str | None = None

    @property
    def first(self) -> int | None:
        """The first difference in `unit`."""
        return self.first_token if self.unit == "token" else self.first_char


def _first_diff(a: Sequence[object], b: Sequence[object]) -> int | None:
    if a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _around(xs: Sequence[object], i: int, width: int, sep: str) -> str:
    """xs[i - width : i + width + 1] with xs[i] in brackets (`[]` past the end)."""
    head = sep.join(map(str, xs[max(0, i - width) : i]))
    here = f"[{xs[i]}]" if i < len(xs) else "[]"
    tail = sep.join(map(str, xs[i + 1 : i + 1 + width]))
    dots = ("…" if i - width > 0 else "", "…" if i + 1 + width < len(xs) else "")
    return f"{dots[0]}{head}{sep if head else ''}{here}{sep if tail else ''}{tail}{dots[1]}"


def _chars(text: str, i: int) -> str:
    import json

    w = CONTEXT * 4
    piece = text[max(0, i - w) : i + w + 1]
    j = i - max(0, i - w)
    # JSON escapes make control characters and held-back bytes (U+FFFD) visible, one line
    inner = json.dumps(piece[:j], ensure_ascii=False)[1:-1]
    here = json.dumps(piece[j : j + 1], ensure_ascii=False)[1:-1]
    rest = json.dumps(piece[j + 1 :], ensure_ascii=False)[1:-1]
    return f'"{inner}[{here}]{rest}"'


def compare_outputs(base: RequestRow, row: RequestRow) -> Comparison:
    """Equal means equal text, and equal ids when both rows hold every id. The first difference
    is given in tokens (ids compared) and characters, with a few of each either side."""
    ta, tb = base.output_text or "", row.output_text or ""
    first_char = _first_diff(ta, tb)
    by_ids = base.ids_complete and row.ids_complete
    first_token = _first_diff(base.output_ids or [], row.output_ids or []) if by_ids else None
    if first_char is None and first_token is None:
        return Comparison(True, "token" if by_ids else "char")
    parts = []
    if first_token is not None:
        a, b = base.output_ids or [], row.output_ids or []
        parts.append(
            f"token {first_token}: {_around(a, first_token, CONTEXT, ' ')} vs {_around(b, first_token, CONTEXT, ' ')}"
        )
    if first_char is not None:
        parts.append(f"char {first_char}: {_chars(ta, first_char)} vs {_chars(tb, first_char)}")
    unit = "token" if by_ids else "char"
    return Comparison(False, unit, first_token if by_ids else None, first_char, "; ".join(parts))


def mismatch_at(row: RequestRow) -> str:
    """Where a row first differs: "token 7, char 12"; "char 12 (text only)" when ids were not compared."""
    if row.diff_unit == "token":
        at = f"token {row.first_diff}" if row.first_diff is not None else "tokens equal"
        return at + (f", char {row.first_diff_char}" if row.first_diff_char is not None else "")
    char = row.first_diff_char if row.first_diff_char is not None else row.first_diff
    return f"char {char} (text only)"


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


@dataclass(frozen=True)
class StatSettings:
    """How intervals are drawn: the run's seed and the number of bootstrap resamples."""

    seed: int = 42
    resamples: int = 2000
    default_draft_length: int | None = None  # the build's --spec-draft-n-max
    min_speedup: float = 1.05  # what `decision` decides against (the default policy's minimum)
    set_aside: bool = True  # leave contended rounds out of timings (`--busy-share 0`: keep them)
    # what decides (decision/bar.py); "slice" / "grid": the sequence runs were decided with before
    # it (and before its running slice), what an import draws their decisions with (exchange/rederive.py)
    method: bar.Method = bar.METHOD


def stat_settings(settings: BenchSettings, spec_defaults: Mapping[str, int]) -> StatSettings:
    """How a run's summaries are drawn, from its settings and its build's defaults: what the
    runner used, and what an import recomputes a bundled run's summaries with."""
    return StatSettings(
        seed=settings.seed,
        min_speedup=settings.min_speedup,
        set_aside=settings.busy_share > 0,
        resamples=settings.bootstrap_resamples,
        default_draft_length=spec_defaults.get("--spec-draft-n-max"),
    )


def _group(
    cond: ConditionRun, stratum: str, rows: list[RequestRow], reports_drafts: bool, timed: list[RequestRow]
) -> ConditionSummary:
    """Counts and equivalence over every row; timings over `timed` (the rows not set aside)."""
    ok = [r for r in rows if r.ok]
    ok_timed = [r for r in timed if r.ok]
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
        temperature=spec.temperature,
        top_p=spec.top_p,
        top_k=spec.top_k,
        min_p=spec.min_p,
        draft_sampling=spec.draft_sampling,
    )
    s.n_requests, s.n_ok = len(rows), len(ok)
    s.n_errors = sum(1 for r in rows if not r.ok and not r.timed_out)
    s.n_timeouts = sum(1 for r in rows if r.timed_out)
    # a client TPOT below the server's own per-token time (past the clocks' tolerance) is no
    # decode speed: counted, not shown
    flagged = [r for r in ok_timed if r.tpot_below_server]
    s.total_ms, s.ttft_ms, s.tpot_ms = (
        stat(r.total_ms for r in ok_timed),
        stat(r.ttft_ms for r in ok_timed),
        stat(r.tpot_ms for r in ok_timed if not r.tpot_below_server),
    )
    s.itl_ms = stat(x for r in ok_timed for x in r.itl_ms)
    s.server_tpot_ms = stat(r.server_tpot_ms for r in ok_timed)
    s.n_tpot_flagged = len(flagged)
    s.n_set_aside = len(rows) - len(timed)
    s.output_tokens = sum(r.output_tokens or 0 for r in ok)
    timed_tokens = sum(r.output_tokens or 0 for r in ok_timed)
    decode_s = sum((r.predicted_ms or 0.0) for r in ok_timed if r.output_tokens) / 1000.0
    s.decode_tps = timed_tokens / decode_s if decode_s > 0 else None
    if cond.spec.method != BASELINE:
        if reports_drafts:  # this server reports per-request draft counts, leaving them out at 0
            s.drafted = sum(r.draft_n or 0 for r in ok)
            s.accepted = sum(r.draft_n_accepted or 0 for r in ok)
            s.acceptance = _ratio(s.accepted, s.drafted)
        compared = [r for r in rows if r.matches_baseline is not None]
        s.n_compared = len(compared)
        s.n_equal = sum(1 for r in compared if r.matches_baseline)
        s.n_text_only = sum(1 for r in compared if r.diff_unit == "char")
        bad = next((r for r in compared if not r.matches_baseline), None)
        if bad is not None:
            s.first_mismatch = f"{bad.prompt_id}#{bad.repeat} @ {mismatch_at(bad)}"
            s.mismatch_context = bad.diff_context
            s.mismatch_triage = bad.triage
        differ = [r for r in compared if not r.matches_baseline]
        s.n_near_ties = sum(1 for r in differ if r.triage is not None and r.triage.kind() == "near tie")
        s.n_divergences = len(differ) - s.n_near_ties
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
    bases = {arm(c.spec): c for c in reversed(conditions) if c.spec.method == BASELINE}
    aside = contention.set_aside(conditions, rows, spread=stats.set_aside)
    out: list[ConditionSummary] = []
    for cond in conditions:
        base = bases.get(arm(cond.spec))
        partner = base if base is not None and base is not cond else None
        mine = by_cond.get(cond.idx, [])
        kept = contention.kept_rows(mine, aside, partner.idx if partner else None)
        theirs = contention.kept_rows(by_cond.get(base.idx, []) if base else [], aside, cond.idx)
        why = contention.reasons(cond, partner, aside)
        step = _StepInputs.of(cond, kept, theirs, stats)
        groups = [(ALL_STRATA, mine, kept, theirs)] + [
            (st, [r for r in mine if r.stratum == st], [r for r in kept if r.stratum == st],
             [r for r in theirs if r.stratum == st])
            for st in strata
        ]  # fmt: skip
        for stratum, group, timed, base_group in groups:
            s = _group(cond, stratum, group, step.reports_drafts, timed)
            if stratum == ALL_STRATA:
                _whole_condition(s, cond, base)
                s.set_aside = why
            _speed(s, cond, base, timed, base_group, stats)
            if s.speedup is not None and cond is not base:
                _consistency(s, cond, timed, base_group, step)
            if cond.status == "ok" and base is not None and base.status == "ok":
                sampled_checks(s, timed, base_group, seed=stats.seed, label=f"{s.condition}|{stratum}")
            out.append(s)
    return out


@dataclass(frozen=True)
class _StepInputs:
    """What a condition's groups share for the acceptance check: whether its server reports
    per-request draft counts, its mean draft length k, and its draft model's measured cost r."""

    reports_drafts: bool
    draft_length: float | None
    model_drafted: bool
    draft_cost: float | None

    @classmethod
    def of(
        cls, cond: ConditionRun, rows: list[RequestRow], base_rows: list[RequestRow], stats: StatSettings
    ) -> _StepInputs:
        counters = cond.counters
        k = None
        if counters is not None and counters.steps:
            k = counters.drafted / counters.steps
        elif cond.spec.draft_n_max is not None:
            k = float(cond.spec.draft_n_max)
        elif stats.default_draft_length is not None:
            k = float(stats.default_draft_length)
        reports = any(r.draft_n is not None for r in rows if r.ok)
        model = cond.spec.method in MODEL_DRAFTED  # r, a draft decode's cost, is measured
        r = stepcost.fitted_draft_cost(rows, base_rows, k) if model and reports else None
        return cls(reports, k, model, r)


def _paired(base_rows: list[RequestRow], rows: list[RequestRow]) -> tuple[list[float], list[float]]:
    """Times (`RequestRow.timed_ms`: the server's own) of the units both ran successfully:
    (prompt, repetition), in a stable order."""
    base = {(r.prompt_id, r.repeat): t for r in base_rows if r.ok and (t := r.timed_ms) is not None}
    mine = {(r.prompt_id, r.repeat): t for r in rows if r.ok and (t := r.timed_ms) is not None}
    keys = sorted(base.keys() & mine.keys())
    return [float(base[k] or 0.0) for k in keys], [float(mine[k] or 0.0) for k in keys]


def _speed(
    s: ConditionSummary,
    cond: ConditionRun,
    base: ConditionRun | None,
    rows: list[RequestRow],
    base_rows: list[RequestRow],
    stats: StatSettings,
) -> None:
    """Speed-up and its interval; a condition that did not finish gets none, only the reason. Its
    decision is never left empty: `undecided` with the reason unless measured pairs decide it."""
    if cond is not base:
        s.decision, s.decision_min_speedup = "undecided", stats.min_speedup
        s.decision_method = "bar" if stats.method == "bar" else None
    if cond.status != "ok":
        s.speedup_note = f"condition {cond.status}: {cond.failure or 'no reason recorded'}"
        return
    if base is None:
        at = "" if cond.spec.sampler.greedy else f" and {cond.spec.sampler.label}"
        s.speedup_note = f"no baseline at concurrency {cond.spec.concurrency}{at}"
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
        busy = "every round ran under contention and was set aside"
        s.speedup_note = busy if s.n_set_aside else "no request pair measured in both conditions"
        return
    label = f"{s.condition}|{s.stratum}|{cond.spec.concurrency}"
    s.speedup_ci95 = statistics.bootstrap_ci(base_ms, cond_ms, seed=stats.seed, label=label, resamples=stats.resamples)
    s.difference = statistics.difference(s.speedup_ci95)
    if s.speedup_ci95 is None:
        s.speedup_note = f"no interval from {plural(s.n_paired, 'request pair')}"
    d = speed_decision(base_rows, rows, stats.min_speedup, stats.method)
    s.decision, s.decision_ci, s.decision_min_speedup = d.decision, d.interval, stats.min_speedup


def paired_ms(base_rows: list[RequestRow], rows: list[RequestRow]) -> tuple[list[float], list[float]]:
    """The units both ran, in the order they were measured (round by round: the sequence a look
    after every round sees grow, as the anytime-valid method requires)."""
    base = {(r.repeat, r.prompt_id): t for r in base_rows if r.ok and (t := r.timed_ms)}
    mine = {(r.repeat, r.prompt_id): t for r in rows if r.ok and (t := r.timed_ms)}
    keys = sorted(base.keys() & mine.keys())
    return [float(base[k] or 0) for k in keys], [float(mine[k] or 0) for k in keys]


def stratum_ms(
    rows: list[RequestRow], aside: dict[contention.Slot, str], base: int, idx: int, stratum: str
) -> tuple[list[float], list[float]]:
    """A condition's kept pairs with its baseline in one stratum (`all`: every stratum)."""

    def mine(i: int, partner: int) -> list[RequestRow]:
        return contention.kept_rows(
            [r for r in rows if r.condition_idx == i and stratum in (ALL_STRATA, r.stratum)], aside, partner
        )

    return paired_ms(mine(base, idx), mine(idx, base))


def stratum_pool(
    rows: list[RequestRow], aside: dict[contention.Slot, str], base: int, idx: int, stratum: str
) -> list[float]:
    """What the other strata tell a stratum's projection: their kept log ratios, each stratum's
    taken from its own mean and put at this stratum's (their spread within a stratum, this one's
    centre). A stratum of a prompt or two has too few pairs of its own to draw a spread from
    (three pairs resampled read "needs about 2 more" where thirty were needed, issue 52); its
    decision still rests on its own pairs alone."""
    own = bar.log_ratios(*stratum_ms(rows, aside, base, idx, stratum))
    if stratum == ALL_STRATA or not own:
        return []
    centre = sum(own) / len(own)
    pool: list[float] = []
    for other in sorted({r.stratum for r in rows if r.condition_idx == idx} - {stratum}):
        xs = bar.log_ratios(*stratum_ms(rows, aside, base, idx, other))
        if len(xs) > 1:
            mean = sum(xs) / len(xs)
            pool += [x - mean + centre for x in xs]
    return pool


def speed_decision(
    base_rows: list[RequestRow], rows: list[RequestRow], min_speedup: float, method: bar.Method = bar.METHOD
) -> bar.SpeedDecision:
    """The anytime-valid decision on the units both ran (`paired_ms`)."""
    return bar.decide(*paired_ms(base_rows, rows), min_speedup, method)


def _consistency(
    s: ConditionSummary, cond: ConditionRun, rows: list[RequestRow], base_rows: list[RequestRow], step: _StepInputs
) -> None:
    """E[L], tokens per target step and the predicted speed-up of this group's own requests, and
    whether acceptance explains the measured interval (`stepcost`, `statistics.consistency`)."""
    k, counters = step.draft_length, cond.counters
    whole = s.stratum == ALL_STRATA
    counts: stepcost.Counts | None = None
    if step.reports_drafts:
        counts = stepcost.counts(rows, k)
    elif whole and counters is not None:  # no per-request counts: the whole condition's counters
        n = stepcost.counts(rows, k).tokens
        counts = stepcost.Counts(tokens=n, accepted=counters.accepted, drafted=counters.drafted, draft_length=k)
    p: stepcost.Prediction | None = None
    if counts is not None:
        t_d, t_p = stepcost.decode_ms_per_token(base_rows), stepcost.prompt_ms_per_token(base_rows)
        v = stepcost.verify_cost(k, t_d, t_p) if k and t_d and t_p is not None else None
        p = stepcost.predict(counts, v, step.draft_cost, step.model_drafted)
    c = statistics.consistency(
        drafted=counts.drafted if counts else None,
        accepted=counts.accepted if counts else None,
        draft_length=k,
        per_position=counters.per_position if whole and counters else None,
        steps=counters.steps if whole and counters else None,
        tokens_per_step=p.tokens_per_step if p else None,
        step_cost=p.step_cost if p else None,
        ci=s.speedup_ci95,
    )
    s.alpha, s.draft_length, s.expected_accepted_length = c.alpha, c.draft_length, c.expected_accepted_length
    s.accepted_length_source, s.tokens_per_step = c.source, c.tokens_per_step
    s.verify_cost, s.draft_cost = (p.verify_cost, p.draft_cost) if p else (None, None)
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
