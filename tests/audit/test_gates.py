"""Each audit gate fails on its own, and a clean pass comes from the real run's numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

from _audit_world import LENIENT, AuditWorld
from _registry_helpers import cli

from specreg.audit.gates import licence_gate
from specreg.audit.policy import load_policy
from specreg.audit.run import run_audit
from specreg.registry.store import Registry
from specreg.schemas.audit import AuditReport, Policy
from specreg.schemas.checks import PairVerdict
from specreg.schemas.registry import ArtifactRecord, LicenceRecord, LicenceSource, Provenance

GATE_NAMES = ["integrity", "verdict", "template", "evidence", "equivalence", "speed", "memory", "licence", "rollback"]


def _audit(db: Path, pair: int, policy: Policy = LENIENT, **kw: object) -> AuditReport:
    with Registry(db, show_progress=False) as reg:
        return run_audit(reg, policy, "test", pair_ids=[pair], **kw)  # type: ignore[arg-type]


def _failed(report: AuditReport) -> list[str]:
    (pair,) = report.pairs
    return pair.failed_gates


def test_world_run_is_real_and_small(audit_world: AuditWorld) -> None:
    assert audit_world.seconds < 40, audit_world.seconds
    with Registry(audit_world.db, show_progress=False) as reg:
        from specreg.benchmark.store.runstore import RunStore

        run = RunStore(reg).load(audit_world.run_id)
    by = {c.spec.name: c for c in run.conditions}
    assert by["none"].status == by["draft-simple"].status == by["ngram-simple"].status == "ok"
    assert by["ngram-mod"].status == "failed", by["ngram-mod"].failure  # drafted nothing: a real failure
    assert run.info.status == "incomplete"
    assert by["draft-simple"].counters and by["draft-simple"].counters.drafted > 0


def test_clean_pass_from_real_numbers(audit_world: AuditWorld, tmp_path: Path) -> None:
    report = _audit(audit_world.db, audit_world.pairs["draft-simple"])
    (pair,) = report.pairs
    assert [g.gate for g in pair.gates] == GATE_NAMES
    assert pair.passed, [(g.gate, g.message) for g in pair.gates if not g.passed]
    speed = pair.gate("speed")
    assert speed is not None
    measured = [v["speedup"] for v in speed.evidence.values()]  # type: ignore[index]
    assert measured and all(isinstance(x, float) and x > 0 for x in measured)
    eq = pair.gate("equivalence")
    assert eq is not None and all(eq.strata.values()) and set(eq.strata) == {"repetitive", "chat"}
    assert pair.rollback_command and "--spec-type" in pair.rollback_command
    assert pair.rollback_command[pair.rollback_command.index("--spec-type") + 1] == "none"
    assert str(audit_world.target) in pair.rollback_command
    rehashed = _audit(audit_world.db, pair.pair_id, rehash=True)
    assert rehashed.passed and "full re-hash" in rehashed.pairs[0].gates[0].message
    # the CLI agrees: exit 0, JSON on stdout
    policy = audit_world.policy_file(tmp_path)
    proc = cli("audit", "--pair", str(pair.pair_id), "--policy", str(policy), "--json", db=audit_world.db)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["passed"] is True


def test_changed_byte_fails_integrity_only(audit_world: AuditWorld, tmp_path: Path) -> None:
    db = audit_world.copy(tmp_path / "r.db")
    copy = tmp_path / "draft-copy.gguf"
    copy.write_bytes(audit_world.draft.read_bytes())
    with Registry(db, show_progress=False) as reg:
        reg.add_artifact(copy)  # same bytes, second registered path
    data = bytearray(copy.read_bytes())
    data[-1] ^= 0xFF
    copy.write_bytes(data)
    report = _audit(db, audit_world.pairs["draft-simple"])
    assert _failed(report) == ["integrity"]
    msg = report.pairs[0].gate("integrity").message  # type: ignore[union-attr]
    assert "draft-copy.gguf" in msg and "sha256 is now" in msg
    copy.unlink()
    report = _audit(db, audit_world.pairs["draft-simple"])
    assert _failed(report) == ["integrity"] and "missing" in report.pairs[0].gates[0].message


def test_dropped_licence_fails_licence_only(audit_world: AuditWorld, tmp_path: Path) -> None:
    db = audit_world.copy(tmp_path / "r.db")
    with Registry(db, show_progress=False) as reg:
        draft = reg.add_artifact(audit_world.draft)
        reg.add_licence_source(draft.sha256, LicenceSource(source="user", value=None))  # withdrawn
    report = _audit(db, audit_world.pairs["draft-simple"])
    assert _failed(report) == ["licence"]
    assert "draft: no licence recorded" in report.pairs[0].gate("licence").message  # type: ignore[union-attr]
    allow_unknown = LENIENT.model_copy(deep=True)
    allow_unknown.licence.unknown = "pass"
    assert _audit(db, audit_world.pairs["draft-simple"], allow_unknown).passed


def test_deny_listed_licence_fails_licence_only(audit_world: AuditWorld) -> None:
    policy = LENIENT.model_copy(deep=True)
    policy.licence.allow, policy.licence.deny = [], ["Apache-2.0"]
    report = _audit(audit_world.db, audit_world.pairs["draft-simple"], policy)
    assert _failed(report) == ["licence"]
    msg = report.pairs[0].gate("licence").message  # type: ignore[union-attr]
    assert "target: licence apache-2.0 is on the deny list" in msg and "draft:" in msg


def test_a_local_file_is_pinned_by_its_sha256(audit_world: AuditWorld) -> None:
    """near-miss was registered from disk (no hub repository): its SHA-256 pins it, so the default
    `require_revision` does not fail it, and the gate says which pin each file stands on."""
    gate = _audit(audit_world.db, audit_world.pairs["near-miss"]).pairs[0].gate("licence")
    assert gate is not None and gate.passed, gate
    assert "pinned by specreg/audit-target@0123abc" in gate.message
    assert re.search(r"draft \S+ \(pinned by sha256 [0-9a-f]{12}\)", gate.message), gate.message


def test_a_hub_file_without_a_revision_fails_licence_when_required() -> None:
    lic = LicenceRecord(effective="apache-2.0", effective_source="user", sources=[])
    when = {"registered_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}
    hub = ArtifactRecord(sha256="a" * 64, size=1, licence=lic, provenance=Provenance(repo="org/model"), **when)
    local = ArtifactRecord(sha256="b" * 64, size=1, licence=lic, provenance=Provenance(), **when)
    gate = licence_gate([("target", local), ("draft", hub)], LENIENT.licence)
    assert not gate.passed and gate.message == "draft: from org/model but no pinned revision in its provenance"
    relaxed = LENIENT.licence.model_copy(update={"require_revision": False})
    assert licence_gate([("target", local), ("draft", hub)], relaxed).passed


def test_impossible_speedup_fails_speed_only(audit_world: AuditWorld, tmp_path: Path) -> None:
    policy = LENIENT.model_copy(deep=True)
    policy.speed.min_speedup = 1000.0
    report = _audit(audit_world.db, audit_world.pairs["draft-simple"], policy)
    assert _failed(report) == ["speed"]
    assert "< 1000" in report.pairs[0].gate("speed").message  # type: ignore[union-attr]
    assert all(d.choice == "none" for d in report.decisions) and report.decisions
    path = audit_world.policy_file(tmp_path, speed={"min_speedup": 1000.0})
    proc = cli("audit", "--pair", str(audit_world.pairs["draft-simple"]), "--policy", str(path), db=audit_world.db)
    assert proc.returncode == 1, proc.stderr
    assert "speed" in proc.stdout and "FAIL" in proc.stdout


def test_failed_condition_is_a_failure_not_a_slow_result(audit_world: AuditWorld) -> None:
    report = _audit(audit_world.db, audit_world.pairs["ngram-mod"])
    pair = report.pairs[0]
    assert not pair.passed and "evidence" in pair.failed_gates
    msg = pair.gate("evidence").message  # type: ignore[union-attr]
    assert "condition ngram-mod failed" in msg and "speculation did not run" in msg
    # the other pairs of the same (incomplete) run still have their evidence
    assert "evidence" not in _failed(_audit(audit_world.db, audit_world.pairs["ngram-simple"]))


def test_rejected_pair_fails_verdict(audit_world: AuditWorld) -> None:
    report = _audit(audit_world.db, audit_world.pairs["near-miss"])
    pair = report.pairs[0]
    assert "verdict" in pair.failed_gates and "evidence" in pair.failed_gates
    assert "vocab.tokens" in pair.gate("verdict").message  # type: ignore[union-attr]


def test_stale_verdict_is_rechecked_and_recorded(audit_world: AuditWorld, tmp_path: Path) -> None:
    db = audit_world.copy(tmp_path / "r.db")
    with Registry(db, show_progress=False) as reg:
        current = reg.get_pair(audit_world.pairs["draft-simple"])
        old_rules = current.rule_set.rsplit("/r", 1)[0] + "/r0"
        stale_id = reg.record_verdict(
            PairVerdict(
                admitted=True,
                method="draft-simple",
                target_sha256=current.target_sha256,
                draft_sha256=current.draft_sha256,
                rule_set=old_rules,
                checks=[],
            )
        )
        before = current.n_verdicts
    report = _audit(db, stale_id)
    pair = report.pairs[0]
    assert pair.pair_id == current.id and pair.passed
    assert f"re-checked: verdict was under {old_rules}" in pair.gate("verdict").message  # type: ignore[union-attr]
    assert any("re-checked" in n for n in report.notes)
    with Registry(db, show_progress=False) as reg:
        assert reg.get_pair(current.id).n_verdicts == before + 1  # the re-check is on record


def test_evidence_must_match_policy_runtime(audit_world: AuditWorld) -> None:
    policy = LENIENT.model_copy(deep=True)
    policy.evidence.runtime = "llama.cpp b99999"
    report = _audit(audit_world.db, audit_world.pairs["draft-simple"], policy)
    msg = report.pairs[0].gate("evidence").message  # type: ignore[union-attr]
    assert "evidence" in _failed(report) and "skipped" in msg and audit_world.run_id in msg
    policy.evidence.runtime = "xllamacpp"
    assert _audit(audit_world.db, audit_world.pairs["draft-simple"], policy).passed
    policy.evidence.min_repetitions = 3
    report = _audit(audit_world.db, audit_world.pairs["draft-simple"], policy)
    # the lenient policy's minimum speed-up (0) is below the whole anytime-valid interval: decided
    # ("faster" than 0), which meets the minimum however few rounds it rests on
    gate = report.pairs[0].gate("evidence")
    assert gate is not None and gate.passed and "anytime-valid decision over 2 rounds (faster" in gate.message
    policy.speed.min_speedup = 0.5  # inside the interval [0.13, 0.92]: undecided, so the minimum holds
    report = _audit(audit_world.db, audit_world.pairs["draft-simple"], policy)
    msg = report.pairs[0].gate("evidence").message  # type: ignore[union-attr]
    assert "2 repetitions < policy minimum 3, and the anytime-valid decision is not made" in msg


def test_required_prompt_must_be_measured(audit_world: AuditWorld) -> None:
    policy = LENIENT.model_copy(deep=True)
    policy.quality.required_prompts = ["rep-zeros", "not-in-workload"]
    report = _audit(audit_world.db, audit_world.pairs["draft-simple"], policy)
    assert _failed(report) == ["equivalence"]
    assert "not-in-workload" in report.pairs[0].gate("equivalence").message  # type: ignore[union-attr]


def test_memory_margin_judges_the_measured_overhead(audit_world: AuditWorld) -> None:
    policy = LENIENT.model_copy(deep=True)
    report = _audit(audit_world.db, audit_world.pairs["draft-simple"], policy)
    extra = report.pairs[0].gate("memory").evidence["extra_ram_mib"]  # type: ignore[union-attr]
    assert isinstance(extra, float)  # measured, not assumed
    policy.memory.max_extra_ram_mib = max(0.0, extra - 0.5)
    report = _audit(audit_world.db, audit_world.pairs["draft-simple"], policy)
    if extra > 0.5:
        assert _failed(report) == ["memory"]
        assert "extra RAM" in report.pairs[0].gate("memory").message  # type: ignore[union-attr]
    policy.memory.max_extra_ram_mib = extra + 1
    assert _audit(audit_world.db, audit_world.pairs["draft-simple"], policy).passed


def test_per_stratum_decisions_pick_the_best_passing_condition(audit_world: AuditWorld) -> None:
    with Registry(audit_world.db, show_progress=False) as reg:
        ids = [audit_world.pairs[k] for k in ("draft-simple", "ngram-simple", "ngram-mod")]
        report = run_audit(reg, LENIENT, "test", pair_ids=ids)
    assert {d.stratum for d in report.decisions} == {"repetitive", "chat"}
    for d in report.decisions:
        eligible = [c for c in d.candidates if c.eligible]
        assert all(c.pair_id != audit_world.pairs["ngram-mod"] for c in eligible)  # its condition failed
        if eligible:
            best = max(eligible, key=lambda c: c.speedup or 0)
            assert d.pair_id == best.pair_id and d.speedup == best.speedup and d.choice != "none"
        else:
            assert d.choice == "none"
    assert not report.passed  # ngram-mod fails, so the audit as a whole does


def test_default_policy_and_all(audit_world: AuditWorld) -> None:
    """--all audits every admitted pair (not the rejected near-miss) under the built-in policy."""
    policy, source = load_policy(None)
    with Registry(audit_world.db, show_progress=False) as reg:
        report = run_audit(reg, policy, source)
    ids = {p.pair_id for p in report.pairs}
    assert ids == {audit_world.pairs[k] for k in ("draft-simple", "ngram-simple", "ngram-mod")}
    draft = next(p for p in report.pairs if p.method == "draft-simple")
    assert draft.gate("licence").passed  # type: ignore[union-attr]  # both have revisions
