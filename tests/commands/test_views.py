"""What the terminal shows (issue 25), at 80 and 120 columns, on the shared real runs.

Rows stay told apart when the terminal is narrow (a sweep's condition labels, SHA-256 prefixes,
quants), mismatches stand out, `runs` says what each run found, `audit` names the run it judged,
a rejection reads in one screen, and the progress display never runs a line into its bar.
"""

from __future__ import annotations

import io
import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from _audit_world import AuditWorld
from _cli_helpers import run_specreg
from rich.cells import cell_len

from specreg.testing import ModelSpec, write_model

SHA12 = re.compile(r"\b[0-9a-f]{12}\b")
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _fits(text: str, columns: int) -> None:
    for line in text.splitlines():
        assert cell_len(line) <= columns, f"{cell_len(line)} > {columns}: {line!r}"


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str, str]]:
    """`specreg --db DB ARGS` in this process at a given width: (exit code, stdout, stderr)."""

    def run(db: Path, columns: int, *args: str, **env: str) -> tuple[int, str, str]:
        done = run_specreg(["--db", db, *args], env={**os.environ, "COLUMNS": str(columns), **env})
        return done.returncode, done.stdout, done.stderr

    return run


@pytest.mark.parametrize("columns", [80, 120])
def test_a_sweep_shows_every_condition_label_whole(
    sweep_world: SimpleNamespace, cli: Callable[..., tuple[int, str, str]], columns: int
) -> None:
    code, out, err = cli(sweep_world.db, columns, "runs", "show", sweep_world.run.info.run_id)
    assert code == 0, err
    _fits(out, columns)
    names = [c.spec.name for c in sweep_world.run.conditions]
    assert len(set(names)) == len(names) == 8
    starts = [ln.split("  ")[0] for ln in out.splitlines()]
    for name in names:  # each label heads its rows in both tables, never cut to `draft-…`
        assert starts.count(name) == 2, (name, out)
    assert "draft-…" not in out and "ngram-…" not in out
    assert "p95 ms" in out  # a column that gave way moved beneath its row, not out of the view


@pytest.mark.parametrize("columns", [80, 120])
def test_runs_lists_result_and_best_speedup(
    sweep_world: SimpleNamespace, cli: Callable[..., tuple[int, str, str]], columns: int
) -> None:
    code, out, err = cli(sweep_world.db, columns, "runs")
    assert code == 0, err
    _fits(out, columns)
    header, row = out.splitlines()[:2]
    assert "result" in header and "best speed-up" in header
    best = max(
        (s for s in sweep_world.run.summaries if s.stratum == "all" and s.method != "none" and s.status == "ok"),
        key=lambda s: s.speedup or 0.0,
    )
    assert f"{best.speedup:.2f}x {best.condition}" in row, out
    assert re.search(r"\b(faster|slower|no difference|outputs differ)\b", row), row


@pytest.mark.parametrize("columns", [80, 120])
def test_pairs_show_a_sha_prefix_for_every_target_and_draft(
    audit_world: AuditWorld, tmp_path: Path, cli: Callable[..., tuple[int, str, str]], columns: int
) -> None:
    db = audit_world.copy(tmp_path / "r.db")
    code, out, err = cli(db, columns, "pairs")
    assert code == 0, err
    _fits(out, columns)
    rows = [ln for ln in out.splitlines()[1:] if re.match(r"\s*\d+\s", ln)]
    assert len(rows) == len(audit_world.pairs)
    for ln in rows:
        cells = re.split(r"\s{2,}", ln.strip())
        target, draft = cells[1], cells[2]
        assert SHA12.match(target), ln  # never `…`
        assert draft == "-" or SHA12.match(draft), ln


@pytest.mark.parametrize("columns", [80, 200])
def test_artifacts_never_cut_the_quant(
    audit_world: AuditWorld, tmp_path: Path, cli: Callable[..., tuple[int, str, str]], columns: int
) -> None:
    db = audit_world.copy(tmp_path / "r.db")
    with sqlite3.connect(db) as conn:  # what a Q4_K_M file records (the tiny models are F32)
        conn.execute("UPDATE artifacts SET file_type_name = 'MOSTLY_Q4_K_M' WHERE name = 'audit-target'")
    code, out, err = cli(db, columns, "artifacts")
    assert code == 0, err
    _fits(out, columns)
    assert "quant" in out.splitlines()[0]
    row = next(ln for ln in out.splitlines() if "audit-target" in ln)
    assert re.search(r"\bQ4_K_M\b", row), out
    assert "MOSTLY_" not in out


