"""`specreg audit`: every gate for every pair, then the per-stratum deployment decisions.

The facts (records, integrity, the evidence run, digests) are read once per audit through
`facts.Facts`; this module re-checks stale verdicts and hands the facts to the pure gates in
`gates.py`. An exception means the audit could not decide (exit 2); a failed gate is a result
(exit 1).
"""

from __future__ import annotations

from specreg.audit import gates
from specreg.audit.decisions import decide
from specreg.audit.facts import Facts, RunsFor
from specreg.audit.outcomes import judge, judge_all, pair_conditions
from specreg.audit.production_sampler import policy_sampler
from specreg.audit.trust import EvidenceTrust
from specreg.benchmark.plan.eligibility import NOT_BENCHMARKABLE, not_benchmarkable
from specreg.benchmark.store.digest import load_digests
from specreg.benchmark.store.run_index import RunHead, RunIndex, runs_for_pair
from specreg.errors import RunUnreadable, SpecregError
from specreg.registry.db import now
from specreg.registry.evidence import not_checked_here
from specreg.registry.store import Registry
from specreg.schemas.audit import (
    GATES,
    PER_STRATUM_GATES,
    AuditReport,
    ConditionDigest,
    ConditionOutcome,
    DeployCommand,
    GateResult,
    PairAudit,
    Policy,
    RunDigest,
    UncheckedCondition,
)
from specreg.schemas.bench import ALL_STRATA, RequestSettings
from specreg.schemas.methods import SELF_METHODS
from specreg.schemas.registry import PairRecord
from specreg.text import plural

_GATE_ORDER = {g: i for i, g in enumerate(GATES)}


def _recheck(reg: Registry, pair: PairRecord) -> PairRecord:
    """Check a stale pair again under the current rule set and record that verdict."""
    from specreg.sources.checking import check_and_record
    from specreg.validators.ruleset import load_rule_set

    rules = load_rule_set(pair.rule_set.rsplit("/r", 1)[0])
    done = check_and_record(reg, pair.target_sha256, pair.draft_sha256, pair.method, rule_set=rules, strict=pair.strict)
    return reg.get_pair(done.pair_id)


def _signed_verdict(facts: Facts, pair: PairRecord) -> GateResult:
    """The verdict gate of a pair not checked here: it passes on a verdict a trusted signer signed
    (audit/trust.py) under the current rule set, and says whose it is; anything else fails, naming
    the keys that signed without standing in the policy."""
    trust = facts.trust
    st = trust.standing(pair) if trust is not None else None
    if st is None:
        why = not_checked_here(pair) or "not checked on this machine"
        keys = trust.untrusted(pair) if trust is not None else []
        if keys:
            why += f"; signed only by key {', '.join(keys)}, which is not in [trust] signers"
        return GateResult(gate="verdict", passed=False, message=why, evidence={"rule_set": pair.rule_set})
    current = facts.current_rule_set(pair.rule_set) or pair.rule_set
    evidence = {
        "rule_set": pair.rule_set,
        "current_rule_set": current,
        "signed_by": list(st.signers),
        "made_on": st.verdict.host,
        "created_at": st.verdict.created_at,
        "bundle_digest": st.verdict.bundle_digest,
    }
    said = f"{st.said()} ({st.origin()})"
    if current != pair.rule_set:
        return GateResult(
            gate="verdict",
            passed=False,
            evidence=evidence,
            message=f"{said}: under rule set {pair.rule_set}, current is {current}; its files are not checked "
            "here: run `specreg check pair` on them, or import a verdict under the current rule set",
        )
    if not pair.admitted:
        errors = [f"{c.code}: {c.message}" for c in pair.checks if c.severity == "error"]
        return GateResult(gate="verdict", passed=False, evidence=evidence, message=f"{said}: {'; '.join(errors)}")
    return GateResult(gate="verdict", passed=True, evidence=evidence, message=f"{said} under {current}")


def _verdict(facts: Facts, pair: PairRecord, files_ok: bool) -> tuple[GateResult, PairRecord]:
    if not pair.checked_here:
        return _signed_verdict(facts, pair), pair
    current = facts.current_rule_set(pair.rule_set)
    if current is None:
        return gates.verdict_gate(pair.admitted, pair.rule_set, "(unknown runtime)", None, []), pair
    stale_from = None
    if current != pair.rule_set:
        if not files_ok:
            return GateResult(
                gate="verdict",
                passed=False,
                message=f"verdict is stale ({pair.rule_set}) and the files changed: cannot re-check",
            ), pair
        stale_from = pair.rule_set
        pair = _recheck(facts.reg, pair)
    elif not pair.admitted and not pair.checks:
        pair = facts.reg.get_pair(pair.id)  # list views carry no checks; fetch the reasons
    errors = [f"{c.code}: {c.message}" for c in pair.checks if c.severity == "error"]
    return gates.verdict_gate(pair.admitted, pair.rule_set, current, stale_from, errors), pair


