"""The condition gates for every measured condition of a pair, and the one the pair is judged on.

A run can hold a pair's method at several draft lengths and concurrencies (a sweep). Each such
condition is judged on its own (evidence, equivalence, speed, memory); the pair is judged on the
best one at the policy's concurrency (all four passing first, then the most gates passed, then
the interval's low end, then the speed-up), and the per-stratum decisions look at all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from specreg.audit import gates
from specreg.audit.production_sampler import quality_gate
from specreg.schemas.audit import (
    CONDITION_GATES,
    ConditionDigest,
    ConditionOutcome,
    GateResult,
    Policy,
    RunDigest,
    StratumRow,
)
from specreg.schemas.bench import ALL_STRATA
from specreg.schemas.registry import PairRecord


@dataclass
class Judged:
    """One condition with its four gate results."""

    cond: ConditionDigest
    results: list[GateResult]
    whole: StratumRow | None  # the condition's row over every stratum

    @property
    def n_passed(self) -> int:
        return sum(g.passed for g in self.results)

    def outcome(self) -> ConditionOutcome:
        eq, sp = self.results[1], self.results[2]
        strata = {s: ok and sp.strata.get(s, False) for s, ok in eq.strata.items()}
        return ConditionOutcome(
            condition=self.cond.label,
            concurrency=self.cond.concurrency,
            draft_n_max=self.cond.draft_n_max,
            params=dict(self.cond.params),
            temperature=self.cond.temperature,
            draft_sampling=self.cond.draft_sampling,
            failed={g.gate: g.message for g in self.results if not g.passed},
            strata=strata,
            strata_why={s: _stratum_why(eq, sp, s) for s, ok in strata.items() if not ok},
            speedup=self.whole.speedup if self.whole else None,
            speedup_ci95=self.whole.speedup_ci95 if self.whole else None,
        )


def _stratum_why(eq: GateResult, sp: GateResult, stratum: str) -> str:
    """Which of equivalence and speed fail in `stratum`, each with its numbers."""
    from specreg.benchmark.store.statistics import interval_text

    parts: list[str] = []
    if not eq.strata.get(stratum, False):
        counts = eq.evidence.get("equivalent/compared")
        count = counts.get(stratum) if isinstance(counts, dict) else None
        parts.append(f"equivalence ({count} equal)" if count else "equivalence")
    if not sp.strata.get(stratum, False):
        ev = sp.evidence.get(stratum)
        speedup = ev.get("speedup") if isinstance(ev, dict) else None
        ci = ev.get("speedup_ci95") if isinstance(ev, dict) else None
        numbers = interval_text(speedup, (ci[0], ci[1]) if ci else None) if speedup is not None else "not measured"
        # what failed, not only the speed-up: "speed (2.77x [2.01, 3.58]; p95 19629.6 ms > limit 2042.8 ms ...)"
        problems = [str(p) for p in (ev.get("problems") or [] if isinstance(ev, dict) else [])]
        if not any(p.startswith(("speed-up", "no speed-up")) for p in problems):
            problems.insert(0, numbers)
        parts.append(f"speed ({'; '.join(problems)})")
    return ", ".join(parts) or "equivalence or speed"


def pair_conditions(run: RunDigest | None, pair: PairRecord) -> list[ConditionDigest]:
    """The run's conditions of this pair's method (and draft), every draft length and concurrency."""
    if run is None:
        return []
    return [c for c in run.conditions if c.spec_type == pair.method and c.draft_sha256 == pair.draft_sha256]


def judge(run: RunDigest, cond: ConditionDigest, policy: Policy, how: str, conc: int | None = None) -> Judged:
    """Evidence first; without evidence the other three fail with its reason instead of guessing."""
    level = cond.concurrency if conc is None else conc
    evidence = gates.evidence_gate(run, cond, policy, level, how)
    if evidence.passed:
        rest = [
            quality_gate(run, cond, policy, level),  # exact at temperature 0, sampled checks above
            gates.speed_gate(run, cond, policy, level),
            gates.memory_gate(run, cond, policy.memory),
        ]
    else:
        why = f"no evidence: {evidence.message}"
        rest = [GateResult(gate=g, passed=False, message=why) for g in CONDITION_GATES[1:]]
    whole = next((r for r in run.rows(cond.label) if r.stratum == ALL_STRATA), None)
    return Judged(cond, [evidence, *rest], whole)


def _rank(j: Judged) -> tuple[int, float, float]:
    ci = j.whole.speedup_ci95 if j.whole else None
    speedup = j.whole.speedup if j.whole and j.whole.speedup is not None else 0.0
    return (j.n_passed, ci[0] if ci else 0.0, speedup)


def judge_all(
    run: RunDigest | None, pair: PairRecord, policy: Policy, how: str, conc: int | None
) -> tuple[Judged | None, list[Judged]]:
    """Every condition of the pair judged, and the one the pair is judged on (None: none measured
    at the judged concurrency; the caller then fails evidence for want of it)."""
    conds = pair_conditions(run, pair)
    if run is None or not conds:
        return None, []
    judged = [judge(run, c, policy, how) for c in conds]
    here = [j for j in judged if j.cond.concurrency == conc]
    if conc is None or not here:
        return None, judged
    return max(here, key=_rank), judged
