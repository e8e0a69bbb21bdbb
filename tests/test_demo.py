"""`specreg demo` end to end on the bundled llama.cpp server, and re-running it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from _audit_world import specreg

from specreg.registry.store import Registry

BUDGET_S = 120  # the budget for the whole demo on 2 cores


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
    assert "ADMITTED" in out and out.count("REJECTED") == 2
    assert "vocab.tokens" in out and "eagle3.target_hidden_size" in out  # the reasons are shown
    assert "audit verdict:" in out and ("PASS" in out or "FAIL" in out)
    assert "deploy for repetitive:" in out and "deploy for chat:" in out
    report = folder / "report.html"
    assert f"report:   {report}" in out
    assert f"logs:     {folder / 'runs'}" in out  # every file the demo wrote is named
    assert "\naudit verdict: " in out and "(tiny random models may well be slower with speculation)" in out
    html = report.read_text("utf-8")
    assert html.count("<svg") == 3 and "<script" not in html
    assert (folder / "registry.db").is_file() and (folder / "policy.toml").is_file()
    assert any((folder / "runs").iterdir())  # server logs stay in DIR

    models = sorted((folder / "models").glob("*.gguf"))
    assert len(models) == 4
    before = {m.name: (m.stat().st_mtime_ns, m.read_bytes()) for m in models}
    code, out2, err2 = specreg("demo", "--dir", str(folder), db=folder / "registry.db")
    assert code == 0, out2[-2000:] + err2[-2000:]
    after = {m.name: (m.stat().st_mtime_ns, m.read_bytes()) for m in sorted((folder / "models").glob("*.gguf"))}
    assert after == before  # same files, not even rewritten
    with Registry(folder / "registry.db", show_progress=False) as reg:
        assert len(reg.artifacts(with_summary=False)) == 4
        pairs = reg.pairs(with_checks=False)
        assert len(pairs) == 5 and all(p.n_verdicts == 2 for p in pairs)  # checked again, no duplicates
        runs = reg.conn.execute("SELECT count(*) FROM bench_runs").fetchone()[0]
        assert runs == 2  # each demo measures anew; the audit reads the newest run