def _template(facts: Facts, pair: PairRecord, policy: Policy) -> GateResult:
    """The verdict's template results; for a verdict older than those checks, a scan made now."""
    checks = pair.checks or facts.reg.get_pair(pair.id).checks  # a list view carries no checks
    recorded = [c for c in checks if c.code.startswith("template.")]
    if recorded:
        return gates.template_gate(recorded, "recorded with the verdict", policy.template)
    if not facts.record(pair.target_sha256).paths:
        why = "no verdict here records template checks, and the target is not on this machine to scan"
        return gates.template_gate(None, why, policy.template)
    if not facts.verify(pair.target_sha256)[0]:
        return gates.template_gate(None, "the verdict predates template checks and the target changed", policy.template)
    scan = facts.template_scan(pair.target_sha256)
    if isinstance(scan, str):
        return gates.template_gate(None, f"the verdict predates template checks; {scan}", policy.template)
    return gates.template_gate(scan, "scanned now: the verdict predates template checks", policy.template)


def _concurrency(run: RunDigest | None, policy: Policy) -> int | None:
    levels = run.concurrency_levels if run else []
    if policy.speed.concurrency is not None:
        return policy.speed.concurrency if policy.speed.concurrency in levels else None
    return levels[0] if levels else None


def _unbenchmarkable(facts: Facts, pair: PairRecord) -> str | None:
    """Why an admitted pair without any run cannot have one (vocab-only), from its checks.

    Only a draft can be vocab-only in an admitted pair: self-speculation rejects a vocab-only target.
    """
    if not pair.admitted or pair.draft_sha256 is None:
        return None
    if not pair.checks:
        pair = facts.reg.get_pair(pair.id)  # list views carry no checks
    return not_benchmarkable(pair)


def audit_pair(facts: Facts, pair: PairRecord, policy: Policy, runs_for: RunsFor) -> tuple[PairAudit, RunDigest | None]:
    """All eight gates for one pair (evidence, equivalence, speed, memory on its best condition)."""
    roles = [("target", pair.target_sha256)] + ([("draft", pair.draft_sha256)] if pair.draft_sha256 else [])
    # a pair standing on a trusted signer's verdict: its files may be on the signer's machine only
    vouched = facts.trust.standing(pair) if facts.trust is not None else None
    away = {role: vouched.by for role, sha in roles if vouched and not facts.record(sha).paths}
    checks = [(role, sha, *facts.verify(sha)) for role, sha in roles if role not in away]
    signers = {role: facts.signer(sha) for role, sha in roles}
    require_sig = policy.trust.require_model_signature
    elsewhere = [(role, sha, away[role]) for role, sha in roles if role in away]
    results = [gates.integrity_gate(checks, facts.rehash, signers, require_sig, elsewhere)]
    verdict, pair = _verdict(facts, pair, bool(checks) and all(ok for _, _, ok, _ in checks))
    results.append(verdict)
    results.append(_template(facts, pair, policy))
    licence = gates.licence_gate([(role, facts.record(sha)) for role, sha in roles], policy.licence)
    head, how = facts.evidence(pair, policy, runs_for)
    lacking = _unbenchmarkable(facts, pair) if head is None else None
    if lacking is not None:  # one reason, not every gate that needs a run failing on its own
        why = f"{NOT_BENCHMARKABLE}: {lacking}"
        results += [GateResult(gate="evidence", passed=False, message=why), licence]
        return _pair_audit(pair, results, not_benchmarkable=lacking), None
    try:
        run = facts.at_sampler(head) if head else None  # the policy's sampler only
    except RunUnreadable as exc:  # a damaged stored record: this run's one named failure, the others still judged
        why = f"no evidence: {exc.message}"
        results += [GateResult(gate="evidence", passed=False, message=exc.message)]
        results += [GateResult(gate=g, passed=False, message=why) for g in (*PER_STRATUM_GATES, "memory")]
        results.append(licence)
        return _pair_audit(pair, results, run_id=head.info.run_id if head else None), None
    if run is not None and run.target_name is None:
        run.target_name = facts.record(pair.target_sha256).name
    conc = _concurrency(run, policy)
    best, judged = judge_all(run, pair, policy, how, conc)
    if best is not None:
        results += best.results
    else:
        conds = pair_conditions(run, pair)
        evidence = gates.evidence_gate(run, conds[0] if conds else None, policy, conc, how)
        why = f"no evidence: {evidence.message}"
        results += [evidence] + [GateResult(gate=g, passed=False, message=why) for g in (*PER_STRATUM_GATES, "memory")]
    if run is not None:
        _refuse_other_rules(facts, pair, run, results)
    results.append(licence)
    measured_by = away.get("target") if run is not None and run.target_sha256 == pair.target_sha256 else None
    rollback, command = gates.rollback_gate(run, facts.record(pair.target_sha256).paths, conc, measured_by)
    request = head.manifest.request if head and head.manifest else None
    results.append(rollback)
    rid = run.run_id if run else None
    # what a team runs: llama-server's own argv (no wrapper, no benchmark port), as `specreg deploy` prints it
    extra: dict[str, object] = {
        "rollback_command": facts.server_argv(rid or "", command, request),
        "conditions": [j.outcome() for j in judged],
    }
    if best is not None:
        extra |= {"condition": best.cond.label, "concurrency": conc, "draft_n_max": best.cond.draft_n_max}
        extra["speculative_command"] = facts.server_argv(rid or "", best.cond.command, request)
        if best.whole is not None:
            extra |= {"speedup": best.whole.speedup, "speedup_ci95": best.whole.speedup_ci95}
    if vouched is not None:
        extra["signed_verdict"] = vouched.said()
    return _pair_audit(pair, results, run_id=rid, **extra), run


