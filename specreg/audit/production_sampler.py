"""The audit at the production sampler: evidence measured at the policy's `[sampling]`, and the
sampled quality gate that stands in for exact equivalence at temperature > 0.

A run may measure several samplers (`bench admitted --temperature 0,0.7`); the audit judges the
conditions measured at the policy's sampler and nothing else, as if the run held only those,
because speed-ups and acceptance move with the sampler. A run that measured only other samplers
is no evidence, and the refusal names the bench command that measures the right one.
"""

from __future__ import annotations

from specreg.audit import gates
from specreg.benchmark.store.sampling import expect_problem
from specreg.schemas.audit import ConditionDigest, GateResult, Policy, RunDigest
from specreg.schemas.bench import RunManifest
from specreg.schemas.sampling import Sampler


def policy_sampler(policy: Policy) -> Sampler:
    """The sampler production uses, as the policy's `[sampling]` names it (default greedy)."""
    return Sampler.model_validate(policy.sampling.model_dump())


def measured(man: RunManifest | None) -> list[Sampler]:
    """Every sampler a run measured (runs from before samplers were recorded: greedy)."""
    if man is None:
        return []
    req = man.request
    temps = req.temperatures or [req.temperature]
    return [Sampler(temperature=t, top_p=req.top_p, top_k=req.top_k, min_p=req.min_p) for t in temps]


def at_sampler(run: RunDigest, sampler: Sampler) -> RunDigest:
    """The run as if it held only the conditions measured at `sampler` (baselines included)."""
    if all(c.sampler.key == sampler.key for c in run.conditions):
        return run
    conds = [c for c in run.conditions if c.sampler.key == sampler.key]
    labels = {c.label for c in conds}
    return run.model_copy(update={"conditions": conds, "strata": [r for r in run.strata if r.condition in labels]})


def bench_hint(pair_id: int, sampler: Sampler) -> str:
    """The command that measures a pair at this sampler (greedy first: the stages' order)."""
    temps = sampler.bench_flags()
    if not sampler.greedy:
        temps = temps.replace("--temperature ", "--temperature 0,", 1)
    return f"specreg bench admitted --pair {pair_id} {temps}"


def quality_gate(run: RunDigest, cond: ConditionDigest, policy: Policy, conc: int) -> GateResult:
    """Greedy: exact equivalence with the baseline; sampled: `sampled_gate`."""
    if cond.temperature == 0:
        return gates.equivalence_gate(run, cond, policy, conc)
    return sampled_gate(run, cond, policy, conc)


def sampled_gate(run: RunDigest, cond: ConditionDigest, policy: Policy, conc: int) -> GateResult:
    """Temperature > 0, per stratum: the condition's `expect` pass rate against the baseline's
    (not lower by more than the policy's tolerance, not lower beyond chance) and the distribution
    check of the first generated tokens (p at or above the policy's alpha). A stratum without any
    `expect` check is judged by the distribution check alone; one where the distribution check
    could not run (no outputs on both sides) fails: a gate never guesses a pass."""
    q = policy.quality
    strata: dict[str, bool] = {}
    notes: list[str] = []
    evidence: dict[str, object] = {"sampler": cond.sampler.label, "draft_sampling": cond.draft_sampling}
    rows = [r for r in run.rows(cond.label) if r.concurrency == conc and r.stratum != "all"]
    for row in rows:
        why: list[str] = []
        problem = expect_problem(row.expect_diff, row.expect_diff_ci95, q.expect_tolerance)
        if problem:
            why.append(problem)
        if row.dist_p is None:
            why.append(f"no distribution check ({row.dist_note or 'not run'})")
        elif row.dist_p < q.distribution_alpha:
            why.append(f"outputs differ from the baseline's in distribution (p = {row.dist_p:.3g})")
        strata[row.stratum] = not why
        evidence[row.stratum] = {
            "expect": f"{row.expect_checked - row.expect_failed}/{row.expect_checked}",
            "baseline_expect": f"{row.base_expect_checked - row.base_expect_failed}/{row.base_expect_checked}",
            "expect_diff": row.expect_diff,
            "expect_diff_ci95": list(row.expect_diff_ci95) if row.expect_diff_ci95 else None,
            "distribution_p": row.dist_p,
            "distribution_prompts": row.dist_n,
        }
        if why:
            notes.append(f"{row.stratum}: {', '.join(why)}")
    if not strata:
        notes.append("no measurements")
    passed = bool(strata) and all(strata.values())
    if passed:
        shown = ", ".join(
            f"{r.stratum} p={r.dist_p:.2g}"
            + (f" expect {r.expect_checked - r.expect_failed}/{r.expect_checked}" if r.expect_checked else "")
            for r in rows
        )
        msg = f"sampled at {cond.sampler.label}: same distribution as the baseline ({shown})"
    else:
        msg = f"sampled at {cond.sampler.label}: " + "; ".join(notes)
    return GateResult(gate="equivalence", passed=passed, message=msg, strata=strata, evidence=evidence)
