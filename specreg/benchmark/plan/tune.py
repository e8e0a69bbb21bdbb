"""`bench admitted --tune`: the draft length a draft method should run at, predicted, then measured.

A user should not guess `--spec-draft-n-max`: too short leaves accepted tokens undrafted, too
long pays the draft model and the wider verify step for tokens that are rejected. The run
already measures what decides it, so tuning is three steps in one run:

1. **First pass.** One round at a generous draft length K (`--draft-max`, default
   `FIRST_PASS_LENGTH` = 16) beside the baseline and the other methods.
2. **Predict** the speed-up of every k in 1..32 from that pass, with stepcost.py's step prices:
   the acceptance profile S(j), the share of drafting steps whose j-th drafted token was accepted
   (the server's per-position counters for the whole condition; per stratum, where only the
   requests' own totals exist, the geometric curve S(j) = alpha^j of the stratum's acceptance),
   the share f of target steps that drafted, the draft model's decode cost r fitted on the pass,
   and the verify cost v(k): the target's machine probe's (its batch of k+1 tokens over its
   decode, measured on this machine, build and flags before the first pass; the runner hands
   it over), else its lower bound max(1, (k+1) t_p / t_d). Per target step, k yields
   T(k) = 1 + f * sum_{j<=k} S(j) tokens and costs (1 - f) + f v(k) + (f k + 1) r baseline
   decodes, so the prediction is T(k) / cost(k); at k = K it is stepcost's own prediction for
   the pass. Past K the curve goes on at the ratio of its second half (S(K) / S(K/2))^(1/(K-K/2)).
3. **Measure** the predicted best k* and its neighbours on a doubling ladder (k*/2, k*, 2 k*,
   clipped to 1..32: always three lengths), in the `--budget` rounds. The budget goes to the
   **leader** first, the predicted best, until it is decided against `--min-speedup`
   (decision/bar.py). The tuned length is a decided one (`Tuner.standing`): the best decided
   `faster`, else the best decided `not faster`; a length that looks faster on fewer rounds is
   no choice until it is decided itself (one round can make an undecided length look best).
   Once a length is decided, the others are measured only while
   one could still beat it - a **contender**: measured above it (or, when it is `not faster`,
   at or above `--min-speedup`) and not decided, or not measured yet and predicted, `SLACK`
   higher, to do so - and the budget goes to deciding the best contender before the other
   methods. A contender that stays undecided when the budget ends is named, never chosen. With
   no contender the tuning is decided and stops spending: a budget is a ceiling. A length's
   first round pairs with a round its baseline already ran (the runner's `reuse`), so it costs
   one server start, not two. The audit then chooses among the measured conditions as always,
   so `deploy` prints the measured `--spec-draft-n-max`, never a guess.

Why the server is started once per length: llama.cpp (this build, b11549) takes the draft
length only from its command line; its request fields `speculative.n_max` / `n_min` are compiled
out (`#if 0` in tools/server/server-schema.cpp: "we disable speculative parameter adjustments
for now"), so a request cannot change it.

The prediction is the decode phase's (as stepcost's): the measured speed-up is end to end, so
with long prompts it sits below. Ranking the candidates needs only the shape, which the prompt
phase (the same for every k) does not change.

Not tuned: `--spec-draft-p-min`. Predicting its effect needs the draft's per-token confidence,
which neither `/metrics` nor the response timings report, so a p-min could only be guessed.

One module, though long: the tuning is one state (`Tuner`: the first pass, each level's
prediction, its candidates and leader) that the runner and the scheduler ask questions of; the
curve it predicts from is tune_curve.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specreg.benchmark.plan.conditions import condition_name
from specreg.benchmark.plan.tune_curve import LENGTHS, Profile, ProfileSource, curve
from specreg.benchmark.store import statistics, stepcost
from specreg.benchmark.store.condition_summary import _paired, speed_decision
from specreg.errors import UsageError
from specreg.registry.db import now
from specreg.schemas.bench import ALL_STRATA, ConditionRun, ConditionSpec, ConditionSummary, SpecCounters, TuneEstimate
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.methods import BASELINE, MODEL_DRAFTED
from specreg.schemas.request_row import RequestRow

if TYPE_CHECKING:
    from specreg.benchmark.run.context import RunContext

FIRST_PASS_LENGTH = 16  # generous: SmolLM2 on repetitive text still gains from 8 to 16 (issue 24)
REUSE = 1.25  # a ladder length this close to the first pass's is measured at the first pass's
MARGIN = 1.05  # a candidate is ruled out when it is decided at most this much faster than the leader
SLACK = 1.2  # a length not measured yet may beat the choice when its prediction, this much higher, does
# (the end-to-end predictions were seen 20-35% off on tiny models and SmolLM2: tests/benchmark/plan/test_tune.py)
SKIPPED = "not measured: the --budget left could not decide it"  # a contender: the run is incomplete
RULED_OUT = "not measured: --tune ruled it out (it could not beat the decided length)"


def survival_from_counters(counters: SpecCounters, length: int) -> tuple[float, ...]:
    """S(j) from the per-position counters (positions counted from the first one the server
    names), bounded by the draft length the pass ran at, never by the server's labels."""
    if not counters.steps or not counters.per_position:
        return ()
    first = min(counters.per_position)
    return tuple(
        min(1.0, counters.per_position.get(first + j, 0) / counters.steps) for j in range(max(0, min(length, 64)))
    )


