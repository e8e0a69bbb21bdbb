"""The audit's gates as pure functions: records and run digests in, a GateResult out.

No I/O here: the audit gathers the facts (re-hashes, re-checks, runs: facts.py) and these functions
judge them against the policy, so each gate can be tested on its own and reads the same way
in the report. A gate that lacks the numbers it needs fails; it never guesses a pass.

One module, though long: every gate is one short function with its helpers beside it, and a
reader checking the gates against the policy page (docs/policy.md) reads them in one place, in
the order the audit applies them. What the gates need is gathered in facts.py.
"""

from __future__ import annotations

from specreg.benchmark.store.statistics import interval_text
from specreg.decision.bar import fewest_pairs
from specreg.decision.budget import undecided_text
from specreg.registry.licence import normalise
from specreg.schemas.audit import (
    ConditionDigest,
    GateResult,
    LicencePolicy,
    MemoryPolicy,
    Policy,
    RunDigest,
    SpeedPolicy,
    StratumRow,
    TemplatePolicy,
)
from specreg.schemas.bench import ALL_STRATA
from specreg.schemas.checks import CheckResult
from specreg.schemas.registry import ArtifactRecord
from specreg.text import plural
from specreg.units import apart_text

_UNKNOWN = {None, "unknown", "none", "noassertion"}


def integrity_gate(
    checks: list[tuple[str, str, bool, str | None]],
    rehash: bool,
    signers: dict[str, str | None] | None = None,
    require_signature: bool = False,
    elsewhere: list[tuple[str, str, str]] | None = None,
) -> GateResult:
    """checks: (role, sha256, ok, problem) per artifact, from Registry.verify_artifact; `signers`:
    role -> who signed that file (a verified OpenSSF model signature), which `require_signature`
    (policy `[trust] require_model_signature`) wants for every file. `elsewhere`: (role, sha256,
    signer) of files not on this machine whose pair stands on a trusted signer's verdict: nothing
    here re-hashed them, so the gate says whose SHA-256 it rests on instead of claiming a match."""
    signers = signers or {}
    elsewhere = elsewhere or []
    bad = [f"{role} {sha[:12]}: {problem or 'changed'}" for role, sha, ok, problem in checks if not ok]
    if require_signature:
        bad += [
            f"{role} {sha[:12]}: no verified model signature (register --verify-signature PEM)"
            for role, sha in [(r, s) for r, s, _, _ in checks] + [(r, s) for r, s, _ in elsewhere]
            if not signers.get(role)
        ]
    how = "full re-hash" if rehash else "stat cache, --trust-stat-cache (re-hash when the stat changed)"
    artifacts: dict[str, dict[str, object]] = {
        role: {"sha256": sha, "ok": ok, "problem": problem, "signed_by": signers.get(role)}
        for role, sha, ok, problem in checks
    }
    for role, sha, who in elsewhere:
        artifacts[role] = {"sha256": sha, "ok": None, "problem": "not on this machine", "signed_by": signers.get(role)}
        artifacts[role]["vouched_by"] = who
    evidence = {"method": how, "artifacts": artifacts}
    if bad:
        return GateResult(gate="integrity", passed=False, message="; ".join(bad), evidence=evidence)
    signed = [f"{role} signed by {signers[role]}" for role in artifacts if signers.get(role)]
    parts = []
    if checks:
        parts.append(
            f"{plural(len(checks), 'artifact')} {'matches its' if len(checks) == 1 else 'match their'} "
            f"registered SHA-256 ({how})"
        )
    for role, sha, who in elsewhere:
        parts.append(f"{role} not on this machine, not re-hashed here: sha256 {sha} as {who} signed it")
    return GateResult(gate="integrity", passed=True, message="; ".join(parts + signed), evidence=evidence)


