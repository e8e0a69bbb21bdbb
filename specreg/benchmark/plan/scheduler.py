"""The `--budget` scheduler: after the planned rounds, which conditions to measure next and how
much, until each is decided or the budget is spent.

A run measured until decided (`bench --budget`) asks this module, round after round, what to
run; the runner runs it and asks again. Each round the scheduler reads what was measured (the
rows, and what each condition's slots cost), sets contended rounds aside, finds the conditions
still undecided, projects each forward (`decision.budget.need`: how many more paired requests,
what they cost, told to the user), and picks those the budget left can still decide; what it
cannot is given up with the budget that would decide it. With `--tune` the budget goes first to
the tuned length (the leader) and its baseline, then to the other candidates and methods, then
to the chosen length's strata still undecided. A round that does not fit in what is left is
measured in part (the same first prompts of each of its conditions, one of each stratum in
turn), so a run ends about one paired request past its budget rather than a round early.

It is its own module so that the budget can be made a wall-clock cap and a stored run can be
continued: everything it plans from is handed in each round (`Measured`: the rows and the
slots' seconds, both stored with a run), and the clock is a parameter. Between rounds it keeps
only the next repetition number (one past the highest measured), the seeded order its rounds
turn, and which conditions and strata it already gave up on and said so. When the run ends,
projection.py writes what would decide each condition left undecided into its summaries, from
the same projection (`decision.budget.need`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from specreg.benchmark.plan import conditions as cond_mod
from specreg.benchmark.store import contention
from specreg.benchmark.store.condition_summary import paired_ms, stratum_ms, stratum_pool
from specreg.benchmark.store.sampling import arm
from specreg.decision import bar
from specreg.decision import budget as budget_mod
from specreg.schemas.bench import ConditionRun, SlotPhase
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.methods import BASELINE
from specreg.schemas.request_row import RequestRow
from specreg.text import rounds_named

if TYPE_CHECKING:
    from specreg.benchmark.plan.tune import Tuner
    from specreg.schemas.sampling import Sampler

PART_MARGIN = 1.1  # what a round measured in part is priced at, over its estimate
# the most rounds one server start measures while deciding the leader (its plan's rounds, at most
# this many): a slot's start, warm-up and stop are paid once for them all
MAX_BATCH = 3


class Measured(Protocol):
    """What a run has measured so far, as the scheduler reads it (the runner's `RunContext`)."""

    rows: list[RequestRow]
    slot_s: dict[int, list[float]]  # condition idx -> each slot's wall seconds
    replay_s: dict[int, list[float]]  # ... and the part its id replays took

    def expired(self) -> bool: ...


@dataclass(frozen=True)
class Round:
    """One step of the plan: the slots to run, in order, and what each measures."""

    todo: list[ConditionRun]  # in the order their slots run (a condition no longer running is passed over)
    reps: dict[int, list[int]]  # condition idx -> the repetitions its slot measures
    phases: dict[int, SlotPhase]  # condition idx -> why its slot runs (recorded with the slot)
    strata: frozenset[str] | None  # only these strata's prompts (None: every stratum)
    prompts: int | None  # only the first this many prompts (`execute.partial_order`; None: all)
    fresh: list[int]  # the new repetitions the round opens
    paired: frozenset[int]  # conditions measured in their baseline's rounds, not in `fresh`


def request_seconds(rows: Sequence[RequestRow]) -> dict[int, list[float]]:
    """Each condition's requests' client wall seconds (what a slot spends on them)."""
    out: dict[int, list[float]] = {}
    for r in rows:
        if r.total_ms:
            out.setdefault(r.condition_idx, []).append(r.total_ms / 1000)
    return out


class BudgetScheduler:
    """Plans a `--budget` run's rounds after its `planned` ones, against a budget counted from
    `started` on `clock`; tells the user each plan and each condition it gives up (`note`).
    `strata`: the workload's, one per prompt (what a round measures)."""

    def __init__(
        self,
        opts: BenchSettings,
        strata: Sequence[str],
        conds: list[ConditionRun],
        *,
        planned: int,
        started: float,
        tuner: Tuner | None = None,
        note: Callable[[str], None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.opts, self.strata, self.conds, self.tuner, self.note, self.clock = opts, strata, conds, tuner, note, clock
        self.planned, self.started = planned, started
        self.budget = opts.budget_s or 0.0
        self.bases = {arm(c.spec): c for c in conds if c.spec.method == BASELINE}
        self.order = list(conds)
        self.rng = random.Random(opts.seed)
        self.rng.shuffle(self.order)  # the seeded order the balanced rounds turn
        self.round_no = planned
        self.given_up: dict[int, str] = {}  # condition idx -> why it is not measured further
        self.told_strata: set[tuple[int, str]] = set()  # (condition idx, stratum) the budget cannot decide, told
        self.needs: dict[int, budget_mod.Need] = {}  # condition idx -> its last projection (`_plan_budget`)
        thin = budget_mod.thin_strata_text(strata)
        if thin:
            note(thin)

    def next_round(self, measured: Measured) -> Round | None:
        """The next round to run, or None when the run is done measuring (every condition
        decided or given up, the budget spent, or the run's deadline passed); says why."""
        o, conds, bases = self.opts, self.conds, self.bases
        budget = self.budget

        def rows(c: ConditionRun) -> list[RequestRow]:
            return [r for r in measured.rows if r.condition_idx == c.idx]

        aside = contention.set_aside(conds, measured.rows, spread=o.busy_share > 0)
        kept = contention.kept_rows(measured.rows, aside)

        def pair_ms(c: ConditionRun, aside: dict[contention.Slot, str] = aside) -> tuple[list[float], list[float]]:
            base = bases[arm(c.spec)]
            return paired_ms(
                contention.kept_rows(rows(base), aside, c.idx), contention.kept_rows(rows(c), aside, base.idx)
            )

        def open_(c: ConditionRun) -> bool:
            base = bases.get(arm(c.spec))
            return (
                c.spec.method != BASELINE
                and c.status == "running"
                and base is not None
                and base.status == "running"
                and bar.verdict(*pair_ms(c), o.min_speedup) == "undecided"
            )

        undecided = [c for c in conds if open_(c)]
        leads: list[ConditionRun] = []
        if self.tuner is not None:  # --tune: its candidates run until the best is decided
            undecided = self.tuner.select(conds, undecided, kept)
            leads = [c for c in self.tuner.leaders(conds, kept).values() if open_(c)]
        spent = self.clock() - self.started
        left = budget - spent
        given_up = self.given_up
        undecided = [
            c
            for c in undecided
            if c.idx not in given_up or len({r.repeat for r in measured.rows if r.condition_idx == c.idx}) < o.repeat
        ]
        # the leaders first; the rest once no leader is left to decide (or none can be)
        picked = self._plan_budget(measured, conds, [c for c in leads if c.idx not in given_up], bases, pair_ms,
                                   spent, left, given_up, lead=True)  # fmt: skip
        if not picked:  # a level whose leader cannot be decided stands with it: not measured further
            dropped = self.tuner.level_of(conds) if self.tuner is not None else {}
            if self.tuner is not None:  # the first pass leads its level until a candidate is measured
                dropped |= {lv.first.idx: k for k, lv in self.tuner.levels.items()}
            out_levels = {dropped[c.idx] for c in leads if c.idx in given_up}
            rest = [c for c in undecided if dropped.get(c.idx) not in out_levels]
            picked = self._plan_budget(measured, conds, rest, bases, pair_ms, spent, left, given_up)
        if self.tuner is not None:  # the time to the tuned choice: before any strata rounds
            for conc in self.tuner.levels:
                if conc not in self.tuner.settled_s and self.tuner.settled(conc, conds, kept):
                    self.tuner.settled_s[conc] = spent
        strata: frozenset[str] | None = None
        if not picked and self.tuner is not None and not measured.expired():
            picked, strata = self._strata_plan(measured, conds, aside, bases, pair_ms, spent, left, self.told_strata)
        free = free_rounds(picked, bases, measured.rows, kept)
        deciding = bool(picked) and all(c in leads for c in picked)
        # deciding the leader (or a contender), its plan's rounds go in one server start each;
        # a contender not measured yet is screened first: one round, which often rules it out
        planned_rounds = [self.needs[c.idx].rounds or 1 for c in picked if c.idx in self.needs]
        lead_idx = {lv.lead.idx for lv in self.tuner.levels.values() if lv.lead} if self.tuner else set()
        unseen = any(c.idx not in lead_idx and not rows(c) for c in picked)
        batch = max(1, min([MAX_BATCH, *planned_rounds])) if deciding and planned_rounds and not unseen else 1
        todo_set = {id(c): c for c in [bases[arm(c.spec)] for c in picked if c.idx not in free] + picked}
        todo = [c for c in self.order if id(c) in todo_set]
        round_no = self.round_no
        fresh = list(range(round_no, round_no + batch))
        reps = {c.idx: free[c.idx][:batch] if c.idx in free else fresh for c in todo}
        leaders = lead_idx
        tuned = self.tuner.level_of(conds) | {lv.first.idx: k for k, lv in self.tuner.levels.items()} if (
            self.tuner is not None
        ) else {}  # fmt: skip
        if o.balance:
            todo = cond_mod.balanced_order(todo, round_no - self.planned)
        else:
            self.rng.shuffle(todo)
        known = budget_mod.costs(measured.slot_s, request_seconds(measured.rows), measured.replay_s)
        first = self._first_pass_of()
        cost = budget_mod.Cost(0.0, 0.0)
        for c in todo:
            cost = cost + budget_mod.cost_of(known, c.idx, first.get(c.idx))
        n_now = sum(1 for st in self.strata if strata is None or st in strata)
        round_s = cost.seconds(n_now, n_now)
        while batch > 1 and spent + cost.seconds(n_now * batch, n_now * batch) > budget:
            batch -= 1  # the budget has no room for them all in one start: fewer rounds
            fresh = fresh[:batch]
            reps = {i: r[:batch] for i, r in reps.items()}
        # a part-round is priced dearer: under load its servers' starts vary most, and a
        # one-prompt round late in the budget once ended well past it
        part = n_now if spent + round_s <= budget else cost.fits(left / PART_MARGIN, n_now)
        if not picked or not part or measured.expired():
            if picked and not measured.expired():
                self.note(
                    f"budget: {budget_mod.minutes(max(left, 0.0))} left, a round of "
                    f"{', '.join(c.spec.name for c in picked)} takes about {budget_mod.minutes(round_s)}: "
                    f"stopped; `bench continue` with --budget {budget_mod.budget_for(0.0, round_s)} would run it"
                )
            return None
        if part < n_now:
            self.note(
                f"budget: {budget_mod.minutes(max(left, 0.0))} left, a round takes about "
                f"{budget_mod.minutes(round_s)}: measuring {part} of its {n_now} prompts"
            )
        phases: dict[int, SlotPhase] = {
            c.idx: "strata" if strata is not None else _phase(c, picked, leaders, set(tuned)) for c in todo
        }
        return Round(
            todo=todo,
            reps=reps,
            phases=phases,
            strata=strata,
            prompts=None if part >= n_now else part,
            fresh=fresh,
            paired=frozenset(free),
        )

    def round_done(self, rnd: Round) -> None:
        """Say what the round measured and how much of the budget is spent; the next round's
        repetitions follow this one's."""
        took = budget_mod.minutes(self.clock() - self.started)
        names = ", ".join(
            c.spec.name
            + (f" (paired with its baseline's {rounds_named(rnd.reps[c.idx])})" if c.idx in rnd.paired else "")
            for c in rnd.todo
        )
        new_round = any(c.idx not in rnd.paired for c in rnd.todo)
        what = rounds_named(rnd.fresh) if new_round else "rounds its baseline ran"
        what += f" of {', '.join(sorted(rnd.strata))}" if rnd.strata is not None else ""
        self.note(f"{what} done: {names}; {took} of the {budget_mod.minutes(self.budget)} budget")
        self.round_no += len(rnd.fresh) if new_round else 0

    def _plan_budget(
        self,
        measured: Measured,
        conds: list[ConditionRun],
        undecided: list[ConditionRun],
        bases: dict[tuple[int, Sampler], ConditionRun],
        pair_ms: Callable[[ConditionRun], tuple[list[float], list[float]]],
        spent: float,
        left: float,
        given_up: dict[int, str],
        *,
        lead: bool = False,
    ) -> list[ConditionRun]:
        """The undecided conditions the budget left can still decide (budget.py), each told with
        its projection; those it cannot are given up with the budget that would decide them. A
        condition with no kept pair yet has nothing to project: it runs - except a `--tune`
        leader, projected from its first pass re-centred on its prediction. With --tune, a
        level's candidates are planned by their leader (the best measured): they stand or fall
        with it. `lead`: these are the leaders, planned at the cost of them and their baselines."""
        o = self.opts
        prompts = len(self.strata)
        tuned = self.tuner.level_of(conds) if self.tuner is not None else {}
        leaders = self.tuner.leaders(conds, measured.rows) if self.tuner is not None else {}
        known = budget_mod.costs(measured.slot_s, request_seconds(measured.rows), measured.replay_s)
        first_of = self._first_pass_of()
        out: list[ConditionRun] = []
        verdicts: dict[int, budget_mod.Need] = {}
        told: set[int] = set()

        def rounds_of(c: ConditionRun) -> int:
            return len({r.repeat for r in measured.rows if r.condition_idx == c.idx})

        for c in undecided:
            lv = tuned.get(c.idx)
            who = leaders.get(lv, c) if lv is not None else c
            if who.idx in verdicts:
                n = verdicts[who.idx]
            else:
                base_ms, cond_ms = pair_ms(who)
                fresh = False
                if not base_ms and lv is not None and self.tuner is not None:
                    level = self.tuner.levels[lv]
                    base_ms, cond_ms = pair_ms(level.first)
                    k0, k = level.first.spec.draft_n_max or 0, who.spec.draft_n_max or 0
                    p0, pk = level.predicted(k0), level.predicted(k)
                    if p0 and pk:  # the first pass as it would have measured at the leader's length
                        cond_ms = [m * p0 / pk for m in cond_ms]
                    fresh = True
                if not base_ms:
                    out.append(c)
                    continue
                pool: list[float] = []
                if lv is not None and not fresh:  # neighbour lengths: their spread, re-centred on the leader's mean
                    own = bar.log_ratios(base_ms, cond_ms)
                    centre = sum(own) / len(own) if own else 0.0
                    for other in (x for x in conds if tuned.get(x.idx) == lv and x is not who):
                        xs = bar.log_ratios(*pair_ms(other))
                        if xs:
                            m = sum(xs) / len(xs)
                            pool += [x - m + centre for x in xs]
                done = rounds_of(who)
                members = [x.idx for x in conds if lv is not None and tuned.get(x.idx) == lv] or [who.idx]
                base = bases[arm(who.spec)]
                cost = budget_mod.cost_of(known, base.idx)
                for idx in [who.idx] if lead or lv is None else members:
                    cost = cost + budget_mod.cost_of(known, idx, first_of.get(idx))
                n = budget_mod.need(
                    who.spec.name + (f" ({self._role(lv, who)})" if lv is not None else ""),
                    base_ms,
                    cond_ms,
                    o.min_speedup,
                    per_round=max(1, prompts),
                    cost=cost,
                    at_least=max(0, o.repeat - done) * prompts if lv is not None and not lead else 0,
                    pool=pool,
                    seed=o.seed,
                    fresh=fresh,
                )
                verdicts[who.idx] = n
                self.needs[who.idx] = n
                self.note("plan " + n.line(left))
            below_floor = rounds_of(c) < o.repeat and not lead  # the policy's repetitions: evidence, not nothing
            decided = n.pairs == 0
            # a leader with no round of its own is planned from the first pass at another length:
            # a guess (2 noisy pairs once read "not decidable" at a predicted 0.58x), so it gets
            # one round of its own before the plan may give it up
            screen = lead and lv is not None and rounds_of(who) == 0
            if n.fits(left) or decided or below_floor or screen:
                out.append(c)
            if not (n.fits(left) or decided or screen) and c.idx not in given_up:
                need = (
                    f"`bench continue` with --budget {budget_mod.budget_for(0.0, n.seconds)} would"
                    if n.seconds
                    else f"no budget of up to {budget_mod.HORIZON} more rounds would"
                )
                given_up[c.idx] = need
                further = f"measured only up to --repeat {o.repeat}" if below_floor else "not measured further"
                if lv is None:
                    self.note(f"budget: {c.spec.name} cannot be decided in the budget left ({need}); {further}")
                elif lv not in told:
                    told.add(lv)
                    role = self._role(lv, who)
                    if bar.verdict(*pair_ms(who), o.min_speedup) != "undecided":
                        self.note(  # the leader is decided: its neighbours are what is left
                            f"budget: {role} {who.spec.name} is decided; its other lengths cannot be "
                            f"measured to --repeat {o.repeat} in the budget left ({need}); {further}"
                        )
                    else:
                        self.note(
                            f"budget: {role} {who.spec.name} cannot be decided in the budget left "
                            f"({need}); its candidates are {further if not lead else 'not measured further'}"
                        )
        return out

    def _role(self, level: int, who: ConditionRun) -> str:
        """What a `--tune` length is to its level, for the plan's lines."""
        lv = self.tuner.levels.get(level) if self.tuner is not None else None
        lead = lv.lead if lv is not None else None
        return (
            "the tuning's leader" if lead is None or lead.idx == who.idx else "a length that may beat the decided one"
        )

    def _first_pass_of(self) -> dict[int, int]:
        """A `--tune` candidate's idx -> its first pass's (what it is priced at before it ran)."""
        if self.tuner is None:
            return {}
        return {c.idx: lv.first.idx for lv in self.tuner.levels.values() for c in lv.candidates}

    def _strata_plan(
        self,
        measured: Measured,
        conds: list[ConditionRun],
        aside: dict[contention.Slot, str],
        bases: dict[tuple[int, Sampler], ConditionRun],
        pair_ms: Callable[[ConditionRun], tuple[list[float], list[float]]],
        spent: float,
        left: float,
        told: set[tuple[int, str]],
    ) -> tuple[list[ConditionRun], frozenset[str] | None]:
        """Once the tuning is settled and nothing else is left to measure, the budget left goes
        to the chosen length's strata still undecided: the audit gates per stratum, so a length
        decided `faster` over the whole workload is still refused for a stratum left undecided.
        Each such stratum is planned as a condition is (budget.need, on its
        own kept pairs, its prompts a round); those that fit are measured (their prompts only,
        with the baseline), those that cannot are named with the budget that would decide them.
        A choice decided `not faster` gets none: its refusal is for speed already. Returns the
        conditions to measure and their strata (None: nothing to measure)."""
        o = self.opts
        assert self.tuner is not None
        known = budget_mod.costs(measured.slot_s, request_seconds(measured.rows), measured.replay_s)
        per_stratum: dict[str, int] = {}
        for name in self.strata:
            per_stratum[name] = per_stratum.get(name, 0) + 1
        kept = contention.kept_rows(measured.rows, aside)
        picked: list[ConditionRun] = []
        strata: set[str] = set()
        for conc in self.tuner.levels:
            st = self.tuner.standing(conc, conds, kept)
            choice = st.choice
            if not st.settled or choice is None or choice.status != "running":
                continue
            base = bases.get(arm(choice.spec))
            if base is None or base.status != "running":
                continue
            if bar.verdict(*pair_ms(choice), o.min_speedup) != "faster":
                continue  # not faster (or not decided): no stratum of it can be deployed for speed
            cost = budget_mod.cost_of(known, base.idx) + budget_mod.cost_of(known, choice.idx)
            for stratum, n in per_stratum.items():
                base_ms, cond_ms = stratum_ms(measured.rows, aside, base.idx, choice.idx, stratum)
                if bar.verdict(base_ms, cond_ms, o.min_speedup) != "undecided":
                    continue
                if len(base_ms) < 2:  # nothing to project yet: a round of it first, once
                    tried = {r.repeat for r in measured.rows if r.condition_idx == choice.idx and r.stratum == stratum}
                    if len(tried) < 2:
                        strata.add(stratum)
                        picked.append(choice)
                    elif (choice.idx, stratum) not in told:
                        told.add((choice.idx, stratum))
                        self.note(
                            f"budget: {stratum} ({choice.spec.name}): fewer than 2 paired requests after "
                            f"{len(tried)} rounds (its requests failed or were set aside); not measured further"
                        )
                    continue
                need = budget_mod.need(
                    f"{stratum} ({choice.spec.name})", base_ms, cond_ms, o.min_speedup, per_round=n, cost=cost,
                    seed=o.seed, pool=stratum_pool(measured.rows, aside, base.idx, choice.idx, stratum),
                )  # fmt: skip
                if need.pairs == 0:
                    continue
                if need.fits(left):
                    self.note("plan " + need.line(left))
                    strata.add(stratum)
                    picked.append(choice)
                elif (choice.idx, stratum) not in told:
                    told.add((choice.idx, stratum))
                    would = (
                        f"`bench continue` with --budget {budget_mod.budget_for(0.0, need.seconds)} would"
                        if need.seconds
                        else f"no budget of up to {budget_mod.HORIZON} more rounds would"
                    )
                    self.note(f"budget: {need.line(left)}: {would}; not measured further")
        picked = list({c.idx: c for c in picked}.values())
        return picked, frozenset(strata) if picked else None


def free_rounds(
    picked: list[ConditionRun],
    bases: dict[tuple[int, Sampler], ConditionRun],
    rows: list[RequestRow],
    kept: list[RequestRow],
) -> dict[int, list[int]]:
    """Condition idx -> the repetitions its baseline measured (and kept) that it has not, after
    its own last: its next slot pairs with those rounds instead of starting the baseline again
    (a `--tune` length first measured after the first pass, or a method the first pass left
    out, pairs with the baseline's rounds so far). In order, so its pairs are measured
    in the order the sequence takes them (`paired_ms`: by repetition)."""
    out = {}
    for c in picked:
        base = bases.get(arm(c.spec))
        if base is None or base is c:
            continue
        have = {r.repeat for r in rows if r.condition_idx == c.idx}
        free = [r for r in sorted({r.repeat for r in kept if r.condition_idx == base.idx}) if r > max(have, default=-1)]
        if free:
            out[c.idx] = free
    return out


def _phase(c: ConditionRun, picked: list[ConditionRun], leaders: set[int], tuned: set[int]) -> SlotPhase:
    """Why a `--budget` slot runs (a baseline's: for the conditions it is paired with)."""
    idxs = {x.idx for x in picked} if c.spec.method == BASELINE else {c.idx}
    return "leader" if idxs & leaders else "lengths" if idxs & tuned else "methods"
