"""The audit's headline tells the truth per stratum, the same on the page, in Markdown and in the
terminal, and agrees with what `deploy PAIR --stratum S` does."""

from __future__ import annotations

import html
import re
from dataclasses import replace
from pathlib import Path

import pytest
from _audit_world import LENIENT, AuditWorld, specreg

from specreg.audit.deploy import plan_deploy
from specreg.audit.run import run_audit
from specreg.registry.store import Registry
from specreg.report import common
from specreg.report.write import write_audit_report
from specreg.schemas.audit import AuditReport, Candidate, StratumDecision


@pytest.fixture(scope="module")
def report(audit_world: AuditWorld) -> AuditReport:
    with Registry(audit_world.db, show_progress=False) as reg:
        ids = [audit_world.pairs[k] for k in ("draft-simple", "ngram-simple", "ngram-mod")]
        return run_audit(reg, LENIENT, "lenient.toml", pair_ids=ids)


def _decision(report: AuditReport, stratum: str, eligible: set[int]) -> StratumDecision:
    cands = [
        Candidate(pair_id=p.pair_id, eligible=p.pair_id in eligible, reason="r", concurrency=1) for p in report.pairs
    ]
    return StratumDecision(target_sha256=report.pairs[0].target_sha256, stratum=stratum, candidates=cands)


def test_headline_per_stratum_when_no_pair_passes_overall(report: AuditReport, tmp_path: Path) -> None:
    """The demo's case: every pair fails the chat stratum, one deploys for repetitive."""
    ids = [p.pair_id for p in report.pairs]
    fake = report.model_copy(
        update={
            "passed": False,
            "pairs": [replace(p, passed=False) for p in report.pairs],
            "decisions": [_decision(report, "repetitive", {ids[0]}), _decision(report, "chat", set())],
        }
    )
    text = common.headline(fake)
    assert text == "0 of 3 pairs pass every gate; 1 of 3 pairs deploys for repetitive; chat refused"
    assert common.headline_word(fake) == "PARTIAL"
    page = html.unescape(write_audit_report(tmp_path / "a.html", fake)[0].read_text("utf-8"))
    assert f"<b>PARTIAL</b>: {text}." in page and 'class="badge warn">PARTIAL<' in page
    md = write_audit_report(tmp_path / "a.md", fake)[0].read_text("utf-8")
    assert md.startswith("# specreg audit — PARTIAL") and f"**{text}.**" in md
    # nothing deploys anywhere: FAIL, every measured stratum named as refused
    none = fake.model_copy(update={"decisions": [_decision(report, "chat", set()), _decision(report, "code", set())]})
    assert common.headline_word(none) == "FAIL"
    assert common.headline(none) == "0 of 3 pairs pass every gate; chat, code refused"
    two = fake.model_copy(update={"decisions": [_decision(report, "chat", set(ids[:2])), _decision(report, "x", {2})]})
    assert common.strata_headline(two) == "2 of 3 pairs deploy for chat; 1 of 3 pairs deploys for x"


def test_headline_agrees_with_deploy(report: AuditReport) -> None:
    """Every pair the headline counts for a stratum is one `deploy --stratum` pins, and no other."""
    per = common.deploying_pairs(report)
    assert per, "the shared run measures strata"
    for stratum, ids in per.items():
        for p in report.pairs:
            plan = plan_deploy(report, p.pair_id, stratum=stratum)
            assert plan.deployable == (p.pair_id in ids), (stratum, p.pair_id, plan.failed_gates)
    assert common.headline_word(report) in ("PASS", "PARTIAL", "FAIL")


def test_terminal_audit_prints_the_headline(audit_world: AuditWorld, report: AuditReport, tmp_path: Path) -> None:
    ids = [str(audit_world.pairs[k]) for k in ("draft-simple", "ngram-simple", "ngram-mod")]
    args = [x for i in ids for x in ("--pair", i)]
    _, out, _ = specreg("audit", *args, "--policy", str(audit_world.policy_file(tmp_path)), db=audit_world.db)
    flat = re.sub(r"\s+", " ", out)
    assert f"audit: {common.headline_word(report)} {common.headline(report)} (policy:" in flat, out


def test_a_fleets_headline_groups_every_count_alike(report: AuditReport) -> None:
    """'2,000 of 4,600 pairs': the counts before "of" are grouped like the totals after it (a
    fleet's audit read '2000 of 4,600 pairs pass every gate')."""
    many = [replace(p, pair_id=i, passed=i < 2000) for i, p in enumerate(report.pairs * 1534)][:4600]
    ids = {p.pair_id for p in many[:1600]}
    big = report.model_copy(update={"pairs": many, "decisions": []})
    big = big.model_copy(update={"decisions": [_decision(big, "chat", ids)]})
    assert common.headline(big) == "2,000 of 4,600 pairs pass every gate; 1,600 of 4,600 pairs deploy for chat"