def verdict_gate(
    admitted: bool, rule_set: str, current: str, rechecked_from: str | None, errors: list[str]
) -> GateResult:
    """Admitted under the current rule set; `rechecked_from` names the stale rule set re-checked."""
    evidence = {"rule_set": rule_set, "current_rule_set": current, "rechecked_from": rechecked_from}
    again = f" (re-checked: verdict was under {rechecked_from})" if rechecked_from else ""
    if rule_set != current:
        return GateResult(
            gate="verdict",
            passed=False,
            evidence=evidence,
            message=f"verdict is under rule set {rule_set}, current is {current}",
        )
    if not admitted:
        why = "; ".join(errors) if errors else "rejected"
        return GateResult(
            gate="verdict",
            passed=False,
            evidence=evidence | {"errors": errors},
            message=f"rejected under {current}{again}: {why}",
        )
    return GateResult(gate="verdict", passed=True, evidence=evidence, message=f"admitted under {current}{again}")


def template_gate(checks: list[CheckResult] | None, source: str, policy: TemplatePolicy) -> GateResult:
    """The target's `template.*` results: any with a severity the policy blocks fails the gate.

    `checks` None: no scan could be had (`source` says why); the gate fails rather than guess.
    """
    if checks is None:
        return GateResult(gate="template", passed=False, message=f"no chat-template scan: {source}")
    found = [c for c in checks if c.code.startswith("template.")]
    blocking = [c for c in found if c.severity in policy.block]
    evidence = {
        "source": source,
        "block": list(policy.block),
        "results": [{"code": c.code, "severity": c.severity, "message": c.message} for c in found],
    }
    if not found:
        return GateResult(gate="template", passed=False, message=f"no template.* result ({source})", evidence=evidence)
    if blocking:
        shown = "; ".join(f"{c.code} ({c.severity}): {c.message}" for c in blocking[:3])
        more = f" and {len(blocking) - 3} more" if len(blocking) > 3 else ""
        return GateResult(gate="template", passed=False, message=shown + more, evidence=evidence)
    seen = ", ".join(sorted({f"{c.code} {c.severity}" for c in found}))
    return GateResult(
        gate="template", passed=True, message=f"no blocking finding ({seen}; {source})", evidence=evidence
    )


def licence_gate(artifacts: list[tuple[str, ArtifactRecord]], policy: LicencePolicy) -> GateResult:
    """Both artifacts: a licence record, allowed (allow/deny), no conflict, pinned revision."""
    allow = {normalise(x) for x in policy.allow}
    deny = {normalise(x) for x in policy.deny}
    problems: list[str] = []
    evidence: dict[str, object] = {}
    for role, rec in artifacts:
        lic = rec.licence
        value = normalise(lic.effective)
        evidence[role] = {
            "licence": lic.effective,
            "source": lic.effective_source,
            "conflict": lic.conflict,
            "sources": {s.source: s.value for s in lic.sources},
            "repo": rec.provenance.repo,
            "revision": rec.provenance.revision,
            "pin": _pin(rec),
        }
        if value in _UNKNOWN:
            if policy.unknown == "fail":
                problems.append(f"{role}: no licence recorded (policy: unknown fails)")
        elif value in deny:
            problems.append(f"{role}: licence {lic.effective} is on the deny list")
        elif allow and value not in allow:
            problems.append(f"{role}: licence {lic.effective} is not on the allow list")
        if lic.conflict and policy.conflict == "fail":
            said = ", ".join(f"{s.source}={s.value}" for s in lic.sources if s.value)
            problems.append(f"{role}: licence sources disagree ({said})")
        if policy.require_revision and rec.provenance.repo and not rec.provenance.revision:
            problems.append(f"{role}: from {rec.provenance.repo} but no pinned revision in its provenance")
    if problems:
        return GateResult(gate="licence", passed=False, message="; ".join(problems), evidence=evidence)
    lics = ", ".join(f"{role} {rec.licence.effective or 'unknown'} ({_pin(rec)})" for role, rec in artifacts)
    return GateResult(gate="licence", passed=True, message=f"allowed: {lics}", evidence=evidence)


def _pin(rec: ArtifactRecord) -> str:
    """What pins these bytes for deployment: a hub file by its repo revision, a local file (no hub
    repository in its provenance) by the SHA-256 the registry holds, which names its bytes exactly."""
    p = rec.provenance
    if p.repo and p.revision:
        return f"pinned by {p.repo}@{p.revision[:12]}"
    return f"pinned by sha256 {rec.sha256[:12]}"