def _refuse_other_rules(facts: Facts, pair: PairRecord, run: RunDigest, results: list[GateResult]) -> None:
    """The evidence gate fails when the verdict was judged under other rules than the run's
    runtime needs (a pair admitted by b11434's rules, measured on the bundled b11549 server)."""
    from specreg.servers.identity import needs_other_rules, recheck_hint

    needed = facts.runtime_rules(run.runtime).rules
    if not needs_other_rules(pair.rule_set, needed):
        return
    for i, g in enumerate(results):
        if g.gate == "evidence":
            results[i] = gates.other_rules_gate(g, pair.rule_set, needed.id, run.runtime, recheck_hint(needed))


def _pair_audit(pair: PairRecord, results: list[GateResult], **extra: object) -> PairAudit:
    results.sort(key=lambda g: _GATE_ORDER[g.gate])
    return PairAudit(
        pair_id=pair.id,
        method=pair.method,
        target_sha256=pair.target_sha256,
        draft_sha256=pair.draft_sha256,
        target_name=pair.target_name,
        draft_name=pair.draft_name,
        passed=all(g.passed for g in results),
        gates=results,
        **extra,  # type: ignore[arg-type]
    )


def _judge_unchecked(facts: Facts, audits: list[PairAudit], runs: dict[str, RunDigest], policy: Policy) -> None:
    """Every condition a run measured is a candidate (the seeds: "ngram-mod for repetitive, none for
    chat"): a draft pair's run also measures the n-gram methods on its target alone, and when no
    pair of that target was checked for such a method, its conditions are judged here like the
    pair's own and carried with the `check pair` that admits them (the per-stratum decision then
    names them; deploying waits for that check, which may still refuse the method)."""
    found: dict[tuple[str, str], list[tuple[PairAudit, RunDigest, ConditionDigest]]] = {}
    for a in audits:
        run = runs.get(a.run_id or "")
        if run is None:
            continue
        for c in run.conditions:
            if c.draft_sha256 is None and c.spec_type in SELF_METHODS and c.spec_type != a.method:
                found.setdefault((a.target_sha256, c.spec_type), []).append((a, run, c))
    if not found:
        return
    checked = facts.self_checked()
    # a run's condition judged once: the draft pair and the n-gram pair of a target share their
    # run, and the outcome does not depend on the pair (`how` shows only in a passed evidence
    # gate's message, which an outcome leaves out); the pairs' entries share it, read only
    outcomes: dict[tuple[str, str], ConditionOutcome] = {}
    for (target, method), places in found.items():
        if (target, method) in checked:
            continue  # checked already: admitted, it is audited on its own; rejected, it cannot deploy
        command = ["specreg", "check", "pair", target[:12], "--method", method]
        for a, run, c in places:
            if not _may_pass_speed(run, c, policy):
                continue  # slower than the minimum in every stratum: nothing to suggest (and a fleet
                # audit judges two such conditions for every draft pair's run: 0.75 s of 4.3)
            outcome = outcomes.get((run.run_id, c.label))
            if outcome is None:
                how = f"measured in run {run.run_id} of pair {a.pair_id}"
                outcome = outcomes[run.run_id, c.label] = judge(run, c, policy, how).outcome()
            a.unchecked.append(UncheckedCondition(method=method, outcome=outcome, check_command=command))


