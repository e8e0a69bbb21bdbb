"""Shared assertions for the hostile-input tests: the registry survives, nothing leaks out."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from _cli_helpers import run_specreg

READ_COMMANDS = (("artifacts",), ("pairs",), ("runs",), ("artifacts", "--json"), ("pairs", "--json"))


def specreg(*args: str, db: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real entry point `specreg.cli.main` (its error mapping included), answering as a
    fresh process would (tests/_cli_helpers.py); `measured` spawns one where that is the subject."""
    env = dict(os.environ, COLUMNS="80")
    if db is not None:
        env["SPECREG_DB"] = str(db)
    return run_specreg(args, env=env, timeout=timeout)


def one_error_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, no traceback, exactly one `error:` line (and at most a `hint:`), naming every needle."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert all(ln.startswith(("error:", "hint:", "warning:")) for ln in lines), proc.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def registry_readable(db: Path) -> None:
    """`PRAGMA integrity_check` is ok and every read command still works."""
    if db.exists():
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    for args in READ_COMMANDS:
        proc = specreg(*args, db=db)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])


def files_under(root: Path, skip: tuple[Path, ...] = ()) -> set[Path]:
    """Every file below `root` except those below `skip` (to assert nothing was written elsewhere)."""
    out = set()
    for dirpath, _dirs, files in os.walk(root):
        d = Path(dirpath)
        if any(d == s or s in d.parents for s in skip):
            continue
        out.update(d / f for f in files)
    return out


def _spawn_measured(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, bytes, bytes, float, int]:
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, 9))
    timer.start()
    assert proc.stdout is not None and proc.stderr is not None
    with ThreadPoolExecutor(2) as pool:  # drain both pipes; wait4 (not Popen.wait) gives the child's rusage
        out, err = pool.submit(proc.stdout.read), pool.submit(proc.stderr.read)
        _, status, usage = os.wait4(proc.pid, 0)
        stdout, stderr = out.result(), err.result()
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, stdout, stderr, time.monotonic() - t0, usage.ru_maxrss * 1024


def measured(*args: str, db: Path | None = None, timeout: float = 60) -> tuple[int, str, str, float, int]:
    """(exit code, stdout, stderr, wall seconds, peak RSS above a bare interpreter) of `specreg ARGS`
    in a fresh process, killed at `timeout` (exit code -9) so a hang fails the test instead of
    stalling it. Linux carries the parent's RSS at fork into the child's ru_maxrss, so the peak
    of `python -c pass` spawned the same way just before is subtracted."""
    env = dict(os.environ, COLUMNS="80")
    if db is not None:
        env["SPECREG_DB"] = str(db)
    *_, base = _spawn_measured([sys.executable, "-c", "pass"], env, 30)
    rc, out, err, wall, peak = _spawn_measured([sys.executable, "-m", "specreg.cli", *args], env, timeout)
    return rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), wall, max(0, peak - base)


FAKE_SERVER = Path(__file__).with_name("fake_llama_server.py")


def fake_world(tmp_path: Path, names: tuple[str, ...] = ("t1", "t2")) -> tuple[Path, list[int], Path, Path]:
    """(db, admitted self-speculation pair ids, a `llama-server` that runs the fake, a one-prompt
    workload): one tiny model per name (its general.name), each admitted for ngram-mod."""
    from _bench_helpers import ITEMS, force_verdict, workload
    from _registry_helpers import model

    from specreg.registry.store import Registry

    db = tmp_path / "r.db"
    with Registry(db, show_progress=False) as reg:
        pairs = [
            force_verdict(reg, model(tmp_path, f"t{i}.gguf", seed=i, name=n), None, "ngram-mod", admitted=True)
            for i, n in enumerate(names, start=1)
        ]
    exe = tmp_path / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_SERVER} "$@"\n')
    exe.chmod(0o755)
    return db, pairs, exe, workload(tmp_path, ITEMS[:1], "one.jsonl")
