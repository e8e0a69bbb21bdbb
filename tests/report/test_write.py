"""Audit and run reports from the shared real run: self-contained HTML, Markdown + SVGs, escaping."""

from __future__ import annotations

import html
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from _audit_world import HOSTILE, LENIENT, AuditWorld, specreg

from specreg.audit.run import run_audit
from specreg.errors import UsageError
from specreg.registry.store import Registry
from specreg.report.write import write_audit_report
from specreg.schemas.audit import AuditReport

NAMESPACES = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


@pytest.fixture(scope="module")
def report(audit_world: AuditWorld) -> AuditReport:
    with Registry(audit_world.db, show_progress=False) as reg:
        ids = [audit_world.pairs[k] for k in ("draft-simple", "ngram-simple", "ngram-mod")]
        return run_audit(reg, LENIENT, "lenient.toml", pair_ids=ids)


def _assert_self_contained(text: str) -> None:
    low = text.lower()
    assert "<script" not in low and "javascript:" not in low
    assert not re.search(r"<(link|img|iframe|object|embed)\b", low)
    assert not re.search(r"\b(src|href)\s*=\s*[\"'](?!#)", low), "only in-document references"
    assert "@import" not in low and "url(http" not in low
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", text))
    assert urls <= NAMESPACES, urls - NAMESPACES  # XML namespace names are identifiers, never fetched


def test_html_report_is_self_contained_with_plots(report: AuditReport, tmp_path: Path) -> None:
    out = tmp_path / "audit.html"
    assert write_audit_report(out, report) == [out]
    text = out.read_text("utf-8")
    _assert_self_contained(text)
    assert text.count("<svg") == 3  # acceptance by position, speed-up per stratum, peak memory
    for title in ("Acceptance by draft position", "Speed-up per stratum and condition", "Peak memory per condition"):
        assert title in text
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids)), "inlined SVG ids must not collide"
    assert "--spec-type none" in text and str(report.pairs[0].rollback_command[2]) in text  # type: ignore[index]
    assert "Decisions per stratum" in text and "repetitive" in text and "chat" in text
    assert HOSTILE not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert [p.name for p in tmp_path.iterdir()] == ["audit.html"]  # atomic: no temp file left behind


def test_markdown_report_writes_svgs_beside_it(report: AuditReport, tmp_path: Path) -> None:
    out = tmp_path / "my audit.md"
    written = write_audit_report(out, report)
    assert written[0] == out and len(written) == 4
    text = out.read_text("utf-8")
    for svg in written[1:]:
        assert svg.parent == tmp_path and svg.suffix == ".svg"
        assert svg.read_text("utf-8").lstrip().startswith("<?xml")
        assert f"(<{svg.name}>)" in text  # a link that survives the space in the name
    assert "| pair | method | target | draft | integrity |" in text
    assert "<script>" not in text and "&lt;script&gt;" in text and "\\|" in text  # name's pipe escaped
    assert "```sh" in text and "--spec-type none" in text
    again = write_audit_report(out, report)
    assert [p.read_bytes() for p in again[1:]] == [p.read_bytes() for p in written[1:]]  # deterministic
    _assert_the_right_words(text, report)


def _assert_the_right_words(text: str, report: AuditReport) -> None:
    """Issue 25 item 3 in a report's text: the real runtime version on one line, names beside
    every SHA-256 prefix, failed gates named with their numbers, plurals."""
    from specreg.servers.identity import bundled_version

    assert "\\x0a" not in text and "version: 0 (unknown)" not in text
    assert f"bundled xllamacpp {bundled_version()} (llama.cpp build" in text
    for sha in {p.target_sha256 for p in report.pairs}:
        assert f"{sha[:12]} audit-target (target.gguf, F32)" in text
        assert not re.search(rf"{sha[:12]}(?![0-9a-f]| audit-target \(target\.gguf, F32\))", text)  # never bare
    assert "equivalence or speed" not in text and "licence, equivalence" not in text
    mod = next(p for p in report.pairs if p.method == "ngram-mod")  # failed: speculation did not run
    assert "fails evidence: condition ngram-mod failed: speculation did not run: 0 tokens drafted over " in text
    assert "equivalence, speed, memory follow from evidence" in text and not mod.passed
    assert "(s)" not in re.sub(r"GPU\(s\)", "", text)