def evidence_gate(
    run: RunDigest | None, cond: ConditionDigest | None, policy: Policy, concurrency: int | None, how: str
) -> GateResult:
    """A finished run whose baseline and pair condition both completed, at the policy's settings.

    An `incomplete` run (some other condition failed) still counts for the conditions that ran.
    """
    from specreg.servers.identity import runtime_text  # the runtime as people read it, on one line

    if run is None:
        return GateResult(gate="evidence", passed=False, message=f"no usable benchmark run ({how})")
    evidence = {
        "run_id": run.run_id,
        "status": run.status,
        "runtime": run.runtime,
        "hardware": run.hardware,
        "selected": how,
        "concurrency": concurrency,
    }
    problems: list[str] = []
    base = run.baseline(concurrency)
    if run.status not in ("complete", "incomplete"):
        problems.append(f"run {run.run_id} {run.status}")
    if cond is None:
        problems.append(f"run {run.run_id} has no condition for this pair")
    elif cond.status != "ok":
        problems.append(f"condition {cond.label} {cond.status}: {cond.failure or 'no reason recorded'}")
    if base is None:
        at = f" at concurrency {concurrency}" if concurrency is not None else ""
        problems.append(f"run {run.run_id} has no --spec-type none baseline{at}")
    elif base.status != "ok":
        problems.append(f"baseline {base.status}: {base.failure or 'no reason recorded'}")
    if concurrency is None:
        problems.append(f"run {run.run_id} measured no concurrency the policy accepts")
    if cond is not None and not problems:
        rows = [r for r in run.rows(cond.label) if r.concurrency == concurrency]
        reps = min((r.n_repetitions for r in rows), default=0)
        evidence["repetitions"] = reps
        decided = _decided(rows, policy.speed.min_speedup)
        if decided:
            evidence["decided"] = decided
        if not rows:
            problems.append(f"condition {cond.label} has no measurements at concurrency {concurrency}")
        elif reps < policy.evidence.min_repetitions and not decided:
            whole = next((r for r in rows if r.stratum == ALL_STRATA), None)
            more = undecided_text(reps, whole.decision_more_rounds, whole.decision_budget) if whole else "undecided"
            problems.append(
                f"{plural(reps, 'repetition')} < policy minimum {policy.evidence.min_repetitions}, "
                f"and the anytime-valid decision is not made: {more}"
            )
        elif reps < policy.evidence.min_repetitions:
            evidence["minimum_met_by"] = f"the anytime-valid decision over {plural(reps, 'round')} ({decided})"
    if problems:
        return GateResult(gate="evidence", passed=False, message="; ".join(problems), evidence=evidence)
    met = f"; {evidence['minimum_met_by']}" if "minimum_met_by" in evidence else ""
    return GateResult(
        gate="evidence",
        passed=True,
        evidence=evidence,
        message=f"run {run.run_id} ({how}; runtime {runtime_text(run.runtime)}; hardware {run.hardware}){met}",
    )


def _decided(rows: list[StratumRow], min_speedup: float) -> str | None:
    """The anytime-valid decision of a condition's `all` row against the policy's minimum speed-up,
    when it is decided ("faster" or "not faster"): it holds however few rounds it rests on, so it
    meets the policy's minimum repetitions (which guards fixed-size intervals from one noisy run)."""
    row = next((r for r in rows if r.stratum == ALL_STRATA), None)
    ci = row.decision_ci if row is not None else None
    if ci is None:
        return None
    if ci[0] >= min_speedup:
        low, bar = apart_text(ci[0], min_speedup)
        return f"faster: anytime-valid interval [{low}, {ci[1]:.2f}] >= {bar}"
    if ci[1] < min_speedup:
        high, bar = apart_text(ci[1], min_speedup)
        return f"not faster: anytime-valid interval [{ci[0]:.2f}, {high}] < {bar}"
    return None