def _may_pass_speed(run: RunDigest, cond: ConditionDigest, policy: Policy) -> bool:
    """Whether some stratum's interval reaches the policy's minimum speed-up (what the speed gate
    asks of a stratum first): a condition that cannot is never a candidate worth judging."""
    return any(
        r.speedup_ci95 is not None and r.speedup_ci95[0] >= policy.speed.min_speedup
        for r in run.rows(cond.label)
        if r.stratum != ALL_STRATA
    )


def audited_pairs(
    reg: Registry, trust: EvidenceTrust, pair_ids: list[int] | None
) -> tuple[list[PairRecord], list[str]]:
    """The pairs an audit judges, each as it stands here (audit/trust.py), and notes on the pairs
    left out. None: every pair admitted here, and every pair with no verdict of its own that a
    trusted signer's verdict admits; raises when there is none. Pairs admitted elsewhere whose
    verdicts only keys outside the policy signed are named in a note (or in the error)."""
    if pair_ids is not None:
        return [trust.as_standing(reg.get_pair(i)) for i in pair_ids], []
    pairs = reg.pairs(admitted=True, with_checks=True)  # the template gate reads the verdict's checks
    left: list[PairRecord] = []
    for pid in trust.signed_elsewhere():
        pair = reg.get_pair(pid)
        if trust.standing(pair) is not None:
            stood = trust.as_standing(pair)
            if stood.admitted:
                pairs.append(stood)
        elif pair.elsewhere is not None and pair.elsewhere.admitted and trust.untrusted(pair):
            left.append(pair)
    pairs.sort(key=lambda p: p.id)
    keys = sorted({k for p in left for k in trust.untrusted(p)})
    unknown = f"signed only by key {', '.join(keys)}, which is not in [trust] signers"
    if not pairs:
        why = f": {plural(len(left), 'pair')} admitted elsewhere, {unknown}" if left else ""
        raise SpecregError(
            "no admitted pairs to audit" + why,
            hint="check pairs first: specreg check pair TARGET DRAFT; a verdict imported from another machine "
            "stands here when a signer in the policy's [trust] signers signed it (docs/security.md)",
        )
    notes = [f"pair {p.id} ({p.method}), admitted elsewhere, is not audited: {unknown}" for p in left]
    return pairs, notes


