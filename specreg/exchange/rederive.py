"""A run's summaries derived again from its own rows: what an import checks before it keeps them.

A bundle's summaries (medians, intervals, speed-ups, decisions, acceptance) are numbers derived
from its request rows; whoever wrote the bundle could have written any. `check_summaries` draws
them again with the code that wrote them (`condition_summary.summarize`, the run's settings and
its build's defaults from the manifest) and names the first that differs beyond rounding. A
`--tune` prediction is made before its candidate ran, from the runner's state, and cannot be
drawn again from the rows; it is kept as stored (its numbers are finite: bundle JSON is strict).
A `--budget` run's projection for what it left undecided is drawn again too (the rounds,
`projection.projected_rounds`); the budget that would run them is the runner's clock and
is kept as stored only beside such rounds (`_budget_as_stored`).

Each run's decisions are drawn again with the method that made them: decision/bar.py's tests
where its summaries say so (`decision_method` "bar"), else the confidence sequence of runs before
them (decision/sequential.py, its projection too). That sequence's interval was the whole grid's
hull before it was cut to its running slice, the same or tighter at an edge, so such a run is
drawn again with the slice and, where that differs, with the grid: either is the code that wrote
a bundle, and none leaves its writer a number to choose.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from specreg.benchmark.plan.projection import projected_rounds
from specreg.benchmark.store.condition_summary import StatSettings, stat_settings, summarize
from specreg.decision.bar import Method
from specreg.decision.budget import HORIZON
from specreg.schemas.bench import BenchRun, ConditionSummary

REL_TOL = 1e-9  # rounding: the same code on another machine's floats (libm, summation order)
ABS_TOL = 1e-9


def _differs(a: Any, b: Any, where: str) -> str | None:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float) or not isinstance(b, int | float):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                found = _differs(a.get(k), b.get(k), f"{where}.{k}")
                if found:
                    return found
            return None
        if isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                return f"{where}: {len(b)} values stored, {len(a)} derived"
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                found = _differs(x, y, f"{where}[{i}]")
                if found:
                    return found
            return None
        return None if a == b else f"{where}: stored {str(b)[:40]!r}, derived {str(a)[:40]!r}"
    if math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=ABS_TOL):
        return None
    return f"{where}: stored {b!r}, derived {a!r}"


def method_of(run: BenchRun) -> Method:
    """The method that decided a run, as its summaries record it (none recorded: before bar.py)."""
    return "bar" if any(s.decision_method == "bar" for s in run.summaries) else "slice"


def derived_summaries(run: BenchRun, method: Method | None = None) -> list[ConditionSummary]:
    """The summaries the run's rows give, drawn as the runner draws them (its settings and its
    build's defaults from the manifest, its decisions with `method`, by default the one it
    records): what an import expects to find stored."""
    m = run.manifest
    method = method or method_of(run)
    stats = stat_settings(m.settings, m.runtime.spec_defaults) if m is not None and m.settings else StatSettings()
    out = summarize(run.conditions, run.requests, dataclasses.replace(stats, method=method))
    if m is not None and m.settings is not None and m.settings.budget_s is not None:  # as the runner projects
        strata = [p.stratum for p in run.prompts]
        found = projected_rounds(
            run.conditions, run.requests, out, strata, m.settings.min_speedup, m.settings.seed, stats.set_aside,
            method,
        )  # fmt: skip
        for i, more in found.items():
            out[i].decision_more_rounds = more
    return out


_BUDGET = re.compile(r"[1-9][0-9]{0,5}m")  # what budget.budget_for writes: whole minutes


def _budget_as_stored(derived: ConditionSummary, stored: ConditionSummary) -> str | None:
    """The `--budget` that would decide an undecided condition comes from the runner's clock (what
    its rounds cost), not from the rows: it is kept as stored where the rows give rounds to
    project within the horizon and it reads as `budget_for` writes it; anywhere else a stored one
    is a difference."""
    more, budget = derived.decision_more_rounds, stored.decision_budget
    if more is None or more > HORIZON or budget is None or not _BUDGET.fullmatch(budget):
        return None
    return budget


def _first_difference(run: BenchRun, derived: list[ConditionSummary]) -> str | None:
    stored = run.summaries
    keys = [(s.condition, s.stratum) for s in stored]
    if keys != [(s.condition, s.stratum) for s in derived]:
        return f"not one summary per condition and stratum ({len(stored)} stored, {len(derived)} derived)"
    for d, s in zip(derived, stored, strict=True):
        d.tune = s.tune
        d.decision_budget = _budget_as_stored(d, s)
        found = _differs(d.model_dump(mode="json"), s.model_dump(mode="json"), f"{s.condition}/{s.stratum}")
        if found:
            return found
    return None


def check_summaries(run: BenchRun) -> str | None:
    """None when the stored summaries are the ones the run's rows give (with the method the run
    records; one decided before bar.py with the slice or, failing that, the grid); else the first
    difference from the method's."""
    found = _first_difference(run, derived_summaries(run))
    if found is None or method_of(run) != "slice":
        return found
    return None if _first_difference(run, derived_summaries(run, "grid")) is None else found


__all__ = ["check_summaries", "derived_summaries"]
