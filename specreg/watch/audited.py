"""The audited deploy a running server is held to, what the bench measured for it, and how the
server differs from it.

The audited deploy is exactly what `specreg deploy PAIR --stratum S` prints (the same audit,
the same policy): its argv, its pinned SHA-256s and its evidence run. The evidence is that run's
numbers for the deployed condition in that stratum (the whole workload without one), counted
the way `/metrics` counts live traffic: acceptance as accepted / drafted tokens, decode rate as
generated tokens / generating seconds (the server's own `timings`), mean accepted length as
llama.cpp prints it (1 + accepted / drafting steps). A decode rate is only compared on the
hardware class the audit measured it on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from specreg.errors import SpecregError
from specreg.schemas.bench import ALL_STRATA
from specreg.schemas.methods import BASELINE
from specreg.schemas.watch import AuditedEvidence, Mismatch, ServerSeen
from specreg.watch.identify import UNSET, effective

if TYPE_CHECKING:
    from specreg.registry.store import Registry
    from specreg.schemas.audit import DeployCommand, Policy
    from specreg.schemas.bench import BenchRun


@dataclass
class AuditedDeploy:
    """A pair's audited deploy for a stratum, or why there is none to compare with."""

    pair_id: int
    method: str
    stratum: str | None
    plan: DeployCommand | None = None
    flags: dict[str, str] | None = None  # the deploy argv's compared flags (identify.effective)
    build: int | None = None  # the evidence run's llama.cpp build
    evidence: AuditedEvidence | None = None
    problem: str | None = None  # no audit to compare with: why
    fix: str | None = None

    @property
    def speculative(self) -> bool:
        return self.method != BASELINE


def find_pair(reg: Registry, seen: ServerSeen) -> tuple[int | None, str | None]:
    """The admitted pair the server runs: by its target, draft and method, else the one pair of
    its target (and method) there is, whose deploy then names how the server differs; (None, why)
    when it cannot be told (no such pair, or several: `--pair` chooses)."""
    if seen.target_sha256 is None:
        return None, "the server's target file is not known here, so its pair cannot be found"
    pairs = [p for p in reg.pairs(admitted=True, with_checks=False) if p.target_sha256 == seen.target_sha256]
    methods = seen.spec_type.split(",") if seen.spec_type not in (None, BASELINE) else None
    same_method = [p for p in pairs if methods is None or p.method in methods]
    exact = [p for p in same_method if seen.via == "props" or p.draft_sha256 == seen.draft_sha256]
    for found in (exact, same_method, pairs):
        if len(found) == 1:
            return found[0].id, None
        if len(found) > 1:
            return None, f"pairs {', '.join(str(p.id) for p in found)} all run the server's target"
    return None, f"no admitted pair has the server's target {seen.target_sha256[:12]}"


def _hardware_here(ngl: str | None) -> str | None:
    from specreg.servers.hardware import hardware_class
    from specreg.servers.memory import GpuProbe
    from specreg.servers.runtime import hardware_info

    gpu = GpuProbe()
    try:
        return hardware_class(hardware_info(gpu, ngl).model_dump(mode="json"))
    finally:
        gpu.close()


def evidence_of(run: BenchRun, condition: str, stratum: str | None) -> AuditedEvidence:
    """The run's numbers for `condition` in `stratum` (None: the whole workload)."""
    from specreg.servers.hardware import hardware_class

    want = stratum or ALL_STRATA
    s = next((x for x in run.summaries if x.condition == condition and x.stratum == want), None)
    hw = hardware_class(run.manifest.hardware.model_dump(mode="json")) if run.manifest else None
    out = AuditedEvidence(run_id=run.info.run_id, condition=condition, stratum=stratum, hardware=hw)
    if s is None:
        out.note = f"run {run.info.run_id} has no {condition} in {want}"
        return out
    out.acceptance, out.decode_tps = s.acceptance, s.decode_tps
    if s.drafted is not None and s.output_tokens:
        out.drafted_per_token = s.drafted / s.output_tokens
    cond = next((c for c in run.conditions if c.spec.name == condition), None)
    counters = cond.counters if cond is not None else None
    if cond is not None and cond.argv:
        from specreg.audit.deploy import read_flags, recorded_flags

        try:
            out.threads = read_flags(recorded_flags(cond.argv))[0].threads
            out.threads = UNSET if out.threads is None else str(out.threads)
        except SpecregError:
            out.threads = None
    if stratum is None and counters is not None and counters.steps:
        out.mean_accepted_length = 1 + counters.accepted / counters.steps
        per = counters.per_position
        out.per_position = [per.get(i, 0) / counters.steps for i in range(max(per) + 1)] if per else []
    elif s.expected_accepted_length is not None:
        out.mean_accepted_length = s.expected_accepted_length
    return out


