"""`specreg demo` end to end on the bundled llama.cpp server, and re-running it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _audit_world import specreg
from _browser import Browser, check_page, chromium

from specreg.audit.policy import load_policy
from specreg.audit.run import run_audit
from specreg.registry.store import Registry

BUDGET_S = 120  # the budget for the whole demo on 2 cores
# What the validators must decide for the demo's pairs, and the reason a rejection must show.
CHECKS = {
    "draft-simple target <- draft.gguf": ("ADMITTED", None),
    "draft-simple target <- near-miss.gguf": ("REJECTED", "vocab.tokens"),
    "draft-eagle3 target <- eagle3-wrong-target.gguf": ("REJECTED", "eagle3.target_hidden_size"),
    "ngram-simple target <- (self)": ("ADMITTED", None),
    "ngram-mod target <- (self)": ("ADMITTED", None),
}
# Gates whose outcome does not depend on timing: the files, the verdict and the licence never
# change, and the draft pair's run is checked by the demo itself (it stops when that run broke).
FIXED_GATES = {"integrity", "verdict", "licence"}
DRAFT_PAIR_GATES = FIXED_GATES | {"evidence", "rollback"}


SCREENSHOT = Path(__file__).parent.parent / "docs" / "report.png"  # the README's picture of the report


def look_at_demo_report(report: Path, tmp_path: Path) -> None:
    """The demo's report in headless Chromium at 390 and 1280 px (tests/_browser.py); with
    SPECREG_SCREENSHOT=1 the laptop's first screen becomes docs/report.png."""
    if chromium() is None:
        pytest.skip("chromium not installed (tools/ensure_chromium.sh); the demo itself passed")
    with Browser(tmp_path) as browser:
        looks = check_page(browser, report, tmp_path / "screenshots", "demo", plots=3)
    assert re.search(r"\b(PASS|FAIL)\b: \d of \d pairs", looks[0].metrics["decisionText"])
    if os.environ.get("SPECREG_SCREENSHOT") == "1":
        SCREENSHOT.write_bytes(looks[1].screenshot.read_bytes())


def _checked(out: str) -> dict[str, tuple[int, str, str]]:
    """label -> (pair id, ADMITTED/REJECTED, the lines printed under it)."""
    blocks = re.findall(r"^    pair (\d+) (.+?): (ADMITTED|REJECTED) \(.*\)\n((?:        .*\n)*)", out, re.M)
    return {label: (int(pid), word, reasons) for pid, label, word, reasons in blocks}


def _audited(out: str) -> dict[int, tuple[str, str]]:
    """pair id -> (PASS/FAIL, the failed gates as printed)."""
    rows = re.findall(r"^pair (\d+) \S+: (PASS|FAIL)(?: \((.*)\))?$", out, re.M)
    return {int(pid): (word, failed) for pid, word, failed in rows}


def test_demo_end_to_end_then_again(tmp_path: Path) -> None:
    folder = tmp_path / "demo dir"  # a space in the path, as users have
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("SPECREG_DB", None)  # the demo's registry lives in DIR unless --db is given
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "specreg.cli", "demo", "--dir", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=BUDGET_S + 60,
    )
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert took < BUDGET_S, took
    out = proc.stdout
    checked = _checked(out)
    assert {label: word for label, (_, word, _) in checked.items()} == {k: v for k, (v, _) in CHECKS.items()}
    for label, (_, reason) in CHECKS.items():
        assert (reason or "") in checked[label][2] and bool(checked[label][2]) == bool(reason), (label, out)

    # the printed audit is the audit of what the demo recorded: every admitted pair, its gates
    db = folder / "registry.db"
    admitted = sorted(pid for pid, word, _ in checked.values() if word == "ADMITTED")
    with Registry(db, show_progress=False) as reg:
        report = run_audit(reg, *load_policy(folder / "policy.toml"), pair_ids=admitted)
    assert _audited(out) == {
        p.pair_id: ("PASS" if p.passed else "FAIL", ", ".join(p.failed_gates)) for p in report.pairs
    }
    assert sorted(_audited(out)) == admitted
    draft_pair = checked["draft-simple target <- draft.gguf"][0]
    for p in report.pairs:
        must_pass = DRAFT_PAIR_GATES if p.pair_id == draft_pair else FIXED_GATES
        assert not must_pass & set(p.failed_gates), (p.pair_id, p.failed_gates)
    verdict = re.search(r"^audit verdict: (PASS|FAIL) - ", out, re.M)
    assert verdict and verdict.group(1) == ("PASS" if report.passed else "FAIL")
    decided = dict(re.findall(r"^deploy for (\S+): (.+?)(?: \(speed-up [\d.]+x(?: \[[\d., ]+\])?\))?$", out, re.M))
    assert decided == {d.stratum: d.choice for d in report.decisions}
    assert set(decided) == {"repetitive", "chat"}
    report = folder / "report.html"
    assert f"report:   {report}" in out
    assert f"logs:     {folder / 'runs'}" in out  # every file the demo wrote is named
    assert "\naudit verdict: " in out and "(tiny random models may well be slower with speculation)" in out
    html = report.read_text("utf-8")
    assert html.count("<svg") == 3 and "<script" not in html
    look_at_demo_report(report, tmp_path)
    assert (folder / "registry.db").is_file() and (folder / "policy.toml").is_file()
    assert any((folder / "runs").iterdir())  # server logs stay in DIR

    models = sorted((folder / "models").glob("*.gguf"))
    assert len(models) == 4
    before = {m.name: (m.stat().st_mtime_ns, m.read_bytes()) for m in models}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "200")  # one line per pair, as in the first run (the demo wraps at the width)
        code, out2, err2 = specreg("demo", "--dir", str(folder), db=folder / "registry.db")
    assert code == 0, out2[-2000:] + err2[-2000:]
    assert _checked(out2) == checked  # the same pairs, the same verdicts
    after = {m.name: (m.stat().st_mtime_ns, m.read_bytes()) for m in sorted((folder / "models").glob("*.gguf"))}
    assert after == before  # same files, not even rewritten
    with Registry(folder / "registry.db", show_progress=False) as reg:
        assert len(reg.artifacts(with_summary=False)) == 4
        pairs = reg.pairs(with_checks=False)
        assert len(pairs) == 5 and all(p.n_verdicts == 2 for p in pairs)  # checked again, no duplicates
        runs = reg.conn.execute("SELECT count(*) FROM bench_runs").fetchone()[0]
        assert runs == 2  # each demo measures anew; the audit reads the newest run
