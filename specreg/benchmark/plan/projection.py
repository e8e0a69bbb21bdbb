"""What would decide a condition a `--budget` run left undecided: the projection stored with it.

`runs show`, the report and the audit print "undecided after 2 rounds (needs about 3 more:
specreg bench continue RUN --budget 4m)" rather than an interval that at a few pairs spans the whole clip. The rounds
are `decision.budget.need` on the condition's kept pairs, the very projection the scheduler
plans with, so a plan told during a run and the projection stored after it agree on the same
pairs. The rounds are a function of the rows and the run's settings only, so an import draws
them again (exchange/rederive.py); the budget that would run them is priced at the run's own
slot costs, which the rows do not hold.
"""

from __future__ import annotations

from collections.abc import Sequence

from specreg.benchmark.plan.scheduler import Measured, request_seconds
from specreg.benchmark.store import contention
from specreg.benchmark.store.condition_summary import stratum_ms, stratum_pool
from specreg.benchmark.store.sampling import arm
from specreg.decision import bar
from specreg.decision import budget as budget_mod
from specreg.schemas.bench import ALL_STRATA, ConditionRun, ConditionSummary
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.methods import BASELINE
from specreg.schemas.request_row import RequestRow


def projected_rounds(
    conditions: list[ConditionRun],
    rows: list[RequestRow],
    summaries: list[ConditionSummary],
    strata: Sequence[str],
    min_speedup: float,
    seed: int,
    spread: bool,
    method: bar.Method = bar.METHOD,
) -> dict[int, int]:
    """Summary index -> about how many more rounds would decide that condition and stratum
    (`budget.HORIZON + 1`: not within the horizon), for each the rows leave undecided: `need` on
    its kept pairs with a round of its stratum's prompts (`strata`: the workload's, one per
    prompt), seeded with the run's seed, under the test that decides the run (`method`). A
    stratum's spread is drawn with the other strata's (`stratum_pool`; not for runs decided before
    bar.py, whose projections an import draws again as they were)."""
    aside = contention.set_aside(conditions, rows, spread=spread)
    by_name = {c.spec.name: c for c in conditions}
    bases = {arm(c.spec): c for c in conditions if c.spec.method == BASELINE}
    per_stratum: dict[str, int] = {}
    for st in strata:
        per_stratum[st] = per_stratum.get(st, 0) + 1
    out: dict[int, int] = {}
    for i, s in enumerate(summaries):
        c = by_name.get(s.condition)
        base = bases.get(arm(c.spec)) if c is not None else None
        if s.decision != "undecided" or c is None or base is None or c is base:
            continue
        base_ms, cond_ms = stratum_ms(rows, aside, base.idx, c.idx, s.stratum)
        n = per_stratum.get(s.stratum, len(strata)) if s.stratum != ALL_STRATA else len(strata)
        if len(base_ms) < 2:
            continue
        name = f"{s.condition} / {s.stratum}"
        pool = stratum_pool(rows, aside, base.idx, c.idx, s.stratum) if method == "bar" else []
        need = budget_mod.need(
            name, base_ms, cond_ms, s.decision_min_speedup or min_speedup, per_round=n, seed=seed, pool=pool,
            method=method,
        )  # fmt: skip
        if need.pairs != 0:  # 0: decided on these pairs after all, nothing to project
            out[i] = budget_mod.HORIZON + 1 if need.rounds is None else need.rounds
    return out


def project_undecided(
    summaries: list[ConditionSummary],
    measured: Measured,
    conds: list[ConditionRun],
    spent: float,
    opts: BenchSettings,
    strata: Sequence[str],
) -> None:
    """Each condition and stratum left undecided by a `--budget` run gets about how many more
    rounds would decide it (`projected_rounds`) and the budget a continuation of the run needs for
    them (`bench continue RUN --budget D`: its own and its baseline's cost so far, a server start
    per round included; a stratum's pairs come with whole rounds of its condition, priced whole)."""
    o = opts
    by_name = {c.spec.name: c for c in conds}
    bases = {arm(c.spec): c for c in conds if c.spec.method == BASELINE}
    known = budget_mod.costs(measured.slot_s, request_seconds(measured.rows), measured.replay_s)
    prompts = len(strata)
    projected = projected_rounds(conds, measured.rows, summaries, strata, o.min_speedup, o.seed, o.busy_share > 0)
    for i, more in projected.items():
        s = summaries[i]
        c = by_name[s.condition]
        base = bases[arm(c.spec)]
        cost = budget_mod.cost_of(known, base.idx) + budget_mod.cost_of(known, c.idx)
        s.decision_more_rounds = more
        needed = more * cost.seconds(prompts, prompts) if more <= budget_mod.HORIZON else 0.0
        # within the run's own budget, it was left undecided by choice (a length that cannot
        # beat the tuned one): how many rounds, but no budget to ask for
        if needed and spent + needed > (o.budget_s or 0.0):
            s.decision_budget = budget_mod.budget_for(0.0, needed)  # what `bench continue` needs from here
