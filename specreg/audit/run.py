"""`specreg audit`: every gate for every pair, then the per-stratum deployment decisions.

This module gathers facts (re-verifies files, re-checks stale verdicts, picks the evidence
run) and hands them to the pure gates in `gates.py`. An exception means the audit could not
decide (exit 2); a failed gate is a result (exit 1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from specreg.audit import gates
from specreg.audit.decisions import decide
from specreg.audit.deploy import try_server_argv
from specreg.audit.outcomes import judge, judge_all, pair_conditions
from specreg.audit.production_sampler import at_sampler, bench_hint, measured, policy_sampler
from specreg.audit.trust import EvidenceTrust
from specreg.benchmark.digest import hardware_identity, load_digest, load_digests, runtime_identity
from specreg.benchmark.eligibility import NOT_BENCHMARKABLE, not_benchmarkable
from specreg.benchmark.run_index import RunHead, RunIndex, runs_for_pair
from specreg.errors import RunUnreadable, SpecregError
from specreg.registry.db import now, paused_gc
from specreg.registry.evidence import not_checked_here, trusted
from specreg.registry.store import Registry
from specreg.schemas.audit import (
    GATES,
    PER_STRATUM_GATES,
    AuditReport,
    ConditionDigest,
    ConditionOutcome,
    GateResult,
    ModelName,
    PairAudit,
    Policy,
    RunDigest,
    UncheckedCondition,
)
from specreg.schemas.bench import ALL_STRATA, RequestSettings, RunStatus
from specreg.schemas.checks import CheckResult
from specreg.schemas.methods import SELF_METHODS
from specreg.schemas.registry import ArtifactRecord, PairRecord
from specreg.schemas.sampling import Sampler
from specreg.servers.identity import ChosenRules
from specreg.sources.model_signature import signature_identity

RunsFor = Callable[[Registry, PairRecord], list[RunHead]]
_GATE_ORDER = {g: i for i, g in enumerate(GATES)}
# Runs that say nothing about the pair: still going, or stopped by a person or a crash of specreg.
_NOT_EVIDENCE: tuple[RunStatus, ...] = ("running", "cancelled", "aborted")


class _Facts:
    """Per-audit caches: one integrity check per artifact even when many pairs share it."""

    def __init__(self, reg: Registry, rehash: bool, spread: bool) -> None:
        self.reg, self.rehash, self.spread = reg, rehash, spread
        self.records: dict[str, ArtifactRecord] = {}
        self.integrity: dict[str, tuple[bool, str | None]] = {}
        self.digests: dict[str, RunDigest] = {}
        self.rule_sets: dict[str, str | None] = {}
        self.needed: dict[str, ChosenRules] = {}  # a run's runtime identity -> the rules it needs
        self.scans: dict[str, list[CheckResult] | str] = {}
        # the evidence run of a (target, draft, method) under this audit's policy and runs: chosen once
        self.chosen: dict[tuple[str, str | None, str], tuple[RunHead | None, str]] = {}
        self.trust: EvidenceTrust | None = None  # who vouches for imported runs (set per audit)
        self._self_checked: set[tuple[str, str]] | None = None
        self.signers: dict[str, str | None] = {}  # sha256 -> who signed that file (None: nobody verified)
        # a run's llama-server argv as deployed, per recorded command (a target's draft and n-gram
        # pairs share their run's baseline command)
        self.argvs: dict[tuple[str, tuple[str, ...]], list[str] | None] = {}
        # per audit (its policy): the production sampler, and each evidence run's digest at it
        self.sampler: Sampler | None = None
        self.sampled: dict[str, RunDigest] = {}

    def digest(self, head: RunHead) -> RunDigest:
        if head.info.run_id not in self.digests:
            self.digests[head.info.run_id] = load_digest(self.reg, head, spread=self.spread)
        return self.digests[head.info.run_id]

    def at_sampler(self, head: RunHead) -> RunDigest:
        """The evidence run's digest as if it held only the policy's sampler (`at_sampler`), once per run."""
        rid = head.info.run_id
        if rid not in self.sampled:
            assert self.sampler is not None  # set by each audit
            self.sampled[rid] = at_sampler(self.digest(head), self.sampler)
        return self.sampled[rid]

    def signer(self, sha: str) -> str | None:
        if sha not in self.signers:
            self.signers[sha] = signature_identity(self.record(sha).provenance.extra, sha)
        return self.signers[sha]

    def server_argv(self, run_id: str, command: list[str] | None, request: RequestSettings | None) -> list[str] | None:
        """`try_server_argv` of a command of this run (whose manifest's `request` is given), once per command."""
        if not command:
            return None
        key = (run_id, tuple(command))
        if key not in self.argvs:
            self.argvs[key] = try_server_argv(command, request)
        argv = self.argvs[key]
        return None if argv is None else list(argv)  # each pair its own list

    def evidence(self, pair: PairRecord, policy: Policy, runs_for: RunsFor) -> tuple[RunHead | None, str]:
        """`select_run` for the pair (a re-checked stale pair keeps its target, draft and method, so its runs)."""
        key = (pair.target_sha256, pair.draft_sha256, pair.method)
        if key not in self.chosen:
            refuse = self.trust.refusal if self.trust is not None else None
            head, how = select_run(runs_for(self.reg, pair), policy, refuse)
            if head is None and "sampler" in how:
                how += f"; measure it: {bench_hint(pair.id, policy_sampler(policy))}"
            self.chosen[key] = head, how
        return self.chosen[key]

    def record(self, sha: str) -> ArtifactRecord:
        if sha not in self.records:
            self.records[sha] = self.reg.get_artifact(sha)
        return self.records[sha]

    def names(self, audits: Iterable[PairAudit], runs: Iterable[RunDigest]) -> dict[str, ModelName]:
        """Name, file and quant of every model the audit mentions (reports print them beside the SHA)."""
        shas = {s for a in audits for s in (a.target_sha256, a.draft_sha256) if s}
        shas |= {s for r in runs for s in (r.target_sha256, *(c.draft_sha256 for c in r.conditions)) if s}
        out = {}
        for sha in sorted(shas):
            try:
                out[sha] = ModelName.of(self.record(sha))
            except SpecregError:  # a run's model no longer registered: the prefix alone
                continue
        return out

    def runtime_rules(self, runtime: str | None) -> ChosenRules:
        """The rule set a run's runtime (its identity line) needs: its build's, else the nearest."""
        from specreg.servers.identity import for_runtime_text

        key = runtime or ""
        if key not in self.needed:
            self.needed[key] = for_runtime_text(runtime, "the run's runtime")
        return self.needed[key]

    def current_rule_set(self, rule_set: str) -> str | None:
        from specreg.validators.ruleset import current_rule_set_id

        if rule_set not in self.rule_sets:
            self.rule_sets[rule_set] = current_rule_set_id(rule_set)
        return self.rule_sets[rule_set]

    def template_scan(self, sha: str) -> list[CheckResult] | str:
        """The target's template checks scanned from its file now, or why they cannot be."""
        if sha not in self.scans:
            from specreg.gguf.reader import open_gguf
            from specreg.validators.checks_template import check_template
            from specreg.validators.ruleset import load_rule_set
            from specreg.validators.side import Side

            rules = load_rule_set()
            try:
                side = Side.of("target", open_gguf(self.reg.locate(sha)), rules)
                self.scans[sha] = check_template(side, rules, self.reg.template_scans)
            except SpecregError as exc:
                self.scans[sha] = f"the target cannot be read: {exc}"
        return self.scans[sha]

    def prefetch(self, pairs: list[PairRecord]) -> None:
        """Records and integrity of every artifact of these pairs, in one batch: one query, one
        round of hashing and one write of refreshed stats for all those not seen yet (a fleet
        audit prefetches every class's pairs at once instead of once per class)."""
        shas = {p.target_sha256 for p in pairs} | {p.draft_sha256 for p in pairs if p.draft_sha256}
        todo = shas - self.records.keys()
        if todo:
            new = self.reg.get_artifacts(todo)
            self.records.update(new)
            self.verify_many(new.values())

    def self_checked(self) -> set[tuple[str, str]]:
        """(target, method) of every self-speculation pair checked, admitted or not: read once per
        audit (a re-check records a verdict for a pair it had, so it adds none)."""
        if self._self_checked is None:
            self._self_checked = {
                (t, m)
                for t, m in self.reg.conn.execute(
                    "SELECT DISTINCT target_sha256, method FROM pairs WHERE draft_sha256 IS NULL"
                )
            }
        return self._self_checked

    def verify_many(self, recs: Iterable[ArtifactRecord]) -> None:
        """Integrity of many artifacts at once (one batch: stats first, then the hashing)."""
        todo = [r for r in recs if r.sha256 not in self.integrity]
        if todo:
            self.integrity.update(self.reg.verify_artifacts(todo, rehash=self.rehash))

    def verify(self, sha: str) -> tuple[bool, str | None]:
        if sha not in self.integrity:
            self.integrity[sha] = self.reg.verify_artifact(self.record(sha), rehash=self.rehash)
        return self.integrity[sha]


def _recheck(reg: Registry, pair: PairRecord) -> PairRecord:
    """Check a stale pair again under the current rule set and record that verdict."""
    from specreg.sources.checking import check_and_record
    from specreg.validators.ruleset import load_rule_set

    rules = load_rule_set(pair.rule_set.rsplit("/r", 1)[0])
    done = check_and_record(reg, pair.target_sha256, pair.draft_sha256, pair.method, rule_set=rules, strict=pair.strict)
    return reg.get_pair(done.pair_id)


def _verdict(facts: _Facts, pair: PairRecord, files_ok: bool) -> tuple[GateResult, PairRecord]:
    elsewhere = not_checked_here(pair)
    if elsewhere is not None and not trusted(pair.elsewhere):  # the hook for signed evidence
        return GateResult(gate="verdict", passed=False, message=elsewhere, evidence={"rule_set": pair.rule_set}), pair
    if not pair.checked_here:
        return GateResult(gate="verdict", passed=False, message="not checked on this machine"), pair
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


def _template(facts: _Facts, pair: PairRecord, policy: Policy) -> GateResult:
    """The verdict's template results; for a verdict older than those checks, a scan made now."""
    checks = pair.checks or facts.reg.get_pair(pair.id).checks  # a list view carries no checks
    recorded = [c for c in checks if c.code.startswith("template.")]
    if recorded:
        return gates.template_gate(recorded, "recorded with the verdict", policy.template)
    if not facts.verify(pair.target_sha256)[0]:
        return gates.template_gate(None, "the verdict predates template checks and the target changed", policy.template)
    scan = facts.template_scan(pair.target_sha256)
    if isinstance(scan, str):
        return gates.template_gate(None, f"the verdict predates template checks; {scan}", policy.template)
    return gates.template_gate(scan, "scanned now: the verdict predates template checks", policy.template)


def _matches(value: str | None, wanted: str | None) -> bool:
    return wanted is None or (value is not None and wanted.casefold() in value.casefold())


def select_run(
    heads: Iterable[RunHead], policy: Policy, refuse: Callable[[str], str | None] | None = None
) -> tuple[RunHead | None, str]:
    """The newest finished run matching the policy's runtime/hardware/concurrency, and why.

    An incomplete or failed run is not skipped: when the newest run on a pair failed, an
    older success is no longer evidence (the evidence gate then fails on that run). A run
    `refuse` names a reason for (audit/trust.py: no trusted signer) is no evidence at all.
    """
    ev, skipped = policy.evidence, []
    sampler = policy_sampler(policy)
    for head in heads:
        info, man = head
        # each identity only when the policy asks for it: the newest run of thousands of pairs otherwise
        runtime = runtime_identity(man) if ev.runtime else None
        hardware = hardware_identity(man) if ev.hardware else None
        levels = (man.request.concurrency_levels or [man.request.concurrency]) if man else []
        if info.status in _NOT_EVIDENCE:
            skipped.append(f"{info.run_id} {info.status}")
        elif refuse is not None and refuse(info.run_id):
            skipped.append(f"{info.run_id} unsigned or signed by no [trust] signer")
        elif ev.runtime and not _matches(runtime, ev.runtime):
            skipped.append(f"{info.run_id} runtime {runtime}")
        elif ev.hardware and not _matches(hardware, ev.hardware):
            skipped.append(f"{info.run_id} hardware {hardware}")
        elif policy.speed.concurrency is not None and policy.speed.concurrency not in levels:
            skipped.append(f"{info.run_id} concurrency {','.join(map(str, levels))}")
        elif sampler.key not in {s.key for s in measured(man)}:
            shown = ", ".join(s.label for s in measured(man)) or "none recorded"
            skipped.append(f"{info.run_id} sampler {shown}, not the policy's {sampler.label}")
        else:
            wanted = [f"runtime ~ {ev.runtime!r}"] if ev.runtime else []
            wanted += [f"hardware ~ {ev.hardware!r}"] if ev.hardware else []
            how = "newest finished run" + (
                f" with {' and '.join(wanted)}" if wanted else " (policy names no runtime/hardware)"
            )
            shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
            return head, how + (f"; skipped {shown}" if skipped else "")
    shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
    return None, "no finished run on this pair" + (f"; skipped {shown}" if skipped else "")


def _concurrency(run: RunDigest | None, policy: Policy) -> int | None:
    levels = run.concurrency_levels if run else []
    if policy.speed.concurrency is not None:
        return policy.speed.concurrency if policy.speed.concurrency in levels else None
    return levels[0] if levels else None


def _unbenchmarkable(facts: _Facts, pair: PairRecord) -> str | None:
    """Why an admitted pair without any run cannot have one (vocab-only), from its checks.

    Only a draft can be vocab-only in an admitted pair: self-speculation rejects a vocab-only target.
    """
    if not pair.admitted or pair.draft_sha256 is None:
        return None
    if not pair.checks:
        pair = facts.reg.get_pair(pair.id)  # list views carry no checks
    return not_benchmarkable(pair)


def audit_pair(
    facts: _Facts, pair: PairRecord, policy: Policy, runs_for: RunsFor
) -> tuple[PairAudit, RunDigest | None]:
    """All eight gates for one pair (evidence, equivalence, speed, memory on its best condition)."""
    roles = [("target", pair.target_sha256)] + ([("draft", pair.draft_sha256)] if pair.draft_sha256 else [])
    checks = [(role, sha, *facts.verify(sha)) for role, sha in roles]
    signers = {role: facts.signer(sha) for role, sha in roles}
    results = [gates.integrity_gate(checks, facts.rehash, signers, policy.trust.require_model_signature)]
    verdict, pair = _verdict(facts, pair, all(ok for _, _, ok, _ in checks))
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
    rollback, command = gates.rollback_gate(run, facts.record(pair.target_sha256).paths, conc)
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
    return _pair_audit(pair, results, run_id=rid, **extra), run


def _refuse_other_rules(facts: _Facts, pair: PairRecord, run: RunDigest, results: list[GateResult]) -> None:
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


def _judge_unchecked(facts: _Facts, audits: list[PairAudit], runs: dict[str, RunDigest], policy: Policy) -> None:
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
    facts: _Facts | None = None,
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
    with paused_gc():  # ~100k acyclic pydantic objects for 5,000 pairs: see paused_gc
        return _run_audit(reg, policy, policy_source, pair_ids, rehash, spread, runs_for, pairs, facts)


def _run_audit(
    reg: Registry,
    policy: Policy,
    policy_source: str,
    pair_ids: list[int] | None,
    rehash: bool,
    spread: bool,
    runs_for: RunsFor,
    pairs: list[PairRecord] | None = None,
    facts: _Facts | None = None,
) -> AuditReport:
    from specreg.validators.ruleset import RULE_SET_DEFAULT, load_rule_set

    if pairs is None and pair_ids is None:
        pairs = reg.pairs(admitted=True, with_checks=True)  # the template gate reads the verdict's checks
        if not pairs:
            raise SpecregError("no admitted pairs to audit", hint="check pairs first: specreg check pair TARGET DRAFT")
    elif pairs is None:
        pairs = [reg.get_pair(i) for i in pair_ids or []]
    facts = facts or _Facts(reg, rehash, spread)
    if facts.trust is None:
        facts.trust = EvidenceTrust(reg, policy, policy_source)
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
    notes: list[str] = []
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