def other_rules_gate(
    evidence: GateResult, verdict_rule_set: str, needed: str, runtime: str | None, hint: str
) -> GateResult:
    """The evidence gate, failed: the verdict was judged under other rules than the run's runtime
    needs, so what was measured is not what was admitted (`hint`: the command that re-judges)."""
    why = (
        f"the verdict was judged under {verdict_rule_set}, but the run's runtime ({runtime or 'unknown'}) "
        f"needs {needed}; see which verdicts change: {hint}, then check the pair again (specreg check pair)"
    )
    return GateResult(
        gate="evidence",
        passed=False,
        message=why if evidence.passed else f"{evidence.message}; {why}",
        evidence=evidence.evidence | {"verdict_rule_set": verdict_rule_set, "runtime_rule_set": needed},
        strata=evidence.strata,
    )


def _pairs(run: RunDigest, cond: ConditionDigest, conc: int) -> list[tuple[StratumRow, StratumRow | None]]:
    base = run.baseline(conc)
    base_rows = {r.stratum: r for r in run.rows(base.label) if r.concurrency == conc} if base else {}
    # the `all` row aggregates the strata: judging it again would double-count every request
    return [
        (r, base_rows.get(r.stratum)) for r in run.rows(cond.label) if r.concurrency == conc and r.stratum != ALL_STRATA
    ]


def _required(strata: dict[str, bool], wanted: list[str]) -> tuple[bool, list[str]]:
    """All required strata passed (empty `wanted`: every measured one); unmeasured ones fail."""
    names = wanted or sorted(strata)
    missing = [s for s in names if s not in strata]
    return bool(names) and not missing and all(strata[s] for s in names), missing


def equivalence_gate(run: RunDigest, cond: ConditionDigest, policy: Policy, conc: int) -> GateResult:
    """Greedy output equal to the baseline (or `expect` passed) on every required prompt."""
    q = policy.quality
    strata: dict[str, bool] = {}
    notes: list[str] = []
    counts: dict[str, str] = {}
    pairs = _pairs(run, cond, conc)
    triaged: dict[str, dict[str, str]] = {}
    reported: list[str] = []
    for row, _ in pairs:
        changed = [p for p in row.failed_prompts if not q.required_prompts or p in q.required_prompts]
        ties = [p for p in changed if (t := row.triage.get(p)) is not None and t.kind(q.near_tie_margin) == "near tie"]
        failed = [p for p in changed if p not in ties] if q.near_ties == "report" else changed
        ok = not q.require_equivalence or (not failed and row.compared > 0)
        strata[row.stratum] = ok
        text_only = f" ({row.compared_text_only} by text only)" if row.compared_text_only else ""
        counts[row.stratum] = f"{row.equivalent}/{row.compared}{text_only}"
        triaged[row.stratum] = {p: _triage_text(row, p, q.near_tie_margin) for p in changed}
        if failed:
            why = "; ".join(f"{p}: {triaged[row.stratum][p]}" for p in failed[:3])
            notes.append(f"{row.stratum}: output changed on {', '.join(failed[:5])} ({why})")
        elif row.compared == 0 and q.require_equivalence:
            notes.append(f"{row.stratum}: no output could be compared")
        if ties and q.near_ties == "report":
            reported += [f"{row.stratum}: {p}: {triaged[row.stratum][p]}" for p in ties[:3]]
    measured = {p for row, _ in pairs for p in row.prompts} if q.required_prompts else set()
    absent = [p for p in q.required_prompts if p not in measured]
    if absent and q.require_equivalence:
        notes.append(f"required prompt(s) not measured: {', '.join(absent)}")
    passed = bool(strata) and all(strata.values()) and not (absent and q.require_equivalence)
    if not strata:
        notes.append("no measurements")
    msg = (
        "; ".join(notes)
        if notes
        else (
            "equivalence not required by policy"
            if not q.require_equivalence
            else "outputs equivalent: " + ", ".join(f"{s} {c}" for s, c in counts.items())
        )
    )
    if reported:  # near ties the policy reports instead of failing: named, whatever the outcome
        msg += f'; near ties reported, not failed (quality.near_ties = "report"): {"; ".join(reported)}'
    return GateResult(
        gate="equivalence",
        passed=passed,
        message=msg,
        strata=strata,
        evidence={
            "equivalent/compared": counts,
            "required_prompts": q.required_prompts,
            "near_ties": q.near_ties,
            "near_tie_margin": q.near_tie_margin,
            "triage": {st: t for st, t in triaged.items() if t},
        },
    )