@pytest.mark.parametrize("columns", [80, 120])
def test_audit_names_the_run_it_judged(
    audit_world: AuditWorld, tmp_path: Path, cli: Callable[..., tuple[int, str, str]], columns: int
) -> None:
    db = audit_world.copy(tmp_path / "r.db")
    code, out, err = cli(db, columns, "audit", "--all")
    assert code in (0, 1), err
    _fits(out, columns)
    assert f"judged run {audit_world.run_id}" in out, out
    # the default policy wants 3 repetitions, the world ran 2: evidence fails, and the gates that
    # could not be judged without it are one line, not three copies of its reason
    assert "evidence: 2 repetitions < policy minimum 3" in out, out
    assert "equivalence, speed, memory: not judged without evidence" in out
    assert "no evidence:" not in out
    assert re.search(r"evidence, equivalence, speed, memory$", out, re.M)  # the gates, never cut


def test_a_run_decided_by_the_older_sequence_says_so(
    sweep_world: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run records the method that decided it (decision/bar.py); one that records none was
    decided by the two-sided sequence before it, and `runs show` says so beside its decisions."""
    from specreg.commands.views.run_detail import show_run

    def shown(run: object) -> str:
        buf = io.StringIO()
        monkeypatch.setattr("sys.stdout", buf)
        show_run(run)  # type: ignore[arg-type]
        return " ".join(buf.getvalue().split())

    monkeypatch.setenv("COLUMNS", "120")
    run = sweep_world.run.model_copy(deep=True)
    assert "decided against 1.05x (after the planned rounds):" in shown(run)
    for s in run.summaries:
        s.decision_method = None
    assert (
        "decided against 1.05x (after the planned rounds; an older run, decided by the two-sided sequence):"
        in shown(run)
    )


def test_a_mismatch_is_marked_and_coloured(
    sweep_world: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from specreg.commands.views.cells import MISMATCH_MARK
    from specreg.commands.views.run_detail import show_run

    run = sweep_world.run.model_copy(deep=True)
    s = next(s for s in run.summaries if s.condition == "draft-simple k4 c2" and s.stratum == "all")
    s.first_mismatch, s.mismatch_context, s.n_equal = "p0#1 @ token 11, char 40", "token 11: [330] vs [115]", 1
    s.n_compared = 4
    for columns in (80, 120):
        monkeypatch.setenv("COLUMNS", str(columns))
        monkeypatch.setenv("FORCE_COLOR", "1")
        buf = io.StringIO()
        monkeypatch.setattr("sys.stdout", buf)
        show_run(run)
        text = buf.getvalue()
        plain = ANSI.sub("", text)
        _fits(plain, columns)
        assert f"{MISMATCH_MARK} 1/4" in plain  # in the table (or beneath its row at 80)
        line = next(ln for ln in plain.splitlines() if "mismatch:" in ln)
        assert line.startswith(f"{MISMATCH_MARK} mismatch: draft-simple k4 c2 / all: 3 outputs of 4 differ")
        assert "token 11" in plain and "[330] vs [115]" in plain
        assert re.search(r"\x1b\[1;31m" + MISMATCH_MARK, text), "the marker is bold red"


@pytest.fixture(scope="module")
def cross_family(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A llama (SPM) target and a draft of another tokenizer family (BPE, qwen2): rejected at vocab.type."""
    d = tmp_path_factory.mktemp("cross-family")
    target = ModelSpec(name="target-llama", license="apache-2.0")
    write_model(d / "t.gguf", target)
    write_model(d / "d.gguf", target.but(name="draft-gpt2", vocab_type="gpt2", pre="gpt-2", architecture="qwen2"))
    return SimpleNamespace(folder=d, target=d / "t.gguf", draft=d / "d.gguf")


@pytest.mark.parametrize("columns", [80, 120])
def test_a_rejection_reads_in_one_screen(
    cross_family: SimpleNamespace, tmp_path: Path, cli: Callable[..., tuple[int, str, str]], columns: int
) -> None:
    db = tmp_path / "r.db"
    code, out, err = cli(db, columns, "check", "pair", str(cross_family.target), str(cross_family.draft))
    assert code == 1, err
    _fits(out, columns)
    lines = out.splitlines()
    assert len(lines) <= 30, out  # one screen (it was ~70 lines on tiny models, ~90 on real ones)
    checks = [ln for ln in lines if re.match(r"(fail|warn|info|pass)  ", ln)]
    assert checks[0].startswith("fail  vocab.type"), out  # the decisive failure first
    folded = next(ln for ln in lines if "follow from vocab.type" in ln)
    n = int(re.search(r"(\d+) more checks", folded).group(1))  # type: ignore[union-attr]
    assert n >= 5 and "--verbose shows them" in out
    assert not any(re.match(r"(fail|warn)  vocab\.(tokens|token_types|pre|merges)\b", ln) for ln in lines)
    assert re.search(r"\d+ checks passed; --verbose shows them", out)
    assert "target  " in lines[0] and "target-llama" in lines[0] and SHA12.search(lines[0])
    # evidence: whole JSON values (or a list cut between its elements), never a value cut mid-way
    assert not re.search(r'"[^"\s]*…[^"]*$', out, re.M)
    code, verbose, err = cli(db, columns, "check", "pair", str(cross_family.target), str(cross_family.draft), "-v")
    assert code == 1, err
    for code_name in ("vocab.tokens", "vocab.token_types", "vocab.pre", "vocab.merges", "vocab.bos"):
        assert re.search(rf"^(fail|warn|info|pass)  {re.escape(code_name)}\b", verbose, re.M), code_name
    assert len(verbose.splitlines()) > len(lines)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _progress_run(monkeypatch: pytest.MonkeyPatch, columns: int, n_rounds: int = 2, **view_args: object) -> list[str]:
    """Drive the bench progress display through a 2-round run of 3 conditions on a terminal of
    `columns`; the screen's lines as they were written (split at every CR and LF, colours removed)."""
    from datetime import datetime

    from specreg.commands.views.progress import ProgressView
    from specreg.schemas.bench import ConditionRun, ConditionSpec, RunInfo, SpecCounters
    from specreg.schemas.request_row import RequestRow

    term = _Tty()
    monkeypatch.setattr("sys.stderr", term)
    monkeypatch.setenv("COLUMNS", str(columns))
    names = ["none c1", "draft-simple k16 c2", "ngram-mod c2"]
    conds = [
        ConditionRun(idx=i, spec=ConditionSpec(name=n, method=n.split()[0]), status="running")
        for i, n in enumerate(names)
    ]
    info = RunInfo(run_id="20260101-000000-abcdef", pair_id=1, status="running", method="draft-simple",
                   target_sha256="0" * 64, started_at=datetime(2026, 1, 1))  # fmt: skip
    view = ProgressView(**view_args)  # type: ignore[arg-type]
    with view:
        view.run_started(info, conds, 2)
        for rnd in range(n_rounds):
            for c in conds:
                view.condition_started(c)
                view.progress.refresh()
                row = RequestRow(condition_idx=c.idx, condition=c.spec.name, prompt_id="p", stratum="chat",
                                 repeat=rnd, started_at=datetime(2026, 1, 1), ok=True)  # fmt: skip
                view.request_done(c, row)
                view.progress.refresh()
                if rnd == n_rounds - 1:
                    c.status = "ok" if c.idx != 2 else "failed"
                    c.failure = "speculation did not run: 0 tokens drafted over 2 requests" if c.idx == 2 else None
                    c.counters = SpecCounters(drafted=10, accepted=4, steps=3) if c.idx == 1 else None
                view.condition_done(c)
                view.progress.refresh()
        view.run_done(info.run_id, "complete", None)
    return [ln for ln in re.split(r"[\r\n]", ANSI.sub("", term.getvalue())) if ln.strip()]


@pytest.mark.parametrize("columns", [80, 120])
def test_progress_shows_round_condition_eta_and_never_runs_into_the_bar(
    monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    lines = _progress_run(monkeypatch, columns, rounds=2)
    bars = [ln for ln in lines if "━" in ln]
    assert bars, lines
    assert any("round 1/2" in ln and "cond 2/3" in ln for ln in bars), bars
    assert any("round 2/2" in ln for ln in bars) and all("eta " in ln for ln in bars)
    assert all(re.search(r"\d+/6\b", ln) for ln in bars)
    for ln in lines:
        assert cell_len(ln) <= columns, ln
    done = [ln for ln in lines if re.match(r"\s+(ok|failed)\s{2,}", ln)]
    assert [ln.split()[1] for ln in done] == ["none", "draft-simple", "ngram-mod"], lines
    assert all("━" not in ln for ln in done)  # a finished condition's line never shares the bar's
    assert "acceptance 40.0%" in done[1]
    assert "failed  ngram-mod c2: speculation did not run" in done[2]
    assert any(ln.startswith("draft-simple k16 c2") for ln in lines)  # the status line above the bar


def test_progress_with_a_budget_shows_what_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _progress_run(monkeypatch, 80, n_rounds=3, rounds=2, budget_s=480.0)
    bars = [ln for ln in lines if "━" in ln]
    assert bars and all(re.search(r"budget 0:0[78]:\d\d left", ln) for ln in bars), bars
    extra = [ln for ln in bars if "round 3 (budget)  cond" in ln]  # a round past the plan, measured until decided
    assert extra, bars
    assert any(int(m.group(1)) < int(m.group(2)) for ln in extra if (m := re.search(r"(\d+)/(\d+)", ln))), extra
