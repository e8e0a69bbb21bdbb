"""How a run that stopped short of a decision ends, in words: what happened, what it measured,
and the command that goes on from it.

Three ways a run stops short: it **kept nothing** (status `contended`: every round it measured
was set aside because other processes were using the machine, after it had waited its
`--busy-wait` for a quieter one), its **budget ended** (`--budget` is a cap on the wall clock:
conditions left undecided, or never reached), or it was **stopped** (Ctrl-C: `cancelled`; a
`kill -9`, a lost session, a reboot: `aborted`, its rows kept). Each says so in one paragraph
ending in the command that measures on from its rows: `specreg bench continue RUN --budget D`,
D the budget still needed (the largest its stored projections name; for a run stopped before
it projected anything, its own budget). `continue_command` is the one place that writes that
command; `bench admitted`, `runs show`, the audit's and deploy's refusals, the reports and the
demo all print it from here.
"""

from __future__ import annotations

import math
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


def continue_argv(run_id: str, budget: str | None, db: Path | str | None = None) -> list[str]:
    """`specreg bench continue RUN --budget D` (argv): the one spelling of the command."""
    root = ["--db", str(db)] if db is not None else []
    return ["specreg", *root, "bench", "continue", run_id, *(["--budget", budget] if budget else [])]


def continue_text(run_id: str, budget: str | None) -> str:
    """The command as a line of text (what a refusal or a table cell says)."""
    return " ".join(continue_argv(run_id, budget))


def budget_needed(run: BenchRun) -> float | None:
    """The seconds a continuation of `run` needs: the largest budget its projections name for a
    condition left undecided over the whole workload (each the rounds that would decide it, at
    its own slots' cost; a stratum's only when every condition is decided: strata are decided
    after their condition, and a thin one can ask for far more than the run needs first);
    for a run stopped before it projected (aborted, cancelled, kept nothing) its own budget (its
    last session's); for a run of fixed rounds as long again as it took. None when none is
    known, or every projection says no budget within the horizon would decide (the user then
    says how long)."""
    from specreg.units import parse_duration

    open_ = [s for s in run.summaries if s.decision == "undecided"]
    whole = [s for s in open_ if s.stratum == ALL_STRATA]  # the conditions first; a stratum's once they are
    wanted = [s.decision_budget for s in whole if s.decision_budget] or [
        s.decision_budget for s in open_ if s.decision_budget
    ]
    if wanted:
        return max(parse_duration(b) for b in wanted)
    if any(s.decision_more_rounds is not None for s in open_):
        return None  # projected, and no budget would decide it (past the horizon): the user says how long
    settings = run.manifest.settings if run.manifest is not None else None
    if settings is None:
        return None
    if settings.budget_s is None:  # a run of fixed rounds: as long again as it took (whole minutes)
        from specreg.benchmark.store.efficiency import efficiency

        took = efficiency(run)
        return 60.0 * math.ceil(took.wall_s / 60) if took is not None and took.wall_s > 0 else None
    if run.manifest is not None and run.manifest.continued:
        return run.manifest.continued[-1].budget_s  # what the last session had
    return settings.budget_s


def continue_command(run: BenchRun, db: Path | str | None = None) -> list[str] | None:
    """The command (argv) that measures on from `run`: `bench continue` with the budget still
    needed (`budget_needed`; none when unknown: the command then takes the run's own budget, or
    asks for one when the run had none). None for a run
    with no pair here (imported without it) or no stored settings (nothing to continue with)."""
    if run.info.pair_id is None or run.manifest is None or run.manifest.settings is None:
        return None
    more = budget_needed(run)
    return continue_argv(run.info.run_id, duration_text(more) if more else None, db)


def ending(run: BenchRun, db: Path | str | None = None) -> Ending | None:
    """One paragraph for a run that kept nothing or whose budget ended before every condition
    was decided: what happened, what it measured, and the command that goes on (None: the run
    says all there is in its status and summaries)."""
    if run.info.status == "contended":
        return _kept_nothing(run, db)
    if run.info.status in ("cancelled", "aborted"):
        return _stopped(run, db)
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
    return Ending(text + (" Measure on when the machine is quieter:" if cmd else ""), cmd)


def _stopped(run: BenchRun, db: Path | str | None) -> Ending:
    how = "was stopped (Ctrl-C)" if run.info.status == "cancelled" else "ended without finishing (its specreg died)"
    text = f"Run {run.info.run_id} {how}; every finished request is kept. Measured: {_measured(run) or 'nothing'}."
    cmd = continue_command(run, db)
    return Ending(text + (" To measure on from where it stopped:" if cmd else ""), cmd)


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
