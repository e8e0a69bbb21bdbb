"""`bench continue`: a run that stopped short of a decision measures on from its stored rows
(real servers on tiny models): the same run, nothing measured again, seeds going on; any
difference from what the run measured is refused in one line naming it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from _bench_helpers import ITEMS, admit, db_rows, workload
from _cli_helpers import main_captured as _main
from _registry_helpers import model

from specreg.registry.store import Registry

BASE = ("--threads", "1", "--ctx-size", "512", "--repeat", "1", "--warmup", "1")


def _pair(home: Path) -> int:
    target = model(home, "t.gguf")
    draft = model(home, "d.gguf", name="tiny-draft")
    with Registry(home / "registry.db", show_progress=False) as reg:
        return admit(reg, target, draft)


def _keys(db: Path, run_id: str) -> list[tuple[int, str, int]]:
    rows = db_rows(
        db, "SELECT condition_idx, prompt_id, repeat FROM bench_requests WHERE run_id = ? ORDER BY id", (run_id,)
    )
    return [(r["condition_idx"], r["prompt_id"], r["repeat"]) for r in rows]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One registry holding a one-round draft-simple run against 1.5x, undecided (3 pairs: a
    decision takes at least 10): each test copies it. The bar is far above this pair's speed-up
    (a tiny draft as deep as its target: below 1x), so the continuation's projection names a
    decision however noisy its first round (against 1.0x, a noisy round once read "not
    decidable within 40 more rounds" and the continuation gave the condition up)."""
    from specreg.cli import main

    home = tmp_path_factory.mktemp("stopped")
    pid = _pair(home)
    wl = workload(home, ITEMS)
    env = {"SPECREG_DB": str(home / "registry.db"), "SPECREG_HOME": str(home)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with pytest.raises(SystemExit):
            main(["bench", "admitted", "--pair", str(pid), "--workload", str(wl), "--methods", "draft-simple",
                  "--min-speedup", "1.5", *BASE, "--json"])  # fmt: skip
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    (run_id,) = [r["run_id"] for r in db_rows(home / "registry.db", "SELECT run_id FROM bench_runs")]
    return home, run_id


def _copy(stopped: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    home, run_id = stopped
    db = tmp_path / "registry.db"
    shutil.copy(home / "registry.db", db)
    monkeypatch.setenv("SPECREG_DB", str(db))
    return db, run_id


def test_an_undecided_run_continues_to_a_decision_as_one_run(
    stopped: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench continue` appends rounds to the same run, each (condition, prompt, repetition)
    measured once, repetitions going on from the last with their seeds, until draft-simple is
    decided (a run of fixed rounds becomes one measured until decided: its budget is the
    continuation's); `runs show` times both sessions."""
    db, run_id = _copy(stopped, tmp_path, monkeypatch)
    before = _keys(db, run_id)
    code, out, err = _main(capsys, "bench", "continue", run_id[:10], "--budget", "40s", "--json")
    assert code in (0, 1), err
    run = json.loads(out)
    assert run["info"]["run_id"] == run_id
    whole = {s["condition"]: s for s in run["summaries"] if s["stratum"] == "all"}
    assert whole["draft-simple"]["decision"] == "not faster", whole["draft-simple"]
    after = _keys(db, run_id)
    assert after[: len(before)] == before  # the stored rows are kept as they were, in order
    assert len(set(after)) == len(after)  # nothing measured twice
    first = max(r for _, _, r in before) + 1
    (cont,) = run["manifest"]["continued"]
    assert cont["first_repeat"] == first and cont["budget_s"] == 40
    assert run["manifest"]["settings"]["budget_s"] == 40  # the run's budget: both sessions' (the first had none)
    seeds = db_rows(db, "SELECT DISTINCT repeat, seed FROM bench_requests WHERE run_id = ?", (run_id,))
    assert all(r["seed"] == 42 + r["repeat"] for r in seeds)  # the stream goes on
    assert max(r["repeat"] for r in seeds) >= first
    code, text, _ = _main(capsys, "runs", "show", run_id)
    assert code == 0 and "measured requests" in text and "in 2 sessions" in text, text
    code, out, _ = _main(capsys, "bench", "continue", run_id)  # decided: nothing left, not an error
    assert code == 0 and "nothing to measure on" in out


def _tamper(db: Path, run_id: str, path: str, value: object) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE bench_runs SET manifest_json = json_set(manifest_json, ?, ?) WHERE run_id = ?",
            (path, value, run_id),
        )


def test_a_difference_from_what_the_run_measured_is_refused_naming_it(
    stopped: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stored manifest says what was measured (here edited as if it had been measured
    elsewhere): another server build, another machine, other prompts, a changed target file -
    each is one line naming it, exit 2, and the run is left as it was."""
    home, _ = stopped
    db, run_id = _copy(stopped, tmp_path, monkeypatch)
    n = len(_keys(db, run_id))
    _tamper(db, run_id, "$.runtime.version_text", "version: 11434 (abc1234)")
    code, _, err = _main(capsys, "bench", "continue", run_id, "--budget", "10s")
    assert code == 2 and "cannot be continued here: server build 11549 != 11434" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3
    db, run_id = _copy(stopped, tmp_path, monkeypatch)
    _tamper(db, run_id, "$.hardware.cpu_model", "Some Other CPU")
    code, _, err = _main(capsys, "bench", "continue", run_id, "--budget", "10s")
    assert code == 2 and "another hardware class:" in err and "Some Other CPU" in err, err
    db, run_id = _copy(stopped, tmp_path, monkeypatch)
    _tamper(db, run_id, "$.request.workload_sha256", "0" * 64)
    code, _, err = _main(capsys, "bench", "continue", run_id, "--budget", "10s")
    assert code == 2 and "workload changed: sha256" in err and "!= 000000000000" in err, err
    code, _, err = _main(capsys, "bench", "continue", run_id, "--budget", "10s", "--methods", "eagle3")
    assert code == 2 and "--methods eagle3: run" in err, err
    assert len(_keys(db, run_id)) == n
    status = db_rows(db, "SELECT status FROM bench_runs WHERE run_id = ?", (run_id,))[0]["status"]
    assert status in ("complete", "incomplete")  # left as it was
    # a changed target: the bytes the run measured are gone
    db, run_id = _copy(stopped, tmp_path, monkeypatch)
    target = home / "t.gguf"
    saved = target.read_bytes()
    try:
        target.write_bytes(saved[:-8] + b"\x00" * 8)
        code, _, err = _main(capsys, "bench", "continue", run_id, "--budget", "10s")
    finally:
        target.write_bytes(saved)
    assert code == 2 and "cannot be continued here: target file changed: sha256" in err, err


def _bench_argv(pid: int, wl: Path, seed: int, budget: str = "60s") -> list[str]:
    return ["bench", "admitted", "--pair", str(pid), "--workload", str(wl), "--methods", "draft-simple",
            "--budget", budget, "--min-speedup", "1.0", "--seed", str(seed), *BASE]  # fmt: skip


def _count(db: Path, table: str) -> int:
    try:
        return int(db_rows(db, f"SELECT count(*) AS n FROM {table}")[0]["n"]) if db.exists() else 0
    except sqlite3.OperationalError:  # not created yet
        return 0


def _kill_after(argv: list[str], db: Path, *, rows: int = 0, seconds: float | None = None) -> str:
    """Run `specreg ARGV` as its own process and `kill -9` it once its run is stored and then
    `rows` requests are (or `seconds` into the run, whichever comes first; at once if it ended
    by itself); returns the run's id."""
    runs, requests = _count(db, "bench_runs"), _count(db, "bench_requests")
    proc = subprocess.Popen([sys.executable, "-m", "specreg", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=os.environ.copy())  # fmt: skip
    try:
        t0 = time.monotonic()
        while proc.poll() is None and _count(db, "bench_runs") == runs and time.monotonic() - t0 < 60:
            time.sleep(0.01)
        t0 = time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < (seconds if seconds is not None else 60):
            if rows and _count(db, "bench_requests") - requests >= rows:
                break
            time.sleep(0.01)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    return str(db_rows(db, "SELECT run_id FROM bench_runs ORDER BY rowid DESC LIMIT 1")[0]["run_id"])


def _decision(run: dict) -> str:
    whole = {s["condition"]: s for s in run["summaries"] if s["stratum"] == "all"}
    return str(whole["draft-simple"]["decision"])


def test_a_killed_run_is_aborted_with_its_rows_and_continues_from_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kill -9` in the middle of a `--budget` run: the next command marks it aborted, stops its
    server and draws its summaries from its rows; `bench continue` then measures on from them -
    no stored row lost, none measured twice."""
    home = Path(os.environ["SPECREG_HOME"])
    db = Path(os.environ["SPECREG_DB"])
    assert db == home / "registry.db"  # conftest's
    pid = _pair(home)
    wl = workload(home, ITEMS)
    run_id = _kill_after(_bench_argv(pid, wl, 42), db, rows=5)
    before = _keys(db, run_id)
    assert len(before) >= 5
    code, text, _ = _main(capsys, "runs", "show", run_id)
    flat = " ".join(text.split())
    assert "aborted" in flat and "ended without finishing" in flat, flat
    # the command that measures on; with the budget still needed when one round's spread lets the
    # projection name it (a noisy first round may not: the command then keeps the run's own budget)
    assert f"specreg bench continue {run_id}" in flat, flat
    code, out, err = _main(capsys, "bench", "continue", "latest", "--budget", "40s", "--json")
    assert code in (0, 1), err
    run = json.loads(out)
    assert run["manifest"]["continued"][0]["previous_status"] == "aborted"
    after = _keys(db, run_id)
    assert after[: len(before)] == before and len(set(after)) == len(after)
    assert len(after) > len(before) and run["info"]["status"] in ("complete", "incomplete"), err
    # (the decision class against a straight run of the same seed: the slow test below, ten trials)


@pytest.mark.slow  # ten seeded trials, each a straight run and a killed one continued: about two minutes
def test_a_run_killed_at_a_random_point_then_continued_decides_as_a_straight_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 48's target: `kill -9` at a random point of a `--budget` run, then `bench continue`,
    reaches the decision class of an uninterrupted run with the same seed in at least 9 of 10
    seeded trials, with no stored row lost or measured twice."""
    import random

    home = Path(os.environ["SPECREG_HOME"])
    db = Path(os.environ["SPECREG_DB"])
    pid = _pair(home)
    # nine prompts a round: a round's pairs are enough to plan from (three pairs project so loosely
    # that the plan may give a condition up after one round, in either arm alike)
    wl = workload(home, [{**it, "id": f"{it['id']}-{i}"} for i in range(3) for it in ITEMS])
    rng = random.Random(48)
    same, lines = 0, []
    for seed in range(10):
        code, out, said = _main(capsys, *_bench_argv(pid, wl, seed), "--json")
        assert code in (0, 1), said
        (straight,) = json.loads(out)
        err = ""
        wall = (datetime.fromisoformat(straight["info"]["finished_at"])
                - datetime.fromisoformat(straight["info"]["started_at"])).total_seconds()  # fmt: skip
        at = rng.uniform(0.0, wall)  # into the run's life: from its row's creation
        run_id = _kill_after(_bench_argv(pid, wl, seed), db, seconds=at)
        assert run_id != straight["info"]["run_id"]
        before = _keys(db, run_id)
        code, out, _ = _main(capsys, "runs", "show", run_id, "--json")  # reaps it
        stored = json.loads(out)
        status = stored["info"]["status"]
        if status == "complete" and _decision(stored) != "undecided":  # it ended before the kill
            split = _decision(stored)
        else:
            code, out, err = _main(capsys, "bench", "continue", run_id, "--budget", "60s", "--json")
            assert code in (0, 1), err
            split = _decision(json.loads(out))
        after = _keys(db, run_id)
        assert after[: len(before)] == before and len(set(after)) == len(after), seed
        same += split == _decision(straight)
        why = [ln.strip() for ln in (err + said).splitlines() if "cannot be decided" in ln or "budget:" in ln]
        if "undecided" in (split, _decision(straight)):
            lines.append(f"seed {seed}: why undecided: {' | '.join(why)[:400]}")
        lines.append(f"seed {seed}: killed at {at:.1f} s of {wall:.1f} s ({len(before)} rows kept, {status}); "
                     f"straight {_decision(straight)}, continued {split}")  # fmt: skip
    print("\n".join(lines))
    assert same >= 9, lines
