"""`specreg demo` end to end on the bundled llama.cpp server, and re-running it (slow)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from _audit_world import _backup, specreg
from _browser import Browser, check_page, chromium

from specreg.audit.policy import load_policy
from specreg.audit.run import run_audit
from specreg.demo import DRAFT, _tiny_models, _write_text_if_changed
from specreg.registry.store import Registry
from specreg.testing import write_model

BUDGET_S = 120  # the issue's budget for the whole demo on 2 cores
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


def look_at_demo_report(report: Path, tmp_path: Path) -> None:
    """The demo's report in headless Chromium at 390 and 1280 px (tests/_browser.py); the README's
    picture of it is tools/render_demo_picture.py's."""
    if chromium() is None:
        pytest.skip("chromium not installed (tools/ensure_chromium.sh); the demo itself passed")
    with Browser(tmp_path) as browser:
        looks = check_page(browser, report, tmp_path / "screenshots", "demo", plots=3)
    assert re.search(r"\b(PASS|PARTIAL|FAIL)\b: \d of \d pairs pass", looks[0].metrics["decisionText"])


def _checked(out: str) -> dict[str, tuple[int, str, str]]:
    """label -> (pair id, ADMITTED/REJECTED, the lines printed under it)."""
    blocks = re.findall(r"^    pair (\d+) (.+?): (ADMITTED|REJECTED) \(.*\)\n((?:        .*\n)*)", out, re.M)
    return {label: (int(pid), word, reasons) for pid, label, word, reasons in blocks}


def _audited(out: str) -> dict[int, tuple[str, str]]:
    """pair id -> (PASS/FAIL, the failed gates as printed)."""
    rows = re.findall(r"^pair (\d+) \S+: (PASS|FAIL)(?: \((.*)\))?$", out, re.M)
    return {int(pid): (word, failed) for pid, word, failed in rows}


def _ends(out: str) -> dict[str, tuple[str, str]]:
    """stratum -> (DEPLOY/REFUSED, the lines printed under it: the command, or the reasons)."""
    blocks = re.findall(r"^(DEPLOY|REFUSED) for (\S+): .*\n((?:    .*\n)*)", out, re.M)
    return {stratum: (word, body) for word, stratum, body in blocks}


def test_demo_end_to_end(demo_world: SimpleNamespace, tmp_path: Path) -> None:
    """The session's one demo (`demo_world`, tests/_audit_world.py; the help examples run from a
    copy of it): what it printed is what it decided, recorded and audited."""
    folder = demo_world.folder
    assert demo_world.seconds < BUDGET_S, demo_world.seconds
    out = demo_world.stdout
    checked = _checked(out)
    assert {label: word for label, (_, word, _) in checked.items()} == {k: v for k, (v, _) in CHECKS.items()}
    for label, (_, reason) in CHECKS.items():
        assert (reason or "") in checked[label][2] and bool(checked[label][2]) == bool(reason), (label, out)

    # the printed audit is the audit of what the demo recorded: every admitted pair, its gates
    db = _backup(folder / "registry.db", tmp_path / "registry.db")  # the shared file stays as the demo left it
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
    ends = _ends(out)
    assert set(ends) == {"repetitive", "chat"} == {d.stratum for d in report.decisions}
    for d in report.decisions:
        word, body = ends[d.stratum]
        assert word == ("DEPLOY" if d.pair_id is not None else "REFUSED"), (d.stratum, out)
        if word == "DEPLOY":  # the pinned command, with the chosen condition's flags and model
            assert body.lstrip().startswith("llama-server") and str(folder / "models" / "target.gguf") in body
            method = next(p.method for p in report.pairs if p.pair_id == d.pair_id)
            assert f"--spec-type {method}" in body, body
        else:  # every candidate's reason
            assert all(f"pair {c.pair_id} " in body for c in d.candidates), body
    # chat has nothing to copy and the draft does not know its words: refused whatever the timings
    assert ends["chat"][0] == "REFUSED" and ends["chat"][1].count("0 draft tokens accepted") == 3, out
    with Registry(db, show_progress=False) as reg:  # the win's mechanism, independent of timings:
        rows = reg.conn.execute(  # on the repetitive prompts the n-gram lookup drafts and is always right
            "SELECT condition, sum(draft_n), sum(draft_n_accepted) FROM bench_requests "
            "WHERE stratum = 'repetitive' AND condition LIKE 'ngram-%' GROUP BY condition"
        ).fetchall()
    assert len(rows) == 2 and all(n > 0 and n == acc for _, n, acc in rows), rows
    report = folder / "report.html"
    assert f"report:   {report}" in out
    assert f"logs:     {folder / 'runs'}" in out  # every file the demo wrote is named
    assert "\naudit verdict: " in out and "(tiny models built so that one stratum can win" in out
    # piped, the benchmark's progress still shows: a line per slot and the run's end (stderr)
    assert re.search(r"^round 1 none: \d+ requests? in \d+ s", demo_world.stderr, re.M), demo_world.stderr[-2000:]
    assert re.search(r"^run \S+: (in)?complete$", demo_world.stderr, re.M), demo_world.stderr[-2000:]
    html = report.read_text("utf-8")
    assert html.count("<svg") == 3 and "<script" not in html
    assert str(folder) not in html and "policy: policy.toml;" in html  # paths relative to the report's folder
    look_at_demo_report(report, tmp_path)
    assert (folder / "registry.db").is_file() and (folder / "policy.toml").is_file()
    assert any((folder / "runs").iterdir())  # server logs stay in DIR


