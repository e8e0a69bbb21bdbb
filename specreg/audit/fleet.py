"""The audit across a fleet: one audit per hardware class, so that every class gets its own decision.

A pair can be worth deploying on an H100 and not on a CPU box. When the registry holds runs
from more than one hardware class (bundles merged from several hosts), each class is audited
with only its own runs as evidence: every gate, and the per-stratum decisions, per class. Pairs
measured on no class are audited once (they fail the evidence gate, as before). With one class
or none, this is the plain audit, its results tagged with the class.
"""

from __future__ import annotations

from collections import defaultdict

from specreg.audit.facts import Facts
from specreg.audit.run import audited_pairs, run_audit
from specreg.audit.trust import EvidenceTrust
from specreg.benchmark.store.run_index import RunIndex
from specreg.registry.store import Registry
from specreg.schemas.audit import AuditReport, Policy
from specreg.schemas.registry import PairRecord
from specreg.servers.hardware import run_hardware


def _tag(report: AuditReport, cls: str | None) -> AuditReport:
    by_run = {r.run_id: r.hardware for r in report.runs}
    for p in report.pairs:
        p.hardware = cls or by_run.get(p.run_id or "")
    for d in report.decisions:
        d.hardware = cls or by_run.get(d.run_id or "")
    return report


def audit_by_hardware(
    reg: Registry,
    policy: Policy,
    policy_source: str,
    *,
    pair_ids: list[int] | None = None,
    rehash: bool = False,
    spread: bool = True,
) -> AuditReport:
    """`run_audit` once per hardware class the runs were measured on (see the module docstring)."""
    classes_of = run_hardware(reg)
    wanted = (policy.evidence.hardware or "").casefold()
    classes = sorted({c for c in classes_of.values() if c and wanted in c.casefold()})
    if len(classes) <= 1:
        report = run_audit(
            reg,
            policy,
            policy_source,
            pair_ids=pair_ids,
            rehash=rehash,
            spread=spread,
            facts=Facts(reg, rehash, spread),
        )
        report.hardware_classes = classes
        _tag(report, None)
        for d in report.decisions:  # a target no candidate won on still was decided for this class
            d.hardware = d.hardware or (classes[0] if classes else None)
        return report
    facts = Facts(reg, rehash, spread)  # each artifact is verified once, not once per class
    facts.trust = EvidenceTrust(reg, policy, policy_source)
    pairs, chosen = audited_pairs(reg, facts.trust, pair_ids)
    index = RunIndex(reg)
    facts.prefetch(pairs)  # ... and all of them in one batch (one write of refreshed stats, not one per class)
    parts: list[AuditReport] = []
    measured: set[int] = set()
    views = index.partition({rid: c for rid, c in classes_of.items() if c is not None and c in classes})
    slots: dict[tuple[str, str], list[tuple[int, PairRecord]]] = defaultdict(list)  # (target, method) -> pairs
    for i, p in enumerate(pairs):
        slots[(p.target_sha256, p.method)].append((i, p))
    for cls in classes:
        mine = views[cls].measured(slots) if cls in views else []
        if mine:
            measured |= {p.id for p in mine}
            part = run_audit(
                reg, policy, policy_source, rehash=rehash, spread=spread, runs_for=views[cls], pairs=mine, facts=facts
            )
            parts.append(_tag(part, cls))
    rest = [p for p in pairs if p.id not in measured]
    if rest:
        part = run_audit(
            reg, policy, policy_source, rehash=rehash, spread=spread, runs_for=index, pairs=rest, facts=facts
        )
        parts.append(_tag(part, None))
    runs = {r.run_id: r for part in parts for r in part.runs}
    notes = list(dict.fromkeys([*chosen, *(n for part in parts for n in part.notes)]))
    return parts[0].model_copy(
        update={
            "passed": all(part.passed for part in parts),
            "pairs": [p for part in parts for p in part.pairs],
            "decisions": [d for part in parts for d in part.decisions],
            "runs": list(runs.values()),
            "notes": notes,
            "models": {k: v for part in parts for k, v in part.models.items()},
            "hardware_classes": classes,
        }
    )
