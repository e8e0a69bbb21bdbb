"""`bench admitted --budget`: rounds after `--repeat` until every condition is decided against
`--min-speedup`, or the budget is spent (real servers on tiny models)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from _bench_helpers import ITEMS, admit, db_rows, workload
from _registry_helpers import model

from specreg.registry.store import Registry


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from specreg.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def _pair() -> tuple[int, Path]:
    home = Path(os.environ["SPECREG_HOME"])  # per test (conftest)
    target = model(home, "t.gguf")
    draft = model(home, "d.gguf", name="tiny-draft")
    with Registry(os.environ["SPECREG_DB"], show_progress=False) as reg:
        return admit(reg, target, draft), home


BASE = ("--threads", "1", "--ctx-size", "512", "--repeat", "1", "--json")


def test_a_condition_decided_after_the_planned_rounds_gets_no_more(capsys: pytest.CaptureFixture[str]) -> None:
    """Against 100x (past what the clipped interval can reach) draft-simple is `not faster` at once."""
    pid, home = _pair()
    wl = workload(home, ITEMS[:2])
    code, out, err = _main(capsys, "bench", "admitted", "--pair", str(pid), "--workload", str(wl), "--methods",
                           "draft-simple", "--budget", "5m", "--min-speedup", "100", *BASE)  # fmt: skip
    assert code == 0, err
    (run,) = json.loads(out)
    whole = {s["condition"]: s for s in run["summaries"] if s["stratum"] == "all"}
    assert whole["draft-simple"]["decision"] == "not faster"
    assert whole["draft-simple"]["decision_min_speedup"] == 100
    lo, hi = whole["draft-simple"]["decision_ci"]
    assert lo <= whole["draft-simple"]["speedup"] <= hi
    repeats = db_rows(Path(os.environ["SPECREG_DB"]), "SELECT DISTINCT repeat FROM bench_requests")
    assert [r["repeat"] for r in repeats] == [0]  # decided after round 0: no round was added
    assert run["manifest"]["settings"]["budget_s"] == 300
    code, text, _ = _main(capsys, "runs", "show", run["info"]["run_id"])
    assert "decided against 100x (measured until decided, budget 300 s): draft-simple not faster" in " ".join(
        text.split()
    )


def test_an_undecided_condition_is_measured_until_the_budget_ends(capsys: pytest.CaptureFixture[str]) -> None:
    """ngram-mod with a match length the outputs never reach drafts nothing: it runs as fast as the
    baseline (an A/A), so against 1.0x it stays undecided and rounds go on until the budget is
    spent; then it is judged like any run (it never drafted: failed)."""
    pid, home = _pair()
    wl = workload(home, ITEMS[:2])
    budget = 6.0
    t0 = time.monotonic()
    code, out, err = _main(capsys, "bench", "admitted", "--pair", str(pid), "--workload", str(wl), "--methods",
                           "ngram-mod", "--ngram", "mod-n-match=500", "--budget", f"{budget:g}s",
                           "--min-speedup", "1.0", *BASE)  # fmt: skip
    took = time.monotonic() - t0
    assert code == 1, err  # incomplete: ngram-mod never drafted
    (run,) = json.loads(out)
    db = Path(os.environ["SPECREG_DB"])
    rounds = db_rows(db, "SELECT condition, max(repeat) + 1 AS n FROM bench_requests GROUP BY condition")
    n = {r["condition"]: r["n"] for r in rounds}
    assert n["ngram-mod"] >= 2 and n["none"] == n["ngram-mod"], n  # rounds were added, baseline beside
    per_round = took / n["ngram-mod"]
    assert took <= budget + 2 * per_round + 15, (took, n)  # within the budget and one more round
    mod = next(c for c in run["conditions"] if c["spec"]["name"] == "ngram-mod")
    assert mod["status"] == "failed" and "draft" in (mod["failure"] or "")


def test_a_bad_budget_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "bench", "admitted", "--budget", "soon")
    assert code == 2 and "--budget 'soon': expected a duration such as 8m, 90s or 1.5h" in err
