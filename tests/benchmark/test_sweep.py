"""A real sweep on the bundled server: draft lengths x concurrency, decisions per stratum x concurrency.

One small session-scoped run (tests/_audit_world.py `sweep_world`, shared with audit/test_deploy.py;
tiny models, two prompts, two rounds): draft-simple at draft lengths 2 and 4, ngram-mod with a
match length the outputs never reach (so it drafts nothing and fails: a real failed condition),
each at concurrency 1 and 2, with a baseline per concurrency.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from _audit_world import specreg
from _bench_helpers import db_rows

from specreg.audit.run import run_audit
from specreg.schemas.audit import Policy

POLICY = Policy.model_validate(
    {
        "evidence": {"min_repetitions": 2},
        "speed": {"min_speedup": 0.0, "p95_tolerance_pct": 10_000},
        "memory": {"max_extra_ram_pct": 50},
        "licence": {"require_revision": False},
    }
)


@pytest.fixture(scope="module")
def sweep(sweep_world: SimpleNamespace) -> SimpleNamespace:
    """The session's one sweep (tests/_audit_world.py), shared with audit/test_deploy.py."""
    return sweep_world


def test_the_grid_runs_every_draft_length_at_every_concurrency(sweep: SimpleNamespace) -> None:
    run = sweep.run
    by = {c.spec.name: c for c in run.conditions}
    assert set(by) == {
        "none c1",
        "none c2",
        "ngram-mod c1",
        "ngram-mod c2",
        "draft-simple k2 c1",
        "draft-simple k4 c1",
        "draft-simple k2 c2",
        "draft-simple k4 c2",
    }
    for name, c in by.items():
        argv = c.argv
        assert argv[argv.index("-np") + 1] == str(c.spec.concurrency) == name[-1]
        assert len(c.warmup) == 2  # one warm-up per round (one server start per round)
        if c.spec.method == "draft-simple":
            assert argv[argv.index("--spec-draft-n-max") + 1] == str(c.spec.draft_n_max) == name.split()[1][1:]
            assert c.status == "ok", c.failure
    assert by["none c2"].status == "ok" and by["ngram-mod c1"].status == "failed"
    m = run.manifest
    assert m.request.concurrency_levels == [1, 2] and m.settings.draft_n_max == [2, 4]
    assert [s.round for s in m.observation.schedule] == [0] * 8 + [1] * 8


def test_summaries_carry_interval_and_parameters(sweep: SimpleNamespace) -> None:
    for s in sweep.run.summaries:
        if s.method == "draft-simple":
            assert s.speedup is not None and s.speedup_ci95 is not None, (s.condition, s.stratum, s.speedup_note)
            assert s.speedup_ci95[0] <= s.speedup <= s.speedup_ci95[1]
            assert s.concurrency == int(s.condition[-1]) and s.draft_n_max in (2, 4)
            assert s.expected_accepted_length and s.expected_accepted_length > 1 and s.unexplained is not None
            assert s.n_paired == (4 if s.stratum == "all" else 2)  # prompts x repetitions, paired
        if s.method == "ngram-mod":  # failed: no speed-up anywhere, only the reason
            assert s.speedup is None and s.speedup_ci95 is None and s.difference is None
            assert (s.speedup_note or "").startswith("condition failed: speculation did not run")


def test_acceptance_numbers_are_each_condition_and_stratum_own(sweep: SimpleNamespace) -> None:
    """E[L], tokens per step and the prediction of every draft length x concurrency x stratum come
    from that group's own stored requests and its condition's own mean draft length."""
    counters = {c.spec.name: c.counters for c in sweep.run.conditions}
    q = "SELECT condition, stratum, output_tokens, draft_n, draft_n_accepted FROM bench_requests WHERE ok = 1"
    rows = db_rows(sweep.db, q + " AND run_id = ?", (sweep.run.info.run_id,))
    for s in sweep.run.summaries:
        if s.method != "draft-simple":
            continue
        mine = [r for r in rows if r["condition"] == s.condition and s.stratum in ("all", r["stratum"])]
        n, a, dr = (sum(r[c] or 0 for r in mine) for c in ("output_tokens", "draft_n_accepted", "draft_n"))
        k = counters[s.condition].drafted / counters[s.condition].steps
        assert s.draft_length == pytest.approx(k) and 1.0 <= k <= s.draft_n_max
        assert s.tokens_per_step == pytest.approx(n / (n - a))
        if s.stratum != "all":  # "all" reads the per-position curve of the /metrics counters instead
            assert s.expected_accepted_length == pytest.approx(1 + a / (dr / k))
        assert s.expected_accepted_length is not None and 1.0 <= s.expected_accepted_length <= s.draft_n_max + 1
        assert s.step_cost is not None and s.predicted_speedup == pytest.approx(s.tokens_per_step / s.step_cost)
        assert s.speedup_ci95 is not None and s.unexplained is (s.speedup_ci95[0] > s.tokens_per_step + 1e-9)


