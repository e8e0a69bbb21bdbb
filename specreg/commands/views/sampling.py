"""`runs show`: acceptance and speed-up per sampler, with the sampled stage's checks.

Speed-ups are comparable only at the same sampler, so a run that measured more than greedy gets
one line per speculative condition grouped by sampler: acceptance, the speed-up over the
baseline at that sampler, and at temperature > 0 the expect pass rates and the distribution
check in place of exact equivalence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specreg.commands.output import say

if TYPE_CHECKING:
    from specreg.schemas.bench import BenchRun, ConditionSummary

SAMPLED_LEGEND = (
    "sampled (T > 0): outputs are random, so no exact match; expect: pass rate vs the baseline's at "
    "the same sampler; distribution: permutation test of the first generated tokens against the baseline's"
)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _line(s: ConditionSummary) -> str:
    from specreg.benchmark.store.statistics import interval_text

    parts = [f"acceptance {_pct(s.acceptance)}", f"speed-up {interval_text(s.speedup, s.speedup_ci95, short=True)}"]
    if s.temperature > 0:
        if s.n_expect_checked:
            base = f"{s.n_base_expect_checked - s.n_base_expect_failed}/{s.n_base_expect_checked}"
            parts.append(f"expect {s.n_expect_checked - s.n_expect_failed}/{s.n_expect_checked} vs {base}")
        if s.dist_p is not None:
            flag = " DIFFERS" if s.dist_flagged else ""
            parts.append(f"distribution p={s.dist_p:.2g} ({s.dist_n} prompts){flag}")
        elif s.dist_note:
            parts.append(f"distribution: {s.dist_note}")
    elif s.n_compared:
        parts.append(f"equivalent {s.n_equal}/{s.n_compared}")
    return ", ".join(parts)


def show_samplers(run: BenchRun) -> None:
    """Per sampler, per speculative condition (over every stratum); nothing for a greedy-only run."""
    whole = [s for s in run.summaries if s.stratum == "all"]
    samplers = list(dict.fromkeys(s.sampler for s in whole))
    if all(sp.greedy for sp in samplers):
        return
    say("per sampler (speed-up over the baseline at the same sampler):", indent=2)
    for sp in samplers:
        for s in whole:
            if s.sampler != sp or s.method == "none":
                continue
            name = s.condition if s.condition.split()[-1] != s.draft_sampling else s.condition.rsplit(" ", 1)[0]
            mode = f", {s.draft_sampling} draft" if s.draft_sampling else ""
            text = _line(s) if s.status == "ok" else f"{s.status}: {s.speedup_note or ''}"
            say(text, prefix=f"  {name} ({sp.label}{mode}): ", indent=6)
    say(SAMPLED_LEGEND, style="dim")
