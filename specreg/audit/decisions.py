"""Per-workload decisions: per target, stratum and concurrency, the best condition passing every gate.

So n-gram for code editing and "none" for chat can both be the answer for one target, and so can
draft length 8 at concurrency 1 and "none" at concurrency 8 (where speculation stops paying): a
pair that fails overall (one required stratum too slow) can still win where it passes. Every
measured condition of a pair (each draft length, each concurrency) is a candidate, so the
decision names the best draft length.
"""

from __future__ import annotations

import shlex
from dataclasses import replace

from specreg.schemas.audit import (
    NO_SPECULATION,
    PAIR_LEVEL_GATES,
    WHOLE_CONDITION_GATES,
    Candidate,
    ConditionOutcome,
    PairAudit,
    RunDigest,
    StratumDecision,
    StratumRow,
    UncheckedCondition,
)
from specreg.schemas.bench import ALL_STRATA


def _everywhere(failed: list[str], o: ConditionOutcome) -> list[str]:
    """The gates a condition fails in every stratum (once per condition, not per stratum)."""
    return failed + [g for g in WHOLE_CONDITION_GATES if g in o.failed]


def _judged(everywhere: list[str], o: ConditionOutcome, stratum: str, row: StratumRow | None) -> tuple[bool, str]:
    """Whether a condition is eligible in this stratum, and why (or why not); `everywhere`: `_everywhere`."""
    # without evidence, equivalence and speed were never judged: name only the gates that failed
    here = o.strata.get(stratum, "evidence" in everywhere)
    if row is None:
        reason = "not measured in this stratum"
    elif everywhere or not here:
        # the gates that failed, never a list of those that might have: "fails speed (0.94x [0.80, 1.51]) here"
        local = [] if here else [f"{o.strata_why.get(stratum) or 'equivalence or speed'} here"]
        reason = "fails " + ", ".join(everywhere + local)
    else:
        reason = "passes every gate"
    return row is not None and not everywhere and here, reason


def _candidate(
    a: PairAudit, everywhere: list[str], o: ConditionOutcome, stratum: str, row: StratumRow | None
) -> Candidate:
    eligible, reason = _judged(everywhere, o, stratum, row)
    return Candidate(
        pair_id=a.pair_id,
        condition=o.condition,
        concurrency=o.concurrency,
        draft_n_max=o.draft_n_max,
        eligible=eligible,
        reason=reason,
        speedup=row.speedup if row else None,
        speedup_ci95=row.speedup_ci95 if row else None,
    )


def _unchecked(
    a: PairAudit, u: UncheckedCondition, why: str, everywhere: list[str], stratum: str, row: StratumRow | None
) -> Candidate:
    """A condition of a method the target was not checked for: judged on the gates its run can
    show (evidence, equivalence, speed, memory); never eligible until its `check pair` admits it.
    `why` names the check (`_why_unchecked`); `everywhere`: `_everywhere([], u.outcome)`."""
    measured_ok, reason = _judged(everywhere, u.outcome, stratum, row)
    return Candidate(
        pair_id=a.pair_id,
        condition=u.outcome.condition,
        concurrency=u.outcome.concurrency,
        draft_n_max=u.outcome.draft_n_max,
        eligible=False,
        reason=f"passes every gate its run shows; {why}" if measured_ok else f"{reason}; {why}",
        speedup=row.speedup if row else None,
        speedup_ci95=row.speedup_ci95 if row else None,
        method=u.method,
        check_command=u.check_command if measured_ok else None,
    )


def _why_unchecked(u: UncheckedCondition) -> str:
    return f"{u.method} is not checked for this target: {shlex.join(u.check_command)}"


def _rank(c: Candidate) -> tuple[float, float]:
    """Highest median speed-up first; the interval's low end breaks ties."""
    return (c.speedup or 0.0, c.speedup_ci95[0] if c.speedup_ci95 else 0.0)


def _best(cands: list[Candidate]) -> Candidate | None:
    """The eligible candidate with the highest median speed-up (the interval's low end breaks ties)."""
    return max((c for c in cands if c.eligible), key=_rank, default=None)


def decide(audits: list[PairAudit], runs: dict[str, RunDigest]) -> list[StratumDecision]:
    """Per target, stratum and concurrency: the passing condition with the best speed-up, else none."""
    by_target: dict[str, list[PairAudit]] = {}
    for a in audits:
        by_target.setdefault(a.target_sha256, []).append(a)
    out: list[StratumDecision] = []
    for target, group in by_target.items():
        measured = [runs[a.run_id] for a in group if a.run_id in runs]
        strata = sorted({r.stratum for run in measured for r in run.strata if r.stratum != ALL_STRATA})
        levels = sorted({o.concurrency for a in group for o in a.conditions})
        rows: dict[tuple[str | None, str, str], StratumRow] = {
            (a.run_id, r.condition, r.stratum): r for a in group if a.run_id in runs for r in runs[a.run_id].strata
        }
        # what does not depend on the stratum, once per pair (5,000 pairs x 5 strata otherwise)
        per_pair: list[
            tuple[PairAudit, list[tuple[ConditionOutcome, list[str]]], list[tuple[UncheckedCondition, str, list[str]]]]
        ] = []
        for a in group:
            gmap = {g.gate: g for g in a.gates}
            failed: list[str] = [g for g in PAIR_LEVEL_GATES if not (g in gmap and gmap[g].passed)]
            conds = [(o, _everywhere(failed, o)) for o in a.conditions]
            per_pair.append((a, conds, [(u, _why_unchecked(u), _everywhere([], u.outcome)) for u in a.unchecked]))
        for level in levels:
            for stratum in strata:
                cands = [
                    _candidate(a, everywhere, o, stratum, rows.get((a.run_id, o.condition, stratum)))
                    for a, conds, _ in per_pair
                    for o, everywhere in conds
                    if o.concurrency == level
                ]
                best = _best(cands)
                waiting = [
                    _unchecked(a, u, why, everywhere, stratum, rows.get((a.run_id, u.outcome.condition, stratum)))
                    for a, _, unchecked in per_pair
                    for u, why, everywhere in unchecked
                    if u.outcome.concurrency == level
                ]
                cands += waiting
                # a method measured but not checked for the target, faster than what is chosen
                # (judged as if eligible: a check command is set only where every measured gate passed;
                # ranked without copying each of them: 5,000 pairs x 5 strata on a fleet)
                promising = max((c for c in waiting if c.check_command), key=_rank, default=None)
                if promising is not None and best is not None and (promising.speedup or 0) <= (best.speedup or 0):
                    promising = None
                audit = next((a for a in group if best and a.pair_id == best.pair_id), None)
                out.append(
                    StratumDecision(
                        target_sha256=target,
                        target_name=group[0].target_name,
                        stratum=stratum,
                        concurrency=level,
                        choice=f"{audit.method} (pair {audit.pair_id})" if audit else NO_SPECULATION,
                        pair_id=best.pair_id if best else None,
                        condition=best.condition if best else None,
                        draft_n_max=best.draft_n_max if best else None,
                        speedup=best.speedup if best else None,
                        speedup_ci95=best.speedup_ci95 if best else None,
                        run_id=audit.run_id if audit else None,
                        candidates=cands,
                        unchecked=replace(promising) if promising else None,
                    )
                )
    return out
