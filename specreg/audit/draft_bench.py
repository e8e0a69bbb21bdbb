"""`specreg drafts --bench N --budget D`: the top N candidates measured head to head, the best audited.

A prediction ranks; only a measurement decides. Successive halving spends the budget where the
answer is still open: round 1 runs every candidate once (one repetition of the workload beside
its baseline), each later round keeps the better half by measured speed-up and runs the
survivors at twice the repetitions, and the last survivor runs once more with the repetitions
the policy's evidence gate wants (with `--tune`, tuning its draft length) until decided or the
budget ends.

The halving is planned from the budget so that the last round gets what the audit needs (a
winner measured with fewer repetitions than the policy's minimum would be refused). After round 1 every
candidate's cost is known from its own run (a server start, then one repetition: the slot
seconds of its stored requests, priced by `decision.budget.round_seconds`, the same pricing
`bench --budget` plans its rounds with). The final round's share, the start plus the policy's
`min_repetitions`, is kept aside from the start: a middle round that would eat it is not run
(the leader goes straight to the final), and when what is left cannot hold the final round
the run stops there and says which `--budget` would decide it, instead of measuring a winner
the audit must refuse. The final run is a `--budget` run, so the evidence gate judges it on
its anytime-valid decision when it stops early decided.

Every run goes through `benchmark.runner.Runner.bench_pair` - the entry point `bench admitted`
uses - so it is stored, keyed and budgeted exactly as `bench admitted` stores it; the winner
is then audited (`audit_by_hardware`) and `plan_deploy` gives its command or the gates that
refuse it.

Only candidates whose bytes are on this machine can be measured: a hub candidate is listed
with the `specreg fetch` that would make it measurable, never downloaded here.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.decision import budget as budget_mod
from specreg.errors import SpecregError, UsageError
from specreg.schemas.drafts import BenchOutcome, DraftReport, DraftRow, HalvingRound
from specreg.schemas.methods import BASELINE, MODEL_DRAFTED

if TYPE_CHECKING:
    from specreg.benchmark.run.context import Observer
    from specreg.registry.store import Registry
    from specreg.schemas.audit import Policy
    from specreg.schemas.bench import BenchRun


@dataclass(frozen=True)
class BenchPlan:
    n: int
    budget_s: float | None
    tune: bool
    workload: str
    server: Path | None
    policy: Policy
    policy_source: str


def label(row: DraftRow) -> str:
    """A row's short name in round lines: the method and the draft file's name."""
    if row.draft is None:
        return row.method
    return f"{row.method} {row.draft.rsplit('/', 1)[-1]}"


def _admit(reg: Registry, report: DraftReport, row: DraftRow) -> int:
    """The candidate's verdict recorded as `check pair` records it: `bench` runs admitted pairs only."""
    from specreg.servers.identity import choose_rules
    from specreg.sources.checking import check_and_record
    from specreg.validators.ruleset import load_rule_set

    try:
        rules = load_rule_set(report.rule_set.rsplit("/r", 1)[0])
    except SpecregError:
        rules = choose_rules(None, None).rules
    draft = row.sha256 or row.ref if row.draft is not None else None
    done = check_and_record(reg, report.target_sha256, draft, row.method, rule_set=rules)
    if not done.verdict.admitted:
        raise SpecregError(f"{label(row)}: rejected when recorded")
    return done.pair_id


def _speedup(run: BenchRun, method: str) -> float | None:
    """The run's measured end-to-end speed-up of `method` over all strata (its best condition)."""
    xs = [
        s.speedup
        for s in run.summaries
        if s.method == method and s.stratum == "all" and s.status == "ok" and s.speedup is not None
    ]
    return max(xs) if xs else None


@dataclass(frozen=True)
class RunCost:
    """What one run of a candidate cost: the start (servers, warm-up) and one repetition of the
    workload beside its baseline; a run of `repeats` is priced at `start_s + repeats * repetition_s`."""

    start_s: float
    repetition_s: float

    def seconds(self, repeats: int) -> float:
        return self.start_s + repeats * self.repetition_s


