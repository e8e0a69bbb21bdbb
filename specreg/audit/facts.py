"""What an audit reads once and judges many times: the facts behind the gates.

A fleet audit judges thousands of pairs that share files, runs and rule sets. `Facts` holds what
one audit has read so far - artifact records and their integrity (verified in batches), each
evidence run's digest (and its digest at the policy's sampler), rule sets, template scans,
signers, deployable argvs - so each is read or verified once however many pairs need it.
`select_run` picks a pair's evidence run under the policy (newest finished run that matches its
runtime, hardware, concurrency and sampler; a run nobody trusted vouches for is none). The gates
(gates.py) judge what this gathers; run.py puts the two together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from specreg.audit.deploy import try_server_argv
from specreg.audit.production_sampler import at_sampler, bench_hint, measured, policy_sampler
from specreg.audit.trust import EvidenceTrust
from specreg.benchmark.store.digest import hardware_identity, load_digest, runtime_identity
from specreg.benchmark.store.run_index import RunHead
from specreg.errors import SpecregError
from specreg.registry.store import Registry
from specreg.schemas.audit import ModelName, PairAudit, Policy, RunDigest
from specreg.schemas.bench import SAYS_NOTHING, RequestSettings
from specreg.schemas.checks import CheckResult
from specreg.schemas.registry import ArtifactRecord, PairRecord
from specreg.schemas.sampling import Sampler
from specreg.servers.identity import ChosenRules
from specreg.signing.model_signature import signature_identity

RunsFor = Callable[[Registry, PairRecord], list[RunHead]]


class Facts:
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
        if info.status in SAYS_NOTHING:
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