def audited_deploy(
    reg: Registry,
    pair_id: int,
    stratum: str | None,
    policy: Policy,
    policy_source: str,
    *,
    concurrency: int | None = None,
    local_ngl: str | None = None,
    local: bool = False,
    threads: str | None = None,
) -> AuditedDeploy:
    """The deploy `specreg deploy PAIR_ID --stratum S` would print, with its evidence; a pair
    the audit refuses, or a stratum never measured, is a `problem` (nothing to compare with).

    Args:
        concurrency: the server's `-np`: its level when the run measured it, else the audited one.
        local: the server runs on this machine (its hardware class is this machine's).
        local_ngl: its `-ngl` (the placement part of the hardware class).
        threads: its `-t` ("unset": the build's default; None: not known). A decode rate is
            compared only where the bench server ran the same.

    Raises:
        PairNotFound: no pair has this id.
    """
    from specreg.audit.deploy import read_flags
    from specreg.audit.run import audit_for_deploy, pinned_plan
    from specreg.benchmark.store.digest import runtime_identity
    from specreg.benchmark.store.runstore import RunStore
    from specreg.servers.identity import build_of

    report, request = audit_for_deploy(reg, pair_id, policy, policy_source)
    pa = report.pairs[0]
    out = AuditedDeploy(pair_id=pa.pair_id, method=pa.method, stratum=stratum)
    run_levels = next((r.concurrency_levels for r in report.runs if r.run_id == pa.run_id), [])
    conc = concurrency if concurrency in run_levels else None
    try:
        plan = pinned_plan(reg, report, pa.pair_id, request, stratum=stratum, concurrency=conc)
    except SpecregError as exc:
        out.problem, out.fix = f"pair {pair_id}: {exc}", exc.hint
        return out
    out.plan = plan
    if not plan.deployable or not plan.argv or plan.run_id is None or plan.condition is None:
        gates = ", ".join(g.gate for g in plan.failed_gates) or "no deployable condition"
        where = f" for {stratum}" if stratum else ""
        out.problem = f"pair {pa.pair_id} is not deployable{where} under this policy ({gates})"
        out.fix = f"specreg deploy {pa.pair_id}" + (f" --stratum {stratum}" if stratum else "") + " says why"
        return out
    out.flags = effective(read_flags(plan.argv[1:])[0])
    run = RunStore(reg).load(plan.run_id)
    out.build = build_of(runtime_identity(run.manifest))
    out.evidence = evidence_of(run, plan.condition, stratum)
    why = None
    if not local:
        why = "the server's hardware is not known here"
    elif out.evidence.hardware is not None and out.evidence.hardware != _hardware_here(local_ngl):
        why = f"audited on {out.evidence.hardware}, not this machine"
    elif threads is None or out.evidence.threads is None:
        why = "the server's threads (-t) are not known"
    elif threads != out.evidence.threads:
        why = f"the bench ran -t {out.evidence.threads}, the server -t {threads}"
    if why is not None:
        out.evidence.compare_decode = False
        out.evidence.note = f"decode rate not compared: {why}"
    return out


def _short(sha: str | None) -> str | None:
    return sha[:12] if sha else None


def mismatches(seen: ServerSeen, audited: AuditedDeploy) -> list[Mismatch]:
    """Every way the server differs from the audited deploy, field by field: the model files by
    SHA-256, the build, then each flag the deploy pins (only those the identity shows)."""
    from specreg.audit.deploy import flag_names, model_paths

    plan = audited.plan
    if plan is None or plan.argv is None or audited.flags is None:
        return []
    out: list[Mismatch] = []
    pinned = plan.sha256
    paths = model_paths(plan.argv)
    for role in ("target", "draft"):
        want = pinned.get(paths[role]) if role in paths else None
        have, path = getattr(seen, f"{role}_sha256"), getattr(seen, f"{role}_path")
        if role == "draft" and seen.via == "props":
            continue  # /props does not name the draft
        if have is not None or want is None:
            if have != want:
                out.append(Mismatch(field=f"{role} sha256", audited=_short(want), live=_short(have)))
        elif path != paths.get(role):
            out.append(Mismatch(field=f"{role} file", audited=paths.get(role), live=path))
    if audited.build is not None and seen.build is not None and seen.build != audited.build:
        out.append(Mismatch(field="build", audited=str(audited.build), live=str(seen.build)))
    names = flag_names()
    for dest, want_text in audited.flags.items():
        if seen.via == "props" and (dest not in seen.flags or want_text == UNSET):
            continue  # /props shows the sampler and the slots, and every one a default of its own
        have_text = seen.flags.get(dest, UNSET)
        if have_text != want_text:
            out.append(Mismatch(field=names.get(dest, dest), audited=want_text, live=have_text))
    if seen.extra_flags:
        out.append(Mismatch(field="other flags", audited=None, live=" ".join(seen.extra_flags)))
    return out