def fit_profile(
    rows: list[RequestRow],
    base_rows: list[RequestRow],
    length: int,
    counters: SpecCounters | None,
    verify: tuple[float, ...] = (),
) -> Profile | None:
    """The profile of one group (the whole condition when `counters` is given, else a stratum);
    None when nothing can be priced (no baseline decode time, nothing drafted). `verify`: v(k)
    for k = 1.. from the target's machine probe (the draft's r is then fitted against it)."""
    t_d, t_p = stepcost.decode_ms_per_token(base_rows), stepcost.prompt_ms_per_token(base_rows)
    k_mean = counters.drafted / counters.steps if counters is not None and counters.steps else float(length)
    c = stepcost.counts(rows, k_mean)
    d = c.drafting_steps
    if not t_d or not c.target_steps or not c.drafted or d is None:
        return None
    v_pass = _at(verify, k_mean)
    r = stepcost.fitted_draft_cost(rows, base_rows, k_mean, v_pass)
    surv = survival_from_counters(counters, length) if counters is not None else ()
    source: ProfileSource = "per-position"
    if not any(surv):
        alpha = statistics.alpha_from_rate(c.accepted / c.drafted, k_mean)
        surv, source = tuple(alpha**j for j in LENGTHS), "geometric"
    base = {(r.prompt_id, r.repeat): r for r in base_rows if r.ok and r.timed_ms and r.predicted_ms is not None}
    pairs = [(base[k], r) for r in rows if r.ok and r.timed_ms and (k := (r.prompt_id, r.repeat)) in base]
    return Profile(
        surv,
        source,
        min(1.0, d / c.target_steps),
        t_d,
        t_p,
        r or 0.0,
        base_total_ms=sum(b.timed_ms or 0.0 for b, _ in pairs),
        base_decode_ms=sum(b.predicted_ms or 0.0 for b, _ in pairs),
        other_ms=sum(max(0.0, (m.timed_ms or 0.0) - (m.predicted_ms or 0.0)) for _, m in pairs),
        verify=verify,
    )


def _at(verify: tuple[float, ...], k: float) -> float | None:
    """v at a mean draft length between two whole ones (linear); None without a probe's table."""
    if not verify or k <= 0:
        return None
    lo = min(len(verify), max(1, math.floor(k)))
    hi = min(len(verify), lo + 1)
    return verify[lo - 1] + (verify[hi - 1] - verify[lo - 1]) * min(1.0, max(0.0, k - lo))


