"""`specreg drafts --bench N --budget D`: the top N candidates measured head to head, the best audited.

A prediction ranks; only a measurement decides. Successive halving spends the budget where the
answer is still open: round 1 runs every candidate once (one repetition of the workload beside
its baseline), each later round keeps the better half by measured speed-up and runs the
survivors at twice the repetitions, and the last survivor runs once more with the repetitions
the policy's evidence gate wants (with `--tune`, tuning its draft length) until decided or the
budget ends. Every run goes through `benchmark.runner.Runner.bench_pair` - the entry point
`bench admitted` uses - so it is stored, keyed and budgeted exactly as `bench admitted` stores
it; the winner is then audited (`audit_by_hardware`) and `plan_deploy` gives its command or the
gates that refuse it.

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

from specreg.errors import SpecregError, UsageError
from specreg.schemas.bench_settings import DEFAULT_REPEAT
from specreg.schemas.drafts import BenchOutcome, DraftReport, DraftRow, HalvingRound
from specreg.schemas.methods import BASELINE, MODEL_DRAFTED

if TYPE_CHECKING:
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


def bench_drafts(reg: Registry, report: DraftReport, plan: BenchPlan, say: Callable[[str], None]) -> BenchOutcome:
    """Successive halving over the top `plan.n` measurable candidates (module docstring)."""
    from specreg.audit.deploy import plan_deploy
    from specreg.audit.fleet import audit_by_hardware
    from specreg.benchmark.runner import Runner
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
        runner = Runner(reg, opts)
        pair = reg.get_pair(pair_of[label(row)])
        try:
            result = runner.bench_pair(pair)
        except SpecregError as exc:
            say(f"{label(row)}: {exc.message}")
            return None
        x = _speedup(result, row.method)
        say(f"{label(row)}: run {result.info.run_id}, " + (f"{x:.2f}x" if x is not None else "no speed-up measured"))
        current.run_ids.append(result.info.run_id)
        return x

    field = list(chosen)
    repeat, round_no = 1, 0
    while field:
        round_no += 1
        current = HalvingRound(round=round_no)
        last = len(field) == 1
        rem = left()
        if rem is not None and rem <= 0:
            out.why_not = f"the budget was spent after round {round_no - 1}"
            break
        rounds_to_go = max(1, math.ceil(math.log2(len(field))) + 1)
        per_run = None if rem is None else rem / (len(field) * rounds_to_go) if not last else rem
        say(f"round {round_no}: {len(field)} candidate(s)" + (f", {per_run:.0f} s each at most" if per_run else ""))
        for row in field:
            if last:
                tune = plan.tune and row.method in MODEL_DRAFTED
                current.measured[label(row)] = run(row, max(repeat, DEFAULT_REPEAT), per_run, tune)
            else:
                current.measured[label(row)] = run(row, repeat, per_run if round_no > 1 else None)
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
    if not field:
        out.why_not = out.why_not or "no candidate measured a speed-up (every run failed)"
        return out
    winner = field[0]
    out.winner, out.pair_id = label(winner), pair_of[label(winner)]
    audit = audit_by_hardware(reg, plan.policy, plan.policy_source, pair_ids=[out.pair_id], rehash=False, spread=False)
    pa = next((p for p in audit.pairs if p.pair_id == out.pair_id), None)
    failed = [g for g in (pa.gates if pa else []) if not g.passed]
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