def run_audit(
    reg: Registry,
    policy: Policy,
    policy_source: str,
    *,
    pair_ids: list[int] | None = None,
    rehash: bool = False,
    spread: bool = True,
    runs_for: RunsFor = runs_for_pair,
    pairs: list[PairRecord] | None = None,
    facts: Facts | None = None,
) -> AuditReport:
    """Apply every gate to the given pairs and decide per stratum.

    Args:
        reg: the registry holding the pairs, their verdicts and their runs.
        policy: the adoption policy the gates judge by.
        policy_source: where the policy came from, as reports name it.
        pair_ids: the pairs to audit (None: every admitted pair).
        rehash: hash every file again rather than trust the stat cache.
        spread: False leaves out the per-request speed-up spread (p5-p95), which only reports
            show.
        runs_for: the runs that may be evidence for a pair (`audit_by_hardware` gives one
            hardware class's).
        pairs: the pair records themselves (instead of ids) when the caller has them already.
        facts: per-audit caches (artifact records, integrity, digests), shared by the audits
            of one registry.

    Raises:
        SpecregError: when no pair is given and none is admitted (nothing to audit).
        PairNotFound: when a pair id names no pair.
    """
    from specreg.validators.ruleset import RULE_SET_DEFAULT, load_rule_set

    facts = facts or Facts(reg, rehash, spread)
    if facts.trust is None:
        facts.trust = EvidenceTrust(reg, policy, policy_source)
    chosen: list[str] = []
    if pairs is None:
        pairs, chosen = audited_pairs(reg, facts.trust, pair_ids)
    facts.chosen = {}  # chosen from `runs_for`: a shared `facts` meets other runs (another class) here
    facts.sampler, facts.sampled = policy_sampler(policy), {}  # ... and may have met another policy
    if len(pairs) > 20:  # a few list queries instead of several lookups per pair
        facts.prefetch(pairs)  # a shared `facts` has most of them already
        if runs_for is runs_for_pair:
            runs_for = RunIndex(reg)
        if isinstance(runs_for, RunIndex):
            # the evidence runs are known before any gate runs: digest them all in one go
            # (a re-checked stale pair keeps its target, draft and method, so its runs too)
            heads = [facts.evidence(p, policy, runs_for)[0] for p in pairs]
            facts.digests = load_digests(reg, {h.info.run_id: h for h in heads if h}.values(), spread=spread)
    audits: list[PairAudit] = []
    runs: dict[str, RunDigest] = {}
    seen: set[int] = set()
    notes: list[str] = list(chosen)
    for pair in pairs:
        audit, run = audit_pair(facts, pair, policy, runs_for)
        if audit.pair_id in seen:  # a stale pair re-checked into one already audited
            notes.append(f"pair {pair.id} (rule set {pair.rule_set}) is now pair {audit.pair_id}")
            continue
        if audit.pair_id != pair.id:
            notes.append(f"pair {pair.id} was re-checked under the current rule set as pair {audit.pair_id}")
        seen.add(audit.pair_id)
        audits.append(audit)
        if run is not None:
            runs[run.run_id] = run
    _judge_unchecked(facts, audits, runs, policy)
    for r in runs.values():
        r.attested_by = facts.trust.describe(r.run_id)
    notes += facts.trust.refused.values()
    for r in runs.values():  # the evidence's timings leave these rounds out: say so, and why
        if r.set_aside:
            head, *why = r.set_aside
            more = f"; +{len(why) - 3} more (specreg runs show {r.run_id})" if len(why) > 3 else ""
            notes.append(f"run {r.run_id}: {head}; " + "; ".join(why[:3]) + more)
    return AuditReport(
        created_at=now(),
        policy=policy,
        policy_source=policy_source,
        rule_set=load_rule_set(RULE_SET_DEFAULT).id,
        rehash=rehash,
        passed=all(a.passed for a in audits),
        pairs=audits,
        decisions=decide(audits, runs),
        runs=list(runs.values()),
        notes=notes,
        models=facts.names(audits, runs.values()),
    )


def audit_for_deploy(
    reg: Registry, pair_id: int, policy: Policy, policy_source: str
) -> tuple[AuditReport, RequestSettings | None]:
    """The audit `deploy` (and `watch`) plan from: the pair with every other admitted pair of
    its target (the per-stratum decisions name a better one when there is; the requested pair
    first, so a re-check keeps it first), and how its evidence run sampled its requests.

    Raises:
        PairNotFound: when no pair has this id.
    """
    requests: dict[str, RequestSettings] = {}

    def runs_for(reg: Registry, pair: PairRecord) -> list[RunHead]:
        heads = runs_for_pair(reg, pair)
        requests.update({h.info.run_id: h.manifest.request for h in heads if h.manifest})  # how it was sampled
        return heads

    target = reg.get_pair(pair_id).target_sha256
    rivals = [p.id for p in reg.pairs(admitted=True, with_checks=False) if p.target_sha256 == target]
    ids = [pair_id, *(i for i in rivals if i != pair_id)]
    report = run_audit(reg, policy, policy_source, pair_ids=ids, spread=False, runs_for=runs_for)
    request = requests.get(report.pairs[0].run_id or "") if report.pairs else None
    return report, request


def pinned_plan(
    reg: Registry,
    report: AuditReport,
    pair_id: int,
    request: RequestSettings | None,
    *,
    stratum: str | None = None,
    concurrency: int | None = None,
    program: str | None = None,
    port: int | None = None,
) -> DeployCommand:
    """The command `specreg deploy` prints from `audit_for_deploy`'s report (and `watch` holds a
    server to): `plan_deploy`, then the caps `check pair --budget` recorded for the configuration
    deployed, pinned (audit.deploy.pin_fit).

    Raises:
        SpecregError: as `plan_deploy` (the pair not in the audit, a stratum never measured).
    """
    from specreg.audit.deploy import pin_fit, plan_deploy, serving_settings
    from specreg.schemas.memory import config_key

    audited = report.pairs[0].pair_id if report.pairs else pair_id  # a stale verdict is re-checked as a new pair
    plan = plan_deploy(
        report, audited, stratum=stratum, concurrency=concurrency, program=program, port=port, request=request
    )
    if plan.deployable and plan.argv and report.pairs:
        pa = report.pairs[0]
        config = config_key(serving_settings(plan.argv))
        fit = reg.memory_fits.latest(pa.target_sha256, pa.draft_sha256, pa.method, config)
        if fit is not None:
            pin_fit(plan, fit)
    return plan
