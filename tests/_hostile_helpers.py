"""Shared assertions for the hostile-input tests: the registry survives, nothing leaks out."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

READ_COMMANDS = (("artifacts",), ("pairs",), ("runs",), ("artifacts", "--json"), ("pairs", "--json"))


def specreg(*args: str, db: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a fresh process (its error mapping included)."""
    env = dict(os.environ, COLUMNS="80")
    if db is not None:
        env["SPECREG_DB"] = str(db)
    return subprocess.run(
        [sys.executable, "-m", "specreg.cli", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


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


def measured(*args: str, db: Path | None = None, timeout: float = 60) -> tuple[int, str, str, float, int]:
    """(exit code, stdout, stderr, wall seconds, peak RSS bytes) of `specreg ARGS` in a fresh
    process; killed at `timeout` (exit code -9), so a hang fails the test instead of stalling it."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    env = dict(os.environ, COLUMNS="80")
    if db is not None:
        env["SPECREG_DB"] = str(db)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specreg.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, 9))
    timer.start()
    assert proc.stdout is not None and proc.stderr is not None
    with ThreadPoolExecutor(2) as pool:  # drain both pipes; wait4 (not Popen.wait) gives the child's rusage
        out, err = pool.submit(proc.stdout.read), pool.submit(proc.stderr.read)
        _, status, usage = os.wait4(proc.pid, 0)
        stdout, stderr = out.result(), err.result()
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    return (
        proc.returncode,
        stdout.decode("utf-8", "replace"),
        stderr.decode("utf-8", "replace"),
        wall,
        usage.ru_maxrss * 1024,
    )
