"""Every HTML report as a person sees it: headless Chromium (Debian's `chromium`) at 390 and 1280 px.

The run, the sweep and the audit come from the shared real runs (`_audit_world`); the demo's
report is looked at in test_demo.py, where the demo already ran. Each page must not scroll
sideways (wide tables scroll inside their own box), must show its decision in the first screen,
must load nothing but itself, and must draw its plots at a readable scale. Screenshots land in
the test's tmp dir (the path is in any failure message). `.ci/run` installs chromium
(tools/ensure_chromium.sh); without it these tests are skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from _audit_world import LENIENT, AuditWorld, specreg
from _browser import Browser, check_page, chromium

from specreg.audit.run import run_audit
from specreg.registry.store import Registry
from specreg.report.write import write_audit_report

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium not installed (tools/ensure_chromium.sh)")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with Browser(tmp_path_factory.mktemp("browser")) as b:
        yield b


def test_audit_report_in_a_browser(audit_world: AuditWorld, browser: Browser, tmp_path: Path) -> None:
    with Registry(audit_world.db, show_progress=False) as reg:
        ids = [audit_world.pairs[k] for k in ("draft-simple", "ngram-simple", "ngram-mod")]
        report = run_audit(reg, LENIENT, "lenient.toml", pair_ids=ids)
        page = tmp_path / "audit.html"
        write_audit_report(page, report)
    looks = check_page(browser, page, tmp_path, "audit")
    decision = looks[0].metrics["decisionText"]
    from specreg.report.common import headline, headline_word

    assert decision.startswith(f"{headline_word(report)}: {headline(report)}.")
    for p in report.pairs:
        assert f"pair {p.pair_id}" in decision
        for gate in p.failed_gates:
            assert gate in decision  # the gates that failed, by name, with their numbers beside them
    # a registry's worth of pairs and decisions: the decision still fits the first screen
    many = report.model_copy(
        update={
            "pairs": [replace(p, pair_id=100 + i) for i in range(8) for p in report.pairs],
            "decisions": report.decisions * 10,
        }
    )
    write_audit_report(page, many)
    decision = check_page(browser, page, tmp_path, "audit-many")[0].metrics["decisionText"]
    assert "more fail (" in decision and "more in the decisions per stratum" in decision


# A variant of test_sweep_report_in_a_browser: the same page (`runs show --report`) and the same
# looks, on a run of one level; the sweep's holds a failed condition too (ngram-mod c1).
@pytest.mark.slow
def test_run_report_in_a_browser(audit_world: AuditWorld, browser: Browser, tmp_path: Path) -> None:
    page = tmp_path / "run.html"
    code, _, err = specreg("runs", "show", audit_world.run_id, "--report", str(page), db=audit_world.db)
    assert code == 0, err
    looks = check_page(browser, page, tmp_path, "run")
    assert "failed" in looks[0].metrics["decisionText"]  # the ngram-mod condition that drafted nothing


def test_sweep_report_in_a_browser(sweep_world: SimpleNamespace, browser: Browser, tmp_path: Path) -> None:
    page = tmp_path / "sweep.html"
    code, _, err = specreg("runs", "show", sweep_world.run.info.run_id, "--report", str(page), db=sweep_world.db)
    assert code == 0, err
    looks = check_page(
        browser, page, tmp_path, "sweep", plots=5
    )  # acceptance, speed-up, by concurrency and length, memory
    text = looks[1].metrics["decisionText"]
    for label in ("draft-simple k2 c1", "draft-simple k4 c1", "draft-simple k2 c2", "draft-simple k4 c2"):
        assert label in text  # every swept condition, told apart
    assert "ngram-mod c1: failed" in text
    target = sweep_world.run.info.target_sha256[:12]
    assert f"{target} specreg-tiny (t.gguf, F32)" in page.read_text(
        "utf-8"
    )  # the file and quant beside the SHA-256 prefix


def test_the_browser_check_sees_what_it_must_refuse(browser: Browser, tmp_path: Path) -> None:
    """The harness itself: a page that loads a remote image, scrolls sideways, hides its decision
    below the first screen, breaks commands anywhere and shrinks its plot is caught on each count."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta name="viewport" content="width=device-width, initial-scale=1">'
        "<style>pre{word-break:break-all}</style></head><body>"
        '<img src="http://127.0.0.1:9/x.png" alt="">'
        '<div style="width:2000px">wide</div><div style="height:3000px"></div>'
        '<section id="decision">late</section><pre>llama-server --metrics</pre>'
        '<figure><svg width="2000pt" height="300pt" viewBox="0 0 2000 300" style="width:100%">'
        '<text x="1990" y="50" font-size="40">cut</text></svg></figure></body></html>'
    )
    look = browser.look(page, 390, tmp_path, "bad")
    m = look.metrics
    assert look.external == ["http://127.0.0.1:9/x.png"]
    assert m["innerWidth"] > 390 or m["scrollWidth"] > 390 or m["wide"]  # sideways: zoomed out or wider
    assert m["decisionBottom"] > look.height
    assert m["pres"] == ["break-all pre"]
    assert m["plots"] and m["plots"][0][2] < 0.6  # drawn far below its own size
    assert m["cut"]  # text drawn past the plot's edge
    assert look.screenshot.stat().st_size > 0 and look.full_page.stat().st_size > 0