def ladder(best: int) -> list[int]:
    """The predicted best and its neighbours on a doubling ladder, three lengths within 1..32."""
    lo, hi = LENGTHS[0], LENGTHS[-1]
    if best <= 2:
        return [1, 2, 4]
    if best >= hi:
        return [hi // 4, hi // 2, hi]
    return sorted({max(lo, round(best / 2)), best, min(hi, best * 2)})


def reuse_first_pass(lengths: list[int], first: int, within: float = REUSE) -> list[int]:
    """The ladder with the member nearest the first pass's length replaced by that length, when
    it is within a factor `within` of it: the first pass's round then counts as a round of that
    candidate instead of being measured again (nothing measured is thrown away)."""
    if first in lengths:
        return lengths
    near = min(lengths, key=lambda k: abs(math.log(k / first)) if k > 0 and first > 0 else math.inf)
    if near > 0 and first > 0 and max(near / first, first / near) <= within:
        return sorted({first if k == near else k for k in lengths})
    return lengths


def first_pass_lengths(opts: BenchSettings) -> list[int]:
    return [opts.draft_n_max[0]] if opts.draft_n_max else [FIRST_PASS_LENGTH]


def name_lengths(specs: list[ConditionSpec], levels: int) -> list[ConditionSpec]:
    """The first pass named as a sweep (`draft-simple k16`), as its candidates will be."""
    return [
        s.model_copy(
            update={"name": condition_name(s.method, s.draft_n_max, s.concurrency, by_length=True, by_level=levels > 1)}
        )
        if s.method in MODEL_DRAFTED
        else s
        for s in specs
    ]


def first_pass(specs: list[ConditionSpec]) -> list[ConditionSpec]:
    """What the first pass runs: the baselines and the draft method at its first-pass length.
    The other methods (n-gram) join the decision rounds, so they do not lengthen the pass the
    candidates wait for."""
    return [s for s in specs if s.method == BASELINE or s.method in MODEL_DRAFTED]


def check_tunable(plans: list[tuple[int, list[ConditionSpec]]]) -> None:
    """Refuse `--tune` before any server starts when no pair has a draft length to tune (an
    n-gram pair among draft pairs is measured as usual)."""
    if not any(s.method in MODEL_DRAFTED for _, specs in plans for s in specs):
        methods = ", ".join(sorted(m.value for m in MODEL_DRAFTED))
        pairs = ", ".join(str(pid) for pid, _ in plans)
        raise UsageError(
            f"--tune tunes --spec-draft-n-max, which no condition of pair {pairs} uses",
            hint=f"tune a pair whose method is one of: {methods}",
        )


@dataclass
class _Level:
    """One concurrency level's tuning: its first pass, predictions and candidates."""

    first: ConditionRun
    predictions: dict[str, Profile]  # stratum -> its profile
    candidates: list[ConditionRun]
    best: int = 0  # the predicted best length
    lead: ConditionRun | None = None  # its candidate (the first pass's, when that is near): decided first

    def predicted(self, k: int) -> float | None:
        """The end-to-end prediction for length k (the whole workload's profile)."""
        prof = self.predictions.get(ALL_STRATA)
        return prof.predict_end_to_end(k) if prof is not None else None


class Tuner:
    """The tuning of one run: predicts after the first pass, adds the candidates, picks the
    length the `--budget` rounds decide next (`standing`), and writes what it predicted and
    what it chose into the summaries."""

    def __init__(self, opts: BenchSettings) -> None:
        self.opts = opts
        self.levels: dict[int, _Level] = {}
        self.deferred: list[ConditionRun] = []  # left out of the first pass (first_pass)
        self.ruled_out: set[int] = set()  # candidates `close` found no longer worth measuring
        # level -> seconds into the run at which its tuning was first seen settled (the runner's
        # mark after a round): the time to the tuned choice, before its strata's rounds
        self.settled_s: dict[int, float] = {}
        # v(k), k = 1..32, from the target's machine probe, handed over before the first pass
        # (benchmark/run/machine_probe.py: tune_verify); empty: v from the run's own prompt time
        self.verify: tuple[float, ...] = ()

    def _rows(self, rows: list[RequestRow], c: ConditionRun) -> list[RequestRow]:
        return [r for r in rows if r.condition_idx == c.idx]

    def add_candidates(self, ctx: RunContext, conds: list[ConditionRun], rows: list[RequestRow]) -> list[str]:
        """Predict from each first pass and append its candidates to `conds` (running, so the
        decision rounds take them), stored; returns one line per level for the user. `rows`: the
        rows kept (not set aside as contended): a prediction rests on nothing else."""
        for c in conds:  # the methods the first pass left out: measured from the next round on
            if c.status == "pending":
                c.status, c.started_at = "running", now()
                self.deferred.append(c)
                ctx.store.save_condition(ctx.run_id, c)
        bases = {c.spec.concurrency: c for c in conds if c.spec.method == BASELINE}
        notes = []
        levels = len({c.spec.concurrency for c in conds})
        for first in [c for c in conds if c.spec.method in MODEL_DRAFTED and c.spec.draft_n_max]:
            base = bases.get(first.spec.concurrency)
            k0 = first.spec.draft_n_max or FIRST_PASS_LENGTH
            if base is None or base.status != "running" or first.status != "running":
                notes.append(f"{first.spec.name}: no first pass to predict from ({first.failure or 'baseline failed'})")
                continue
            predictions = self._predict(first, base, rows)
            whole_curve = curve(predictions[ALL_STRATA]) if ALL_STRATA in predictions else {}
            if not whole_curve:
                notes.append(f"{first.spec.name}: nothing drafted in the first pass, so nothing to predict from")
                continue
            best = max(whole_curve, key=lambda k: (round(whole_curve[k], 6), -k))
            cands = []
            for k in reuse_first_pass(ladder(best), k0):
                if k == k0:
                    cands.append(first)
                    continue
                name = condition_name(first.spec.method, k, first.spec.concurrency, by_length=True, by_level=levels > 1)
                spec = first.spec.model_copy(update={"name": name, "draft_n_max": k})
                c = ConditionRun(idx=len(conds), spec=spec, status="running", started_at=now())
                conds.append(c)
                cands.append(c)
                ctx.store.save_condition(ctx.run_id, c)
            lead = min(cands, key=lambda c: abs(math.log((c.spec.draft_n_max or 1) / best)))
            self.levels[first.spec.concurrency] = _Level(first, predictions, cands, best, lead)
            e2e = curve(predictions[ALL_STRATA], end_to_end=True)
            shown = ", ".join(f"k{c.spec.draft_n_max} {e2e.get(c.spec.draft_n_max or 0, math.nan):.2f}x" for c in cands)
            priced = "the target's machine probe" if self.verify else "this run's prompt time (no machine probe)"
            notes.append(
                f"{first.spec.name}: predicted best --spec-draft-n-max {best} ({whole_curve[best]:.2f}x decode, "
                f"verify steps priced by {priced}); candidates {shown} (end to end); k{lead.spec.draft_n_max} "
                "is decided first, the others measured only while one could beat the decided length"
            )
        return notes

    def _predict(self, first: ConditionRun, base: ConditionRun, rows: list[RequestRow]) -> dict[str, Profile]:
        """Each stratum's profile (and the whole workload's) from a first pass's rows."""
        mine, theirs = self._rows(rows, first), self._rows(rows, base)
        k0 = first.spec.draft_n_max or FIRST_PASS_LENGTH
        predictions: dict[str, Profile] = {}
        for stratum in [ALL_STRATA, *dict.fromkeys(r.stratum for r in mine)]:
            whole = stratum == ALL_STRATA
            g = mine if whole else [r for r in mine if r.stratum == stratum]
            bg = theirs if whole else [r for r in theirs if r.stratum == stratum]
            prof = fit_profile(g, bg, k0, first.counters if whole else None, self.verify)
            if prof is not None:
                predictions[stratum] = prof
        return predictions

    def restore(self, conds: list[ConditionRun], rows: list[RequestRow], first_pass_rounds: int) -> bool:
        """The tuning of a stored run whose candidates were added (a `bench continue`): each
        level's prediction drawn again from its first pass's rows (repetitions below
        `first_pass_rounds`; the counters are the first pass condition's over all its slots, the
        same acceptance measured longer), its candidates the stored lengths its ladder names.
        False when no level had candidates yet (the first pass is still to be predicted from)."""
        bases = {c.spec.concurrency: c for c in conds if c.spec.method == BASELINE}
        drafted = [c for c in conds if c.spec.method in MODEL_DRAFTED and c.spec.draft_n_max]
        first_rows = [r for r in rows if r.repeat < first_pass_rounds]
        for conc in dict.fromkeys(c.spec.concurrency for c in drafted):
            level = [c for c in drafted if c.spec.concurrency == conc]
            first, base = level[0], bases.get(conc)
            if base is None or len(level) < 2:
                continue
            predictions = self._predict(first, base, first_rows)
            whole_curve = curve(predictions[ALL_STRATA]) if ALL_STRATA in predictions else {}
            if not whole_curve:
                continue
            best = max(whole_curve, key=lambda k: (round(whole_curve[k], 6), -k))
            k0 = first.spec.draft_n_max or FIRST_PASS_LENGTH
            lengths = reuse_first_pass(ladder(best), k0)
            cands = [c for c in level if c.spec.draft_n_max in lengths]
            if not cands:
                continue
            lead = min(cands, key=lambda c: abs(math.log((c.spec.draft_n_max or 1) / best)))
            self.levels[conc] = _Level(first, predictions, cands, best, lead)
        if self.levels:
            self.deferred = [c for c in conds if c.spec.method != BASELINE and c.spec.method not in MODEL_DRAFTED]
        return bool(self.levels)

    def level_of(self, conds: list[ConditionRun]) -> dict[int, int]:
        """Condition idx -> its tuning level (concurrency), for the candidates of every level."""
        return {c.idx: conc for conc, lv in self.levels.items() for c in lv.candidates}

    def _base(self, conds: list[ConditionRun], conc: int) -> ConditionRun | None:
        return next((c for c in conds if c.spec.method == BASELINE and c.spec.concurrency == conc), None)

    def standing(self, conc: int, conds: list[ConditionRun], rows: list[RequestRow]) -> Standing:
        """Where the tuning of one level stands on `rows` (see the module docstring, step 3)."""
        lv, base = self.levels[conc], self._base(conds, conc)
        return standing(lv, self._rows(rows, base) if base is not None else [], rows, self.opts.min_speedup)

    def leaders(self, conds: list[ConditionRun], rows: list[RequestRow]) -> dict[int, ConditionRun]:
        """Each level's length to decide next: before any is decided, the predicted best (the
        leader); then the best contender; with none, the choice itself (decided: nothing to run)."""
        out = {}
        for conc in self.levels:
            st = self.standing(conc, conds, rows)
            nxt = st.next
            if nxt is not None:
                out[conc] = nxt
        return out

    def _tuned(self) -> set[int]:
        return {c.idx for lv in self.levels.values() for c in [lv.first, *lv.candidates]}

    def settled(self, conc: int, conds: list[ConditionRun], rows: list[RequestRow]) -> bool:
        """The tuning of this level is decided: its choice is, and no contender is left to run."""
        return self.standing(conc, conds, rows).settled

    def select(
        self, conds: list[ConditionRun], undecided: list[ConditionRun], rows: list[RequestRow]
    ) -> list[ConditionRun]:
        """The conditions of the next decision round: the undecided ones outside the tuning, and
        each unsettled level's length to decide next (its leader, then its best contender)."""
        tuned = self._tuned()
        out = [c for c in undecided if c.idx not in tuned]
        for conc in self.levels:
            st = self.standing(conc, conds, rows)
            if not st.settled and st.next is not None and st.next.status == "running":
                out.append(st.next)
        return out

    def close(
        self, ctx: RunContext, conds: list[ConditionRun] | None = None, rows: list[RequestRow] | None = None
    ) -> None:
        """A candidate (or a method left out of the first pass) the budget never reached is
        skipped with why, not judged on no rows. With the run's conditions and kept rows, a
        length the settled tuning no longer counts as a contender is ruled out rather than
        skipped: nothing was left undone, so it does not make the run incomplete."""
        done: set[int] = set()  # the candidates of levels whose choice is decided, less their contenders
        if conds is not None and rows is not None:
            for conc, lv in self.levels.items():
                st = self.standing(conc, conds, rows)
                if st.decided:
                    done |= {c.idx for c in lv.candidates} - {c.idx for c in st.contenders}
        for c in [*self.deferred, *(c for lv in self.levels.values() for c in lv.candidates)]:
            if c.status == "running" and not self._rows(ctx.rows, c):
                out = c.idx in done and c not in self.deferred
                c.status, c.failure, c.finished_at = "skipped", RULED_OUT if out else SKIPPED, now()
                if out:
                    self.ruled_out.add(c.idx)
                ctx.store.save_condition(ctx.run_id, c)

    def annotate(self, summaries: list[ConditionSummary], conds: list[ConditionRun], rows: list[RequestRow]) -> None:
        """Each first pass's and candidate's summary gets its prediction (`tune`), per stratum."""
        by_name = {c.spec.name: c for c in conds}
        for conc, lv in self.levels.items():
            base = next((c for c in conds if c.spec.method == BASELINE and c.spec.concurrency == conc), None)
            # the first pass is a measured length too (its rounds are kept), so it may be the best
            base_rows = self._rows(rows, base) if base is not None else []
            st = standing(lv, base_rows, rows, self.opts.min_speedup, decisions=_decisions(summaries, conc))
            chosen = st.choice
            members = {c.idx for c in [lv.first, *lv.candidates]}
            for s in summaries:
                c = by_name.get(s.condition)
                if c is None or c.idx not in members or c.spec.draft_n_max is None:
                    continue
                prof = lv.predictions.get(s.stratum)
                if prof is None:
                    continue
                k = c.spec.draft_n_max
                predicted = curve(prof, end_to_end=True)
                s.tune = TuneEstimate(
                    draft_max=k,
                    predicted_speedup=predicted.get(k),
                    predicted_decode_speedup=prof.predict(k),
                    role="candidate" if c in lv.candidates else "first pass",
                    profile=prof.source,
                    first_pass=lv.first.spec.name,
                    curve=dict(predicted) if c is lv.first else {},  # the first pass may be a candidate too
                    chosen=c is chosen,
                    decided=st.settled,
                    why=st.why if c is chosen and s.stratum == ALL_STRATA else None,
                    settled_s=self.settled_s.get(conc) if c is chosen and s.stratum == ALL_STRATA else None,
                )


@dataclass(frozen=True)
class _Length:
    """One measured length of a tuning: its condition, decision and point speed-up."""

    cond: ConditionRun
    decision: str
    speedup: float
    rounds: int

    @property
    def k(self) -> int:
        return self.cond.spec.draft_n_max or 0


@dataclass(frozen=True)
class Standing:
    """A level's tuning on the rows so far: its choice (a decided length; None while none is),
    what could still beat it, and why, in words."""

    choice: ConditionRun | None  # undecided (`decided` False): the leader as measured, for the record
    decided: bool  # the choice is decided
    contenders: list[ConditionRun]  # best first; the choice is not one
    lead: ConditionRun | None  # the predicted best, decided first
    why: str

    @property
    def settled(self) -> bool:
        return self.decided and not self.contenders

    @property
    def next(self) -> ConditionRun | None:
        """The length to decide next: the leader until a length is decided, then the best contender."""
        if not self.decided:
            return self.lead
        return self.contenders[0] if self.contenders else self.choice


def _decisions(summaries: list[ConditionSummary], conc: int) -> dict[str, str]:
    """Each condition's decision as its summary states it (the whole workload's row)."""
    return {
        s.condition: s.decision
        for s in summaries
        if s.stratum == ALL_STRATA and (s.concurrency or 1) == conc and s.decision is not None
    }


def _rounds_text(n: int) -> str:
    return f"{n} round" + ("s" if n != 1 else "")


def standing(
    lv: _Level,
    base_rows: list[RequestRow],
    rows: list[RequestRow],
    min_speedup: float,
    decisions: dict[str, str] | None = None,
) -> Standing:
    """The tuned choice and its contenders (module docstring, step 3). A decided length comes
    before any undecided one, `faster` before `not faster`, the higher speed-up within a class;
    an undecided length is a contender while it could beat the choice: measured above it (above
    `--min-speedup` when the choice is `not faster`), or not measured and predicted so with
    `SLACK`; one decided at most `MARGIN` faster than the choice is ruled out. `decisions`: the
    summaries' own (at the end of a run, so that the choice is what the tables show)."""
    members = list({c.idx: c for c in [lv.first, *lv.candidates]}.values())
    alive = [c for c in members if c.status in ("running", "ok", "skipped")]
    measured: dict[int, _Length] = {}
    for c in alive:
        mine = [r for r in rows if r.condition_idx == c.idx]
        b, m = _paired(base_rows, mine)
        point = statistics.paired_speedup(b, m)
        if point is None:
            continue
        d = (decisions or {}).get(c.spec.name) or speed_decision(base_rows, mine, min_speedup).decision
        measured[c.idx] = _Length(c, d, point, len({r.repeat for r in mine}))
    lead = lv.lead if lv.lead is not None and any(c is lv.lead for c in alive) else None
    decided = [x for x in measured.values() if x.decision in ("faster", "not faster")]
    if not decided:
        if lead is None:  # the predicted best failed or was never added: the best measured goes first
            lead = best_measured([c for c in alive if c.status == "running"], base_rows, rows)
        shown = ", ".join(f"k{x.k} {x.speedup:.2f}x on {_rounds_text(x.rounds)}" for x in measured.values())
        pick = lead if lead is not None and lead.idx in measured else None
        pick = pick or best_measured([x.cond for x in measured.values()], base_rows, rows)
        return Standing(pick, False, [], lead, f"no length is decided ({shown or 'none measured'})")
    best = max(decided, key=lambda x: (x.decision == "faster", x.speedup, -x.k))
    faster = best.decision == "faster"
    pred0 = lv.predicted(best.k)
    scored: list[tuple[float, ConditionRun]] = []
    beaten: list[str] = []
    if lead is not None and lead is not best.cond and lead.idx not in measured:
        scored.append((math.inf, lead))  # the predicted best is measured whatever was decided before it
        beaten.append(f"k{lead.spec.draft_n_max}, the predicted best, is not measured")
    for c in alive:
        if c is best.cond or any(c is x for _, x in scored):
            continue
        x = measured.get(c.idx)
        if x is not None:
            if x.decision != "undecided":
                continue  # weighed in the choice already
            ahead = x.speedup > best.speedup if faster else x.speedup >= min_speedup
            out = speed_decision(
                [r for r in rows if r.condition_idx == best.cond.idx], [r for r in rows if r.condition_idx == c.idx],
                MARGIN,
            ).decision == "not faster"  # fmt: skip
            if ahead and not out:
                scored.append((x.speedup, c))
                beaten.append(f"k{x.k} {x.speedup:.2f}x on {_rounds_text(x.rounds)} is undecided")
            continue
        pk = lv.predicted(c.spec.draft_n_max or 0)
        if pk is None or not pred0:
            continue
        could = best.speedup * pk / pred0 * SLACK  # its prediction, calibrated on the choice's measurement
        if (could > best.speedup if faster else could >= min_speedup) and c.status != "ok":
            scored.append((could, c))
            beaten.append(f"k{c.spec.draft_n_max} predicted up to {could:.2f}x is not measured")
    scored.sort(key=lambda t: -t[0])
    verdict = f"k{best.k} is decided {best.decision} ({best.speedup:.2f}x on {_rounds_text(best.rounds)})"
    if beaten:
        why = f"{verdict}; may be faster, but not decided, so not chosen: {'; '.join(beaten)}"
    elif faster:
        why = f"{verdict}, and no other length measured or predicted can beat it"
    else:
        why = (
            f"{verdict}, and no other length is measured or predicted to reach {min_speedup:g}x: "
            f"{best.cond.spec.method} is not faster at any length tried"
        )
    return Standing(best.cond, True, [c for _, c in scored], lead, why)


def best_measured(
    cands: list[ConditionRun], base_rows: list[RequestRow], rows: list[RequestRow]
) -> ConditionRun | None:
    """The candidate with the highest measured speed-up over the baseline (median paired ratio);
    on a tie the shorter draft."""
    scored = []
    for c in cands:
        b, m = _paired(base_rows, [r for r in rows if r.condition_idx == c.idx])
        s = statistics.paired_speedup(b, m)
        if s is not None:
            scored.append((s, -(c.spec.draft_n_max or 0), c.idx, c))
    return max(scored, key=lambda t: t[:3])[3] if scored else None
