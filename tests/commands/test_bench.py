"""`specreg bench admitted`, `runs`, `runs show` as real processes: output, exit codes, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from _bench_helpers import ITEMS, admit, db_rows, workload
from _cli_helpers import main_captured as _main
from _registry_helpers import model

from specreg.registry.store import Registry

SPECREG = [sys.executable, "-m", "specreg.cli"]


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "SPECREG_HOME": str(home), "SPECREG_DB": str(home / "r.db"), "COLUMNS": "200"}


def _run(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SPECREG, *args], capture_output=True, text=True, env=_env(home), timeout=timeout)


def _pair(home: Path, **draft: object) -> int:
    target = model(home, "t.gguf")
    d = model(home, "d.gguf", **({"name": "tiny-draft"} | draft))
    with Registry(home / "r.db", show_progress=False) as reg:
        return admit(reg, target, d)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _home() -> Path:
    return Path(os.environ["SPECREG_HOME"])  # set per test by conftest's autouse fixture


def _pair_here(**draft: object) -> int:
    home = _home()
    target = model(home, "t.gguf")
    d = model(home, "d.gguf", **({"name": "tiny-draft"} | draft))
    with Registry(os.environ["SPECREG_DB"], show_progress=False) as reg:
        return admit(reg, target, d)


def test_bench_json_then_runs_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    pid = _pair_here()
    wl = workload(_home(), ITEMS[:2])
    code, out, err = _main(
        capsys,
        "bench",
        "admitted",
        "--pair",
        str(pid),
        "--workload",
        str(wl),
        "--methods",
        "draft-simple",
        "--threads",
        "1",
        "--ctx-size",
        "512",
        "--json",
    )
    assert code == 0, err
    (run,) = json.loads(out)
    assert run["info"]["status"] == "complete" and "requests" not in run
    rid = run["info"]["run_id"]
    draft = next(s for s in run["summaries"] if s["condition"] == "draft-simple" and s["stratum"] == "all")
    assert draft["acceptance"] == 1.0 and draft["n_equal"] == 6  # 2 prompts x the default 3 repetitions
    assert draft["n_paired"] == 6 and len(draft["speedup_ci95"]) == 2 and draft["concurrency"] == 1
    lo, hi = draft["speedup_ci95"]
    assert lo <= draft["speedup"] <= hi
    assert run["manifest"]["settings"]["repeat"] == 3 and run["manifest"]["observation"]["order"] == "rounds"
    assert "draft-simple" in err and "ok" in err  # progress lines go to stderr
    code, out, _ = _main(capsys, "runs", "--json")
    assert code == 0 and [r["run_id"] for r in json.loads(out)] == [rid]
    code, out, err = _main(capsys, "runs", "show", rid[:15])
    assert code == 0, err
    assert rid in out and "complete" in out and "100.0%" in out and "6/6" in out and "reference" in out
    # client timings beside the server's own per-token time; the chat prompt compares by text alone
    assert all(h in out for h in ("TTFT ms", "ITL p50", "ITL p95", "TPOT ms", "srv ms/tok", "TPOT<srv"))
    assert "draft-simple / chat: 3 of 3 outputs compared by text only" in out
    code, out, _ = _main(capsys, "runs", "show", rid, "--json")
    full = json.loads(out)
    assert len(full["requests"]) == 12 and full["manifest"]["request"]["workload"] == str(wl)
    code, _, err = _main(capsys, "runs", "show", "nope")
    assert code == 2 and "no benchmark run 'nope'" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--pair", "7"], "pair 7 has never been checked"),
        (["--workload", "nope.jsonl"], "workload 'nope.jsonl' is neither a built-in name nor a file"),
        (["--methods", "draft-eagle3"], "method draft-eagle3 is not available for this pair"),
        (["--ngram", "size-n=3"], "--ngram 'size-n=3': expected NAME=VALUE"),
        (["--server", "/nonexistent/llama-server"], "server binary /nonexistent/llama-server does not exist"),
        (["--repeat", "0"], "--repeat: Input should be greater than or equal to 1"),
        (["--concurrency", "1,x"], "--concurrency '1,x': expected whole numbers separated by commas"),
        (["--concurrency", "0,4"], "--concurrency: every concurrency must be at least 1"),
        (["--draft-max", "4,-1"], "--draft-max: every draft length must be >= 0"),
        (["--order", "random"], "--order: Input should be 'rounds' or 'blocked'"),
    ],
)
def test_bad_requests_are_one_line_errors(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    _pair_here()
    code, _, err = _main(capsys, "bench", "admitted", *args)
    assert code == 2 and needle in err and "Traceback" not in err
    assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1
    assert db_rows(Path(os.environ["SPECREG_DB"]), "SELECT count(*) AS n FROM bench_runs")[0]["n"] == 0


def test_bad_workload_line_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    _pair_here()
    bad = _home() / "bad.jsonl"
    bad.write_text('{"id": "a", "stratum": "chat", "prompt": "x"}\n{"id": "b", "stratum": "chat", "promt": "x"}\n')
    code, _, err = _main(capsys, "bench", "admitted", "--workload", str(bad))
    assert code == 2 and "bad.jsonl:2: promt: Extra inputs are not permitted" in err.replace("\n", "")


def test_rejected_pair_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    pid = _pair_here(extra_tokens=200)
    code, _, err = _main(capsys, "bench", "admitted", "--pair", str(pid))
    assert code == 2 and f"pair {pid} (draft-simple) was rejected, not benchmarked" in err


def _start_long_bench(home: Path, pid: int) -> subprocess.Popen[str]:
    """The bench as a terminal's foreground job: SIGINT not ignored. A shell starts a background
    job (`pytest &`) with SIGINT ignored, and an ignored signal stays ignored across exec, so
    the child would run all 400 repeats; a caught one is reset to the default there."""
    wl = workload(home, ITEMS[:1])
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _popen_long_bench(home, pid, wl)
    finally:
        signal.signal(signal.SIGINT, previous)


def _popen_long_bench(home: Path, pid: int, wl: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *SPECREG,
            "bench",
            "admitted",
            "--pair",
            str(pid),
            "--workload",
            str(wl),
            "--repeat",
            "400",
            "--order",
            "blocked",  # one long-lived server: the pid the test reads is the one it kills
            "--methods",
            "draft-simple",
            "--threads",
            "1",
            "--ctx-size",
            "512",
        ],
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_rows(home: Path, proc: subprocess.Popen[str], n: int = 3, timeout: float = 60) -> list[int]:
    """Wait until `n` request rows are stored; returns the recorded server pids."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if (home / "r.db").exists():
            try:
                rows = db_rows(home / "r.db", "SELECT count(*) AS n FROM bench_requests")[0]["n"]
                pids = [
                    r["server_pid"]
                    for r in db_rows(
                        home / "r.db",
                        "SELECT server_pid FROM bench_conditions WHERE status = 'running' AND server_pid IS NOT NULL",
                    )
                ]
            except Exception:  # tables not created yet
                rows, pids = 0, []
            if rows >= n and pids:
                return pids
        time.sleep(0.05)
    raise AssertionError("no rows written in time")