def _triage_text(row: StratumRow, prompt: str, margin: float) -> str:
    """Why one prompt's output changed, as its triage judges it against `margin`."""
    t = row.triage.get(prompt)
    return t.text(margin) if t is not None else "not triaged (no baseline probabilities on record)"


def _not_decided_faster(row: StratumRow, ci: tuple[float, float], bar: float) -> str:
    """Why a stratum of a run measured until decided is not decided faster than the policy's
    bar: decided not faster (its interval below the bar), or undecided - said as how much it
    rests on and what would decide it, not as an interval that reads like a verdict."""
    if ci[1] < bar:
        high, bar_text = apart_text(ci[1], bar)
        return f"not faster: anytime-valid interval [{ci[0]:.2f}, {high}] < {bar_text}"
    same_bar = row.decision_min_speedup is not None and abs(row.decision_min_speedup - bar) < 1e-9
    if row.decision == "undecided" or row.decision is None:
        more, budget = (row.decision_more_rounds, row.decision_budget) if same_bar else (None, None)
        rounds = row.n_repetitions or (1 if row.n_paired else 0)  # a part of a round is a round begun
        fewest = fewest_pairs()
        thin = f" ({plural(row.n_paired, 'pair')} of its own; a decision takes {fewest} or more)" if (
            row.n_paired < fewest
        ) else ""  # fmt: skip
        return f"{undecided_text(rounds, more, budget)} against {bar:g}x{thin}"
    low, bar_text = apart_text(ci[0], bar)  # decided against another bar than the policy's
    return (
        f"{row.decision} against {row.decision_min_speedup or 0:g}x, undecided against {bar:g}x "
        f"(anytime-valid interval [{low}, {ci[1]:.2f}])"
    )


def _speed_problems(row: StratumRow, base: StratumRow, sp: SpeedPolicy, until_decided: bool) -> list[str]:
    """Why one stratum fails the speed gate (empty: it passes). A run measured until decided
    (`--budget`) is judged on its anytime-valid interval, the only one valid after a stop that
    depended on the data; a run of a fixed number of repetitions on its bootstrap interval."""
    why: list[str] = []
    if row.speedup is None:
        why.append(f"no speed-up ({row.speedup_note or 'not measured'})")
    elif until_decided:
        ci = row.decision_ci
        if ci is None:
            why.append(f"speed-up {row.speedup:.2f}x has no anytime-valid interval (measured until decided)")
        elif ci[0] < sp.min_speedup:
            why.append(_not_decided_faster(row, ci, sp.min_speedup))
    elif row.speedup_ci95 is None:
        why.append(f"speed-up {row.speedup:.2f}x has no interval ({row.speedup_note or 'too few requests'})")
    elif row.speedup_ci95[0] < sp.min_speedup:
        low, bar = apart_text(row.speedup_ci95[0], sp.min_speedup)
        why.append(f"speed-up {interval_text(row.speedup, row.speedup_ci95)}: low end {low} < {bar}")
    if row.drafted == 0 or row.accepted == 0:
        why.append("0 draft tokens accepted: speculation cannot have made it faster")
    if row.unexplained:
        why.append(f"unexplained: {row.unexplained_reason}")
    limit = None if base.p95_total_ms is None else base.p95_total_ms * (1 + sp.p95_tolerance_pct / 100)
    if row.p95_total_ms is None or limit is None:
        why.append("p95 not measured")
    elif row.p95_total_ms > limit:
        why.append(
            f"p95 {row.p95_total_ms:.1f} ms > limit {limit:.1f} ms "
            f"(baseline p95 {base.p95_total_ms:.1f} ms + {sp.p95_tolerance_pct:g}%)"
        )
    if row.errors > base.errors + sp.max_extra_errors:
        why.append(f"errors {row.errors} vs baseline {base.errors}")
    if row.timeouts > base.timeouts + sp.max_extra_timeouts:
        why.append(f"timeouts {row.timeouts} vs baseline {base.timeouts}")
    return why