def test_html_report_words(report: AuditReport, tmp_path: Path) -> None:
    text = write_audit_report(tmp_path / "a.html", report)[0].read_text("utf-8")
    _assert_the_right_words(text, report)
    assert "break-all" not in text and text.index('id="decision"') < text.index('id="verdict"')
    blocks = [html.unescape(b) for b in re.findall(r"<pre>(.*?)</pre>", text, re.S)]
    servers = [b for b in blocks if "--spec-type" in b]
    assert servers and all("sha256sum -c" in b for b in blocks if b not in servers)  # the rest: file checks
    for block in blocks:  # laid out as the terminal does: whole words, ` \` continuations
        rows = block.split("\n")
        assert all(r.endswith(" \\") for r in rows[:-1]), rows
        assert len(shlex.split(block.replace(" \\\n", " "))) >= 2
    for block in servers:  # at most 44 columns (a phone's width) unless one word is wider
        assert all(len(r) <= 44 or len(shlex.split(r.rstrip(" \\"))) <= 2 for r in block.split("\n")), block


def test_report_path_is_checked_first(report: AuditReport, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"\.md or \.html"):
        write_audit_report(tmp_path / "audit.pdf", report)
    with pytest.raises(UsageError, match="does not exist"):
        write_audit_report(tmp_path / "missing" / "audit.html", report)


def test_audit_cli_writes_the_report(audit_world: AuditWorld, tmp_path: Path) -> None:
    policy = audit_world.policy_file(tmp_path)
    out = tmp_path / "cli.html"
    code, stdout, stderr = specreg(
        "audit",
        "--pair",
        str(audit_world.pairs["draft-simple"]),
        "--policy",
        str(policy),
        "--report",
        str(out),
        db=audit_world.db,
    )
    assert code == 0, stderr
    assert "report:" in stdout and "rollback" in stdout
    text = out.read_text("utf-8")
    _assert_self_contained(text)
    assert text.count("<svg") == 3


def test_runs_show_report(audit_world: AuditWorld, tmp_path: Path) -> None:
    out = tmp_path / "run.html"
    code, _, stderr = specreg("runs", "show", audit_world.run_id, "--report", str(out), db=audit_world.db)
    assert code == 0, stderr
    text = out.read_text("utf-8")
    _assert_self_contained(text)
    assert text.count("<svg") == 3 and audit_world.run_id in text and "speculation did not run" in text
    assert "ITL p50/p95 ms" in text and "server ms/tok" in text and "predicted_per_token_ms" in text
    md = tmp_path / "run.md"
    code, stdout, stderr = specreg("runs", "show", audit_world.run_id, "--report", str(md), "--json", db=audit_world.db)
    assert code == 0, stderr
    assert stdout.lstrip().startswith("{")  # --json keeps stdout machine-readable
    assert sorted(p.name for p in tmp_path.glob("run-*.svg")) == [
        "run-acceptance.svg",
        "run-memory.svg",
        "run-speedup.svg",
    ]
    code, _, stderr = specreg(
        "runs", "show", audit_world.run_id, "--report", str(tmp_path / "x.txt"), db=audit_world.db
    )
    assert code == 2 and "Traceback" not in stderr
    assert stderr.startswith("error:") and "x.txt" in stderr.splitlines()[0]


def test_control_characters_never_reach_a_report_file(report: AuditReport, tmp_path: Path) -> None:
    """A name holding an ANSI sequence must not clear the screen of whoever `cat`s the report."""
    evil = "x\x1b[2J\x07\x00y"
    pairs = [replace(p, target_name=evil) for p in report.pairs]
    runs = [r.model_copy(update={"target_name": evil}) for r in report.runs]
    models = {sha: replace(m, name=evil, file=evil) for sha, m in report.models.items()}
    hostile = report.model_copy(update={"pairs": pairs, "runs": runs, "models": models})
    html_text = write_audit_report(tmp_path / "a.html", hostile)[0].read_text("utf-8")
    md_text = write_audit_report(tmp_path / "a.md", hostile)[0].read_text("utf-8")
    for text in (html_text, md_text):
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text)
    assert "x\\x1b[2J\\x07\\x00y" in html_text  # shown as on the terminal, not dropped