def test_ctrl_c_saves_the_run_as_cancelled_and_stops_servers(tmp_path: Path) -> None:
    pid = _pair(tmp_path)
    proc = _start_long_bench(tmp_path, pid)
    servers = _wait_rows(tmp_path, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err
    (run,) = db_rows(tmp_path / "r.db", "SELECT * FROM bench_runs")
    assert run["status"] == "cancelled" and "interrupted" in run["status_reason"]
    kept = db_rows(tmp_path / "r.db", "SELECT count(*) AS n FROM bench_requests")[0]["n"]
    assert 3 <= kept < 800
    statuses = {r["name"]: r["status"] for r in db_rows(tmp_path / "r.db", "SELECT name, status FROM bench_conditions")}
    assert "cancelled" in statuses.values()
    assert not any(_alive(s) for s in servers)
    assert db_rows(tmp_path / "r.db", "SELECT count(*) AS n FROM bench_summaries")[0]["n"] > 0


def test_sigkill_leaves_an_orphan_that_the_next_start_aborts(tmp_path: Path) -> None:
    pid = _pair(tmp_path)
    proc = _start_long_bench(tmp_path, pid)
    servers = _wait_rows(tmp_path, proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert all(_alive(s) for s in servers)  # the server outlived specreg (own session)
    kept = db_rows(tmp_path / "r.db", "SELECT count(*) AS n FROM bench_requests")[0]["n"]
    listing = _run(tmp_path, "runs", "--json")  # the next start
    (run,) = json.loads(listing.stdout)
    assert run["status"] == "aborted" and f"stopped orphaned server pid {servers[0]}" in run["status_reason"]
    deadline = time.monotonic() + 10
    while any(_alive(s) for s in servers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(s) for s in servers)
    assert db_rows(tmp_path / "r.db", "SELECT count(*) AS n FROM bench_requests")[0]["n"] == kept >= 3
    conds = db_rows(tmp_path / "r.db", "SELECT status FROM bench_conditions WHERE server_pid = ?", (servers[0],))
    assert conds[0]["status"] == "aborted"


def test_vocab_only_pair_is_listed_up_front_and_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    """`bench admitted` without --pair: the README's form. A vocab-only pair is named once, before
    any run, and skipped; the exit code is the runs' (0 here), never 2 for the skipped pair."""
    good = _pair_here()
    vocab = model(_home(), "v.gguf", vocab_only=True, name="vocab-only")
    with Registry(os.environ["SPECREG_DB"], show_progress=False) as reg:
        bad = admit(reg, _home() / "t.gguf", vocab)
    wl = workload(_home(), ITEMS[:1])
    code, out, err = _main(
        capsys, "bench", "admitted", "--workload", str(wl), "--methods", "draft-simple", "--repeat", "1",
        "--threads", "1", "--ctx-size", "512", "--json",
    )  # fmt: skip
    assert code == 0, err
    note = f"note: pair {bad} (draft-simple) is admitted, not benchmarkable: draft has no tensors (vocab-only)"
    assert note in " ".join(err.split()) and err.index("note: pair") < err.index("run ")
    assert f"pair {bad}: pair {bad}" not in err and "error:" not in err
    assert [r["info"]["pair_id"] for r in json.loads(out)] == [good]
    code, out, _ = _main(capsys, "pairs", "--admitted")
    (line,) = [ln for ln in out.splitlines() if ln.split()[:1] == [str(bad)]]
    assert "admitted, not benchmarkable" in line
    code, out, _ = _main(capsys, "pairs", "--json")
    assert {p["id"]: p["benchmarkable"] for p in json.loads(out)} == {good: True, bad: False}
    policy = _home() / "policy.toml"
    policy.write_text("[licence]\nrequire_revision = false\n")  # local files: no hub revision
    code, out, _ = _main(capsys, "audit", "--pair", str(bad), "--policy", str(policy), "--json")
    (pair,) = json.loads(out)["pairs"]
    assert code == 1 and pair["not_benchmarkable"].startswith("draft has no tensors")
    failing = {g["gate"]: g["message"] for g in pair["gates"] if not g["passed"]}
    assert list(failing) == ["evidence"] and failing["evidence"].startswith("admitted, not benchmarkable: draft")
    assert {g["gate"] for g in pair["gates"]} == {"integrity", "verdict", "template", "evidence", "licence"}
