"""Rounds-to-decide has one owner (`decision.budget.need`): the plan the `--budget` scheduler tells
during a run and the projection stored with the run (`decision_more_rounds`) agree on the same
pairs. Before, the plan counted pairs drawn one at a time and the projection counted rounds drawn
a round at a time; on the same pairs about a third of them disagreed."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime

from specreg.benchmark.plan.projection import projected_rounds
from specreg.benchmark.plan.scheduler import BudgetScheduler
from specreg.benchmark.store.condition_summary import stat_settings, summarize
from specreg.decision.budget import HORIZON, undecided_text
from specreg.schemas.bench import ALL_STRATA, ConditionRun, ConditionSpec
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.request_row import RequestRow

STRATA = ["chat", "chat", "code", "code", "code"]  # the workload's prompts, one stratum each


@dataclass
class _Measured:
    """A stored run as the scheduler reads it: its rows and its slots' seconds."""

    rows: list[RequestRow]
    slot_s: dict[int, list[float]] = field(default_factory=dict)
    replay_s: dict[int, list[float]] = field(default_factory=dict)

    def expired(self) -> bool:
        return False


def _conds(status: str) -> list[ConditionRun]:
    return [
        ConditionRun(idx=0, spec=ConditionSpec(name="none", method="none"), status=status),
        ConditionRun(idx=1, spec=ConditionSpec(name="ngram-mod", method="ngram-mod"), status=status),
    ]


def _rows(rng: random.Random, rounds: int, speedup: float, noise: float) -> list[RequestRow]:
    """Paired rows of the baseline and one condition: each prompt's server time, the condition's
    with a true `speedup` and log-normal noise, every prompt of every round."""
    out = []
    prompt_ms = [rng.uniform(80, 400) for _ in STRATA]
    for rep in range(rounds):
        for p, stratum in enumerate(STRATA):
            base_ms = prompt_ms[p] * math.exp(rng.gauss(0, noise / 2))
            for idx, ms in ((0, base_ms), (1, base_ms / speedup * math.exp(rng.gauss(0, noise)))):
                out.append(
                    RequestRow(
                        condition_idx=idx,
                        condition="none" if idx == 0 else "ngram-mod",
                        prompt_id=f"p{p}",
                        stratum=stratum,
                        repeat=rep,
                        started_at=datetime.now(UTC),
                        ok=True,
                        total_ms=ms + 2.0,
                        prompt_ms=ms / 4,
                        predicted_ms=ms * 3 / 4,
                        output_tokens=8,
                    )
                )
    return out


def _plan_and_projection(seed: int, rounds: int, speedup: float, noise: float) -> tuple[int | None, int | None, str]:
    """On one run's rows: the rounds the scheduler's plan names for the condition (None: not
    decidable within the horizon), the rounds stored for it, and the plan's line."""
    rows = _rows(random.Random(seed), rounds, speedup, noise)
    opts = BenchSettings(repeat=rounds, seed=seed, budget_s=3600.0, min_speedup=1.05, bootstrap_resamples=100)
    summaries = summarize(_conds("ok"), rows, stat_settings(opts, {}))  # as the runner draws them
    whole = next(i for i, s in enumerate(summaries) if s.condition == "ngram-mod" and s.stratum == ALL_STRATA)
    spread = opts.busy_share > 0  # rounds set aside as the runner sets them aside
    stored = projected_rounds(_conds("ok"), rows, summaries, STRATA, 1.05, seed, spread).get(whole)
    notes: list[str] = []
    plan = BudgetScheduler(opts, STRATA, _conds("running"), planned=rounds, started=0.0, note=notes.append,
                           clock=lambda: 0.0)  # fmt: skip
    plan.next_round(_Measured(rows, slot_s={0: [1.0] * rounds, 1: [1.0] * rounds}))
    need = plan.needs.get(1)
    if summaries[whole].decision != "undecided":
        assert need is None and stored is None, (need, stored)
        return None, None, ""
    assert need is not None, notes
    line = next(n for n in notes if n.startswith("plan ngram-mod:"))
    planned = HORIZON + 1 if need.rounds is None else need.rounds
    return planned, stored, line


def test_the_plan_and_the_stored_projection_name_the_same_rounds() -> None:
    """Across speed-ups near and far from the bar, noise and run lengths: wherever the condition
    is undecided, the plan told during the run and the projection `runs show` prints agree."""
    seen = {"some": 0, "beyond": 0}
    for case in range(24):
        rng = random.Random(case)
        planned, stored, line = _plan_and_projection(
            seed=case,
            rounds=rng.choice([1, 2, 3]),
            speedup=rng.choice([1.0, 1.04, 1.08, 1.15]),
            noise=rng.choice([0.05, 0.15, 0.3]),
        )
        if planned is None:
            continue
        assert planned == stored, (case, planned, stored, line)
        if planned > HORIZON:
            seen["beyond"] += 1
            assert f"not decidable within {HORIZON} more rounds" in line
            assert "not decidable within" in undecided_text(1, stored, None)
        else:
            seen["some"] += 1
            assert f"({planned} round" in line, line
            assert f"needs about {planned} more" in undecided_text(1, stored, None)
    assert seen["some"] >= 3 and seen["beyond"] >= 1, seen  # both kinds of projection were compared