def test_failed_condition_has_a_null_speedup_in_json_tables_and_plots(sweep: SimpleNamespace, tmp_path: Path) -> None:
    rid = sweep.run.info.run_id
    code, out, err = specreg("runs", "show", rid, "--json", db=sweep.db)
    assert code == 0, err
    mod = [s for s in json.loads(out)["summaries"] if s["method"] == "ngram-mod"]
    assert mod and all(s["speedup"] is None and s["speedup_ci95"] is None for s in mod)
    code, out, err = specreg("runs", "show", rid, "--report", str(tmp_path / "run.md"), db=sweep.db)
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if ln.startswith("ngram-mod c1")]
    assert lines and " - " in lines[0] and "x [" not in lines[0]
    md = (tmp_path / "run.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith(("| ngram-mod c1 | all |", "| ngram-mod c1 | chat |"))]
    assert len(rows) == 2 and all("– (condition failed: speculation did not run" in r for r in rows)
    for name in ("speedup", "concurrency", "draft-length", "acceptance"):
        assert (tmp_path / f"run-{name}.svg").is_file(), name
    from specreg.benchmark.store.digest import digest_run
    from specreg.report.plots import speedup_figure

    digest = digest_run(sweep.run)
    fig = speedup_figure(digest, 1)
    ax = fig.axes[0]
    drawn = [r for r in digest.strata if r.concurrency == 1 and r.speedup is not None and r.condition != "none c1"]
    failed = [r for r in digest.strata if r.concurrency == 1 and r.speedup is None]
    dots = [ln for ln in ax.lines if ln.get_marker() == "o"]
    assert len(dots) == len(drawn)  # one dot per measured speed-up, none for the failed condition
    assert failed and [t.get_text() for t in ax.texts].count("failed: no speed-up") == len(failed)
    assert ax.get_xscale() == "log"
    lo, hi = ax.get_xlim()
    assert abs(lo * hi - 1) < 1e-9  # centred on 1x
    every = speedup_figure(digest)  # every concurrency when none is named
    assert every is not None
    assert len([ln for ln in every.axes[0].lines if ln.get_marker() == "o"]) == len(
        [r for r in digest.strata if r.speedup is not None and not r.condition.startswith("none")]
    )


def test_audit_decides_per_stratum_and_concurrency_naming_the_draft_length(sweep: SimpleNamespace) -> None:
    report = run_audit(sweep.reg, POLICY, "test", pair_ids=[sweep.pid, sweep.mod])
    pair = next(p for p in report.pairs if p.pair_id == sweep.pid)
    assert {(o.concurrency, o.draft_n_max) for o in pair.conditions} == {(1, 2), (1, 4), (2, 2), (2, 4)}
    assert pair.concurrency == 1 and pair.draft_n_max in (2, 4) and pair.condition.endswith("c1")  # type: ignore[union-attr]
    assert pair.speedup_ci95 is not None and pair.speculative_command and "-md" in pair.speculative_command
    assert pair.rollback_command and pair.rollback_command[pair.rollback_command.index("-np") + 1] == "1"
    mod = next(p for p in report.pairs if p.pair_id == sweep.mod)
    assert not mod.passed and "speculation did not run" in mod.gate("evidence").message  # type: ignore[union-attr]
    keys = {(d.stratum, d.concurrency) for d in report.decisions}
    assert keys == {(s, c) for s in ("repetitive", "chat") for c in (1, 2)}
    for d in report.decisions:
        eligible = [c for c in d.candidates if c.eligible]
        assert all(c.concurrency == d.concurrency for c in d.candidates)
        assert not any(c.pair_id == sweep.mod for c in eligible)  # its condition failed
        if eligible:
            best = max(eligible, key=lambda c: c.speedup or 0.0)
            assert (d.condition, d.draft_n_max, d.speedup) == (best.condition, best.draft_n_max, best.speedup)
            assert d.draft_n_max in (2, 4) and d.choice == f"draft-simple (pair {sweep.pid})"
        else:
            assert d.choice == "none" and d.draft_n_max is None
