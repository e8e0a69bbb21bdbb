"""How a run that stopped short of a decision ends, in words: what happened, what it measured,
and the command that goes on from it.

Two ways a run stops short: it **kept nothing** (status `contended`: every round it measured
was set aside because other processes were using the machine, after it had waited its
`--busy-wait` for a quieter one), or its **budget ended** (`--budget` is a cap on the wall
clock: conditions left undecided, or never reached). Either way the run says so in one
paragraph ending in the command that measures on (`bench admitted`, the demo and `runs show`
all print it from here). Until runs can be continued from their rows, that command measures
the pair again with the run's own settings; `continue_command` is the one place that says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.schemas.bench import ALL_STRATA
from specreg.schemas.bench_settings import duration_text
from specreg.schemas.methods import BASELINE
from specreg.text import plural

if TYPE_CHECKING:
    from specreg.schemas.bench import BenchRun, ConditionRun

# a condition the budget's deadline left unmeasured (the runner's `_finish`): skipped, not failed
BUDGET_ENDED = "not measured: the --budget ended before it ran"


@dataclass(frozen=True)
class Ending:
    """What happened, in one paragraph, and the command (argv) that measures on, if there is one."""

    text: str
    command: list[str] | None


def continue_command(run: BenchRun, db: Path | str | None = None) -> list[str] | None:
    """The command (argv) that measures on from `run`: today `bench admitted` of its pair with
    its own settings (its budget: the largest one its projections say would decide). None for
    a run with no pair here (imported without it)."""
    if run.info.pair_id is None:
        return None
    settings = run.manifest.settings if run.manifest is not None else None
    flags = settings.argv() if settings is not None else []
    wanted = [s.decision_budget for s in run.summaries if s.decision == "undecided" and s.decision_budget]
    if settings is not None and settings.budget_s is not None and wanted:
        from specreg.units import parse_duration

        more = max(parse_duration(b) for b in wanted)
        if more > settings.budget_s:
            at = flags.index("--budget")
            flags[at + 1] = duration_text(more)
    root = ["--db", str(db)] if db is not None else []
    return ["specreg", *root, "bench", "admitted", "--pair", str(run.info.pair_id), *flags]


def ending(run: BenchRun, db: Path | str | None = None) -> Ending | None:
    """One paragraph for a run that kept nothing or whose budget ended before every condition
    was decided: what happened, what it measured, and the command that goes on (None: the run
    says all there is in its status and summaries)."""
    if run.info.status == "contended":
        return _kept_nothing(run, db)
    settings = run.manifest.settings if run.manifest is not None else None
    if settings is None or settings.budget_s is None or run.info.status not in ("complete", "incomplete"):
        return None
    unreached = [_name(c) for c in run.conditions if c.status == "skipped" and c.failure == BUDGET_ENDED]
    undecided = [
        s.condition
        for s in run.summaries
        if s.stratum == ALL_STRATA and s.method != BASELINE and s.decision == "undecided" and s.n_requests
    ]
    if not unreached and not undecided:
        return None
    measured = _measured(run)
    text = (
        f"The --budget of {duration_text(settings.budget_s)} ended before every condition was decided. "
        f"Measured: {measured or 'nothing'}."
    )
    if unreached:
        text += f" Not reached: {', '.join(unreached)}."
    if undecided:
        text += f" Undecided: {', '.join(dict.fromkeys(undecided))}."
    cmd = continue_command(run, db)
    return Ending(text + (" To measure on:" if cmd else ""), cmd)


def _kept_nothing(run: BenchRun, db: Path | str | None) -> Ending:
    waited = sum(load.waited_s or 0.0 for c in run.conditions for load in c.load)
    settings = run.manifest.settings if run.manifest is not None else None
    allowed = f" (--busy-wait {duration_text(settings.busy_wait_s)})" if settings is not None else ""
    why = run.info.status_reason or "every round measured was set aside (the machine was busy)"
    text = (
        f"Run {run.info.run_id} kept nothing: {why}, after waiting {waited:.0f} s for a quieter machine"
        f"{allowed}. It decides nothing and is no evidence for the audit."
    )
    text += (
        " Let it wait longer (--busy-wait), raise --busy-share, or give --busy-share off to count timings "
        "taken beside a neighbour."
    )
    cmd = continue_command(run, db)
    return Ending(text + (" Measure again when the machine is quieter:" if cmd else ""), cmd)


def _name(c: ConditionRun) -> str:
    return f"{c.spec.name} (baseline)" if c.spec.method == BASELINE else c.spec.name


def _measured(run: BenchRun) -> str:
    """`none 45 requests in 1 round, ngram-simple 12 requests in 1 round`: per condition measured."""
    by: dict[int, tuple[int, set[int]]] = {}
    for r in run.requests:
        n, reps = by.get(r.condition_idx, (0, set()))
        by[r.condition_idx] = (n + 1, reps | {r.repeat})
    return ", ".join(
        f"{_name(c)} {plural(by[c.idx][0], 'request')} in {plural(len(by[c.idx][1]), 'round')}"
        for c in run.conditions
        if c.idx in by
    )
