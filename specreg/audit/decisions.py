"""Per-workload decisions: for each target and stratum, the best condition that passes every gate.

So n-gram for code editing and "none" for chat can both be the answer for one target: a pair
that fails overall (one required stratum too slow) can still win the strata where it passes.
"""

from __future__ import annotations

from specreg.schemas.audit import (
    NO_SPECULATION,
    PAIR_LEVEL_GATES,
    PER_STRATUM_GATES,
    Candidate,
    GateName,
    PairAudit,
    RunDigest,
    StratumDecision,
    StratumRow,
)
from specreg.schemas.bench import ALL_STRATA


def decide(audits: list[PairAudit], runs: dict[str, RunDigest]) -> list[StratumDecision]:
    """Per target and stratum: the passing condition with the best median speed-up, else none."""
    by_target: dict[str, list[PairAudit]] = {}
    for a in audits:
        by_target.setdefault(a.target_sha256, []).append(a)
    out: list[StratumDecision] = []
    for target, group in by_target.items():
        strata = sorted(
            {r.stratum for a in group if a.run_id in runs for r in runs[a.run_id].strata if r.stratum != ALL_STRATA}
        )
        rows: dict[tuple[str | None, str | None, str], StratumRow] = {
            (a.run_id, r.condition, r.stratum): r
            for a in group
            if a.run_id in runs
            for r in runs[a.run_id].strata
            if r.condition == a.condition
        }
        # what does not depend on the stratum, once per pair (5,000 pairs x 5 strata otherwise)
        per_pair: list[tuple[PairAudit, list[GateName], list[tuple[GateName, dict[str, bool]]]]] = []
        for a in group:
            gmap = {g.gate: g for g in a.gates}
            failed = [g for g in PAIR_LEVEL_GATES if not (g in gmap and gmap[g].passed)]
            by_stratum = [(g, gmap[g].strata if g in gmap else {}) for g in PER_STRATUM_GATES]
            per_pair.append((a, failed, by_stratum))
        for stratum in strata:
            cands: list[Candidate] = []
            for a, failed, local_strata in per_pair:
                local = [g for g, by in local_strata if not by.get(stratum, False)]
                row = rows.get((a.run_id, a.condition, stratum))
                ok = row is not None and not failed and not local
                if row is None:
                    reason = "not measured in this stratum"
                elif failed or local:
                    reason = "fails " + ", ".join([*failed, *(f"{g} here" for g in local)])
                else:
                    reason = "passes every gate"
                cands.append(
                    Candidate(
                        pair_id=a.pair_id,
                        condition=a.condition,
                        eligible=ok,
                        reason=reason,
                        speedup=row.speedup if row else None,
                    )
                )
            best = max((c for c in cands if c.eligible), key=lambda c: c.speedup or 0.0, default=None)
            audit = next((a for a in group if best and a.pair_id == best.pair_id), None)
            out.append(
                StratumDecision(
                    target_sha256=target,
                    target_name=group[0].target_name,
                    stratum=stratum,
                    choice=f"{audit.method} (pair {audit.pair_id})" if audit else NO_SPECULATION,
                    pair_id=best.pair_id if best else None,
                    speedup=best.speedup if best else None,
                    run_id=audit.run_id if audit else None,
                    candidates=cands,
                )
            )
    return out