def run_cost(run: BenchRun, wall_s: float) -> RunCost:
    """A run's cost from its stored requests: each (condition, repetition) slot's seconds, one
    repetition priced as `budget.round_seconds` prices a round; the rest of the wall time is the start."""
    slots: dict[tuple[int, int], float] = {}
    for r in run.requests:
        if r.total_ms is not None:
            slots[(r.condition_idx, r.repeat)] = slots.get((r.condition_idx, r.repeat), 0.0) + r.total_ms / 1000
    slot_s: dict[int, list[float]] = {}
    for (idx, _), sec in slots.items():
        slot_s.setdefault(idx, []).append(sec)
    rep = budget_mod.round_seconds(slot_s, list(slot_s))
    return RunCost(max(0.0, wall_s - sum(slots.values())), rep)


def final_seconds(cost: RunCost, min_repetitions: int) -> float:
    """The final round's share of the budget: the policy's minimum repetitions, and a tenth more
    for the noise of a shared machine (the runner starts no repetition past its budget)."""
    return 1.1 * cost.seconds(min_repetitions)


def bench_drafts(
    reg: Registry,
    report: DraftReport,
    plan: BenchPlan,
    say: Callable[[str], None],
    observer: Observer | None = None,
) -> BenchOutcome:
    """Successive halving over the top `plan.n` measurable candidates (module docstring); each
    run reports its progress through `observer` (default: silently)."""
    from specreg.audit.deploy import plan_deploy
    from specreg.audit.fleet import audit_by_hardware
    from specreg.benchmark.run.runner import Runner
    from specreg.schemas.bench_settings import BenchSettings

    if plan.tune and plan.budget_s is None:
        raise UsageError("--tune needs --budget (it measures until the best draft length is decided)")
    out = BenchOutcome()
    chosen: list[DraftRow] = []
    for row in report.rows:
        if len(chosen) >= plan.n:
            break
        if not row.local:
            out.left_out.append(f"{label(row)}: headers only here; measure it after `specreg fetch {row.repo} "
                                f"{(row.draft or '').split('/', 2)[-1]}`")  # fmt: skip
            continue
        chosen.append(row)
    if not chosen:
        out.why_not = "no candidate on this machine to measure"
        return out
    pair_of: dict[str, int] = {}
    for row in list(chosen):
        try:
            pair_of[label(row)] = _admit(reg, report, row)
        except SpecregError as exc:
            out.left_out.append(exc.message)
            chosen.remove(row)
    started = time.monotonic()

    def left() -> float | None:
        return None if plan.budget_s is None else plan.budget_s - (time.monotonic() - started)

    def run(row: DraftRow, repeat: int, budget: float | None, tune: bool = False) -> float | None:
        opts = BenchSettings(
            methods=[BASELINE, row.method], workload=plan.workload, repeat=repeat, budget_s=budget, tune=tune,
            server=str(plan.server) if plan.server else None,
        )  # fmt: skip
        runner = Runner(reg, opts, observer)
        pair = reg.get_pair(pair_of[label(row)])
        t0 = time.monotonic()
        try:
            result = runner.bench_pair(pair)
        except SpecregError as exc:
            say(f"{label(row)}: {exc.message}")
            return None
        cost[label(row)] = run_cost(result, time.monotonic() - t0)
        x = _speedup(result, row.method)
        say(f"{label(row)}: run {result.info.run_id}, " + (f"{x:.2f}x" if x is not None else "no speed-up measured"))
        current.run_ids.append(result.info.run_id)
        return x

    min_reps = plan.policy.evidence.min_repetitions
    cost: dict[str, RunCost] = {}
    field = list(chosen)
    repeat, round_no = 1, 0
    while field:
        round_no += 1
        current = HalvingRound(round=round_no)
        last = len(field) == 1
        rem = left()
        if rem is not None and round_no > 1:
            final = max(final_seconds(cost[label(r)], min_reps) for r in field if label(r) in cost)
            lead = final_seconds(cost[label(field[0])], min_reps)
            if rem < lead:
                spent = (plan.budget_s or 0.0) - rem
                out.why_not = (
                    f"budget: {budget_mod.minutes(max(rem, 0.0))} left, the final round of {label(field[0])} "
                    f"(the policy's {min_reps} repetitions) takes about {budget_mod.minutes(lead)}: stopped "
                    f"before it; --budget {budget_mod.budget_for(spent, lead)} would decide it"
                )
                say(out.why_not)
                break
            middle = sum(cost[label(r)].seconds(repeat) for r in field if label(r) in cost)
            if not last and rem - middle < final:
                say(f"round {round_no} skipped: it takes about {budget_mod.minutes(middle)}, and "
                    f"{budget_mod.minutes(final)} of the {budget_mod.minutes(rem)} left is kept for the "
                    "final round")  # fmt: skip
                field, last = field[:1], True
        if rem is not None and rem <= 0:
            out.why_not = f"the budget was spent after round {round_no - 1}"
            break
        if last:
            per_run = rem
        elif rem is None:
            per_run = None
        elif round_no == 1:
            per_run = None  # one repetition each: what the plan prices the later rounds by
        else:
            kept = max(final_seconds(cost[label(r)], min_reps) for r in field if label(r) in cost)
            per_run = (rem - kept) / len(field)
        say(f"round {round_no}: {len(field)} candidate(s)" + (f", {per_run:.0f} s each at most" if per_run else ""))
        for row in field:
            if last:
                tune = plan.tune and row.method in MODEL_DRAFTED
                current.measured[label(row)] = run(row, max(repeat, min_reps), per_run, tune)
            else:
                current.measured[label(row)] = run(row, repeat, per_run)
        ok = [r for r in field if current.measured.get(label(r)) is not None]
        ok.sort(key=lambda r: -(current.measured[label(r)] or 0.0))
        if last:
            current.kept = [label(r) for r in ok]
            out.rounds.append(current)
            field = ok
            break
        field = ok[: max(1, math.ceil(len(field) / 2))]  # a failed run is a loser, not a smaller field
        current.kept = [label(r) for r in field]
        out.rounds.append(current)
        repeat *= 2
    if out.why_not is not None:  # stopped by the budget before the final round: no winner to audit
        return out
    if not field:
        out.why_not = "no candidate measured a speed-up (every run failed)"
        return out
    winner = field[0]
    out.winner, out.pair_id = label(winner), pair_of[label(winner)]
    audit = audit_by_hardware(reg, plan.policy, plan.policy_source, pair_ids=[out.pair_id], rehash=False, spread=False)
    pa = next((p for p in audit.pairs if p.pair_id == out.pair_id), None)
    failed = [g for g in (pa.gates if pa else []) if not g.passed]
    ev = next((g for g in (pa.gates if pa else []) if g.gate == "evidence"), None)
    if ev is not None:  # how the winner's run met (or missed) the policy's minimum repetitions
        reps = ev.evidence.get("repetitions")
        out.repetitions = reps if isinstance(reps, int) else None
        met = ev.evidence.get("minimum_met_by")
        out.minimum_met_by = str(met) if met else None
    out.verdict = "passes every gate" if pa is not None and pa.passed else (
        "fails " + "; ".join(f"{g.gate}: {g.message}" for g in failed) if failed else "not audited")  # fmt: skip
    try:
        cmd = plan_deploy(audit, out.pair_id)
    except SpecregError as exc:
        out.why_not = exc.message
        return out
    if cmd.deployable and cmd.argv:
        out.deploy_command = shlex.join(cmd.argv)
    else:
        gates = "; ".join(f"{g.gate}: {g.message}" for g in cmd.failed_gates) or "the audit gives no command"
        out.why_not = f"{out.winner} measured best but is not deployable: {gates}"
    return out