def speed_gate(run: RunDigest, cond: ConditionDigest, policy: Policy, conc: int) -> GateResult:
    """Per required stratum: the speed-up's 95% interval starts at or above the minimum, acceptance
    explains it (never with 0 accepted tokens), p95, errors and timeouts within tolerance."""
    sp = policy.speed
    strata: dict[str, bool] = {}
    notes: list[str] = []
    evidence: dict[str, object] = {}
    rows: dict[str, StratumRow] = {}
    for row, base in _pairs(run, cond, conc):
        why = ["no baseline measurement"] if base is None else _speed_problems(row, base, sp, run.until_decided)
        strata[row.stratum], rows[row.stratum] = not why, row
        evidence[row.stratum] = {
            "speedup": row.speedup,
            "speedup_ci95": list(row.speedup_ci95) if row.speedup_ci95 else None,
            "difference": row.difference,
            "n_paired": row.n_paired,
            "decision": row.decision,
            "decision_ci": list(row.decision_ci) if row.decision_ci else None,
            "decision_min_speedup": row.decision_min_speedup,
            "judged_on": "anytime-valid interval" if run.until_decided else "bootstrap interval",
            "expected_accepted_length": row.expected_accepted_length,
            "predicted_speedup": row.predicted_speedup,
            "unexplained": row.unexplained,
            "p5": row.speedup_p5,
            "p95": row.speedup_p95,
            "p95_ms": row.p95_total_ms,
            "baseline_p95_ms": base.p95_total_ms if base else None,
            "errors": row.errors,
            "timeouts": row.timeouts,
            "problems": why,  # why this stratum fails (empty: it passes), for the decisions' reasons
        }
        if why:
            notes.append(f"{row.stratum}: {', '.join(why)}")
    passed, missing = _required(strata, sp.required_strata)
    if missing:
        notes.append(f"required stratum not measured: {', '.join(missing)}")
    if not strata:
        notes.append("no measurements")
    if passed:
        names = sp.required_strata or sorted(strata)
        if run.until_decided:
            shown = ", ".join(f"{s} {interval_text(rows[s].speedup, rows[s].decision_ci)}" for s in names)
            msg = f"anytime-valid 98% interval >= {sp.min_speedup} at concurrency {conc} (measured until decided)"
        else:
            shown = ", ".join(f"{s} {interval_text(rows[s].speedup, rows[s].speedup_ci95)}" for s in names)
            msg = f"95% interval >= {sp.min_speedup} at concurrency {conc}"
        msg += f": {shown}"
        if notes:
            msg += f" (not required: {'; '.join(notes)})"
    else:
        msg = "; ".join(notes)
        whole = _decided([r for r in run.rows(cond.label) if r.concurrency == conc], sp.min_speedup)
        if run.until_decided and whole is not None:
            # the decision over the whole workload, before the strata that on their own are too
            # few pairs to decide (SmolLM2: every stratum undecided, the whole 0.79x not faster);
            # the gate is per stratum (each is deployed on its own), each stratum standing alone
            msg = f"over every stratum together {whole}; per stratum: {msg}"
    return GateResult(gate="speed", passed=passed, message=msg, strata=strata, evidence=evidence)


def _within(extra: float | None, total: float | None, abs_mib: float | None, pct: float | None, what: str) -> list[str]:
    if abs_mib is None and pct is None:
        return []
    if extra is None:
        return [f"extra {what} not measured"]
    out = []
    if abs_mib is not None and extra > abs_mib:
        out.append(f"extra {what} {extra:.0f} MiB > {abs_mib:.0f} MiB")
    if pct is not None:
        if total is None:
            out.append(f"total {what} unknown, cannot apply {pct}%")
        elif extra > total * pct / 100:
            out.append(f"extra {what} {extra:.0f} MiB > {pct}% of {total:.0f} MiB")
    return out