def test_a_rerun_rewrites_no_model_or_file_already_there(tmp_path: Path) -> None:
    """What lets the demo run again in its folder (the slow test below runs it twice): a model or
    text file that has the bytes it should is kept, not even rewritten; one that differs is."""
    models, _ = _tiny_models(tmp_path, lambda _: None)
    kept = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in models.values()}
    models["draft.gguf"].write_bytes(b"GGUF, but damaged")
    again, _ = _tiny_models(tmp_path, lambda _: None)
    now = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in again.values()}
    assert {k: v for k, v in now.items() if k != "draft.gguf"} == {k: v for k, v in kept.items() if k != "draft.gguf"}
    assert again["draft.gguf"].read_bytes() == write_model(tmp_path / "fresh.gguf", DRAFT).read_bytes()
    text = _write_text_if_changed(tmp_path / "policy.toml", "a = 1\n")
    before = (text.stat().st_ino, text.stat().st_mtime_ns)
    assert (_write_text_if_changed(text, "a = 1\n").stat().st_ino, text.stat().st_mtime_ns) == before
    assert _write_text_if_changed(text, "a = 2\n").read_text() == "a = 2\n"


def test_a_dir_that_is_a_file_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("")
    code, _, err = specreg("demo", "--dir", str(tmp_path / "taken"), db=tmp_path / "registry.db")
    assert code == 2 and err.startswith("error: ") and "File exists" in err and len(err.splitlines()) == 1, err


@pytest.mark.slow  # two whole demos; the default suite has the one shared demo and the test above
def test_demo_again_keeps_its_files_checks_anew_and_measures_anew(tmp_path: Path) -> None:
    folder = tmp_path / "demo dir"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "200")  # one line per pair (the demo wraps at the width)
        code, out, err = specreg("demo", "--dir", str(folder), db=folder / "registry.db")
    assert code == 0, out[-2000:] + err[-2000:]
    checked = _checked(out)
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


def test_unmeasured_names_a_run_that_kept_nothing_or_a_stratum_set_aside() -> None:
    """What keeps the demo from claiming a verdict: a run that kept nothing, or a condition that
    ran but kept no round of a stratum; a measured run claims it."""
    from datetime import datetime

    from specreg.demo import unmeasured
    from specreg.schemas.bench import BenchRun, ConditionSummary, RunInfo

    info = RunInfo(run_id="r1", pair_id=1, status="complete", method="draft-simple", target_sha256="a" * 64,
                   started_at=datetime(2026, 1, 1))  # fmt: skip
    kept = ConditionSummary(condition="draft-simple", method="draft-simple", stratum="chat", status="ok", speedup=0.9)
    assert unmeasured([BenchRun(info=info, summaries=[kept])]) is None
    aside = kept.model_copy(update={"speedup": None, "n_set_aside": 3})
    assert unmeasured([BenchRun(info=info, summaries=[kept, aside])]) == (
        "run r1: every round of draft-simple in chat was set aside as contended"
    )
    busy = info.model_copy(update={"status": "contended", "status_reason": "every round measured was set aside"})
    assert unmeasured([BenchRun(info=busy)]) == "run r1 kept nothing: every round measured was set aside"


@pytest.mark.slow
def test_the_demo_beside_a_busy_neighbour_never_claims_an_unmeasured_verdict(tmp_path: Path) -> None:
    """One CPU-bound neighbour for the whole demo, contention on, a short wait: the demo either
    measured (a stratum deployed, one refused) or says it could not and how to measure again,
    exit 1 - never a verdict `decided by the measured numbers` on rounds it set aside."""
    burn = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end:\n    pass\n"
    neighbour = subprocess.Popen([sys.executable, "-c", burn])
    env = {**os.environ, "COLUMNS": "200", "SPECREG_BUSY_SHARE": "0.25"}
    env.pop("SPECREG_DB", None)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "specreg.cli", "demo", "--dir", str(tmp_path / "d"), "--busy-wait", "5s"],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
    finally:
        neighbour.kill()
        neighbour.wait()
    out = " ".join(proc.stdout.replace(" \\\n", " ").split())
    err = " ".join(proc.stderr.split())
    assert "note: waiting for a quieter machine: others use " in err, err[-3000:]
    if proc.returncode == 0:  # a machine with cores to spare: one neighbour did not make it busy
        ends = _ends(proc.stdout)
        assert {w for w, _ in ends.values()} == {"DEPLOY", "REFUSED"}, proc.stdout[-3000:]
        return
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "decided by the measured numbers" not in out and "audit verdict" not in out, out
    assert "not decided: run " in out and "the audit's verdict would not rest on measured numbers" in out, out
    assert "Measure again when the machine is quieter: specreg --db " in out and " bench admitted --pair 1 " in out, out
    assert f"or run the demo again: specreg demo --dir {tmp_path / 'd'}" in out, out