def memory_gate(run: RunDigest, cond: ConditionDigest, policy: MemoryPolicy) -> GateResult:
    """Extra peak RAM/VRAM over the baseline within the policy's absolute and % margins. The RAM of
    a condition and of its baseline is the larger of the measured peak and the prediction (a
    short run may not reach what its workload grows to); a measured peak over its prediction by
    more than the prediction's margin is flagged in the message."""
    from specreg.validators.memory_budget import exceeded_text, prediction_exceeded

    base = run.baseline(cond.concurrency)
    ram = _larger(cond.peak_ram_mib, cond.predicted_ram_mib)
    extra_ram = cond.extra_ram_mib
    if base is not None and base is not cond and ram is not None:
        base_ram = _larger(base.peak_ram_mib, base.predicted_ram_mib)
        extra_ram = None if base_ram is None else ram - base_ram
    over = prediction_exceeded(cond.peak_ram_mib, cond.predicted_ram_mib)
    evidence = {
        "extra_ram_mib": extra_ram,
        "extra_vram_mib": cond.extra_vram_mib,
        "peak_ram_mib": cond.peak_ram_mib,
        "predicted_ram_mib": cond.predicted_ram_mib,
        "gated_ram_mib": ram,
        "prediction_exceeded": over,
        "peak_vram_mib": cond.peak_vram_mib,
        "total_ram_mib": run.total_ram_mib,
        "total_vram_mib": run.total_vram_mib,
    }
    flag = ""
    if over is not None and cond.peak_ram_mib and cond.predicted_ram_mib:
        flag = "; " + exceeded_text("RAM", cond.peak_ram_mib, cond.predicted_ram_mib, over)
    problems = _within(extra_ram, run.total_ram_mib, policy.max_extra_ram_mib, policy.max_extra_ram_pct, "RAM")
    gpu = run.total_vram_mib is not None or cond.peak_vram_mib is not None
    if gpu:
        problems += _within(
            cond.extra_vram_mib, run.total_vram_mib, policy.max_extra_vram_mib, policy.max_extra_vram_pct, "VRAM"
        )
    if problems:
        return GateResult(gate="memory", passed=False, message="; ".join(problems) + flag, evidence=evidence)
    ram_text = "n/a" if extra_ram is None else f"{extra_ram:+.0f} MiB"
    vram = f"{cond.extra_vram_mib:+.0f} MiB" if gpu and cond.extra_vram_mib is not None else "no GPU recorded"
    return GateResult(
        gate="memory",
        passed=True,
        evidence=evidence,
        message=f"extra RAM {ram_text}, VRAM {vram}: within margin{flag}",
    )


def _larger(measured: float | None, predicted: float | None) -> float | None:
    known = [x for x in (measured, predicted) if x is not None]
    return max(known) if known else None


def rollback_gate(
    run: RunDigest | None, target_paths: list[str], concurrency: int | None = None, measured_by: str | None = None
) -> tuple[GateResult, list[str] | None]:
    """The exact baseline command (`--spec-type none`, the registered target file) is on record.
    `measured_by`: the trusted signer whose machine holds the target (not on this one): its run
    loaded the file by that machine's path, and the run's target SHA-256 is the pair's."""
    base = run.rollback(concurrency) if run else None
    if base is None or not base.command:
        return GateResult(gate="rollback", passed=False, message="no baseline server command line recorded"), None
    cmd = base.command
    problems = []
    if not any(a == "--spec-type" and i + 1 < len(cmd) and cmd[i + 1] == "none" for i, a in enumerate(cmd)):
        problems.append("baseline command lacks --spec-type none")
    away = measured_by is not None and not target_paths
    if not away and not any(p in cmd for p in target_paths):
        problems.append("baseline command does not load a registered path of the target")
    evidence = {"command": cmd, "run_id": run.run_id if run else None}
    if problems:
        return GateResult(gate="rollback", passed=False, message="; ".join(problems), evidence=evidence), cmd
    pinned = f"the target as {measured_by}'s run loaded it (not on this machine)" if away else "the pinned target"
    return GateResult(
        gate="rollback",
        passed=True,
        evidence=evidence | ({"target_on": measured_by} if away else {}),
        message=f"baseline command recorded with --spec-type none and {pinned}",
    ), cmd
