"""Servers that misbehave in ways real llama.cpp cannot be made to (tests/fake_llama_server.py).

Each case runs the real `specreg bench admitted --server FAKE` in a fresh process, bounded in
time (a hang is killed and fails the test) and memory, and asserts what was stored: the
request is an error row, the condition failed (never `ok`), the other pair still ran, and the
registry stays readable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest
from _hostile_helpers import fake_world, measured, one_error_line, registry_readable, specreg
from fake_llama_server import SPEW_BYTES

from specreg.servers.logpump import HEAD_BYTES, TAIL_BYTES

MB = 1 << 20


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[int], Path, Path]:
    """(db, two admitted self-speculation pair ids, the fake server, a one-prompt workload)."""
    monkeypatch.setenv("SPECREG_HOME", str(tmp_path / "home"))
    return fake_world(tmp_path)


def _bench(
    world: tuple[Path, list[int], Path, Path], mode: str, *pairs: int, timeout: float = 60, request_timeout: str = "2"
) -> tuple:
    db, _, exe, wl = world
    os.environ["FAKE_LLAMA_MODE"] = mode
    args = ["bench", "admitted", "--server", str(exe), "--methods", "none", "--workload", str(wl)]
    args += ["--request-timeout", request_timeout, "--start-timeout", "20", "--repeat", "1", "--warmup", "0", "--json"]
    for p in pairs:
        args += ["--pair", str(p)]
    try:
        return measured(*args, db=db, timeout=timeout)
    finally:
        del os.environ["FAKE_LLAMA_MODE"]


def _runs(db: Path) -> list[dict]:
    proc = specreg("runs", "--json", db=db)
    assert proc.returncode == 0, proc.stderr
    out = []
    for info in json.loads(proc.stdout):
        shown = specreg("runs", "show", info["run_id"], "--json", db=db)
        assert shown.returncode == 0, shown.stderr
        out.append(json.loads(shown.stdout))
    return out


@pytest.mark.parametrize(
    ("mode", "row_error"),
    [
        ("nonewline", "server sent a line longer than 4 MiB"),
        ("trickle", "timed out after 1s"),  # a byte every 0.2 s: only the request's deadline ends it
        ("badtokens", "malformed event from server (a token id is 'x', not a count)"),
        ("badtimings", "malformed event from server (timings is a list, not an object)"),
        ("hugenumber", 'malformed event from server: \'{"content": "", "stop": true'),
    ],
)
def test_bad_streams_are_request_errors_and_the_next_pair_runs(
    world: tuple[Path, list[int], Path, Path], mode: str, row_error: str
) -> None:
    db, pairs, _, _ = world
    # the trickle waits out the deadline on each pair; 1 s is five of its bytes, enough to show it
    rc, _, err, wall, rss = _bench(world, mode, *pairs, request_timeout="1" if mode == "trickle" else "2")
    assert rc == 1 and "Traceback" not in err, (rc, err[-3000:])
    assert wall < 40 and rss < 300 * MB, (wall, rss // MB)
    runs = _runs(db)
    assert len(runs) == 2  # the first pair's trouble did not stop the second
    for run in runs:
        (cond,) = run["conditions"]
        assert cond["status"] == "failed" and cond["failure"].startswith("no request succeeded"), cond
        rows = run["requests"]
        assert rows and all(not r["ok"] and row_error in r["error"] for r in rows), [r["error"] for r in rows]
    registry_readable(db)


def test_endless_version_output_is_refused(world: tuple[Path, list[int], Path, Path]) -> None:
    db, pairs, _, _ = world
    rc, out, err, wall, rss = _bench(world, "spewversion", pairs[0])
    proc = type("P", (), {"returncode": rc, "stdout": out, "stderr": err})()
    one_error_line(proc, "--version printed more than 64 KiB")  # type: ignore[arg-type]
    assert wall < 30 and rss < 300 * MB, (wall, rss // MB)
    registry_readable(db)


def test_server_log_keeps_head_and_tail_and_says_what_was_dropped(world: tuple[Path, list[int], Path, Path]) -> None:
    db, pairs, _, _ = world
    rc, _, err, _, rss = _bench(world, "spewlog", pairs[0])
    assert rc == 0, err[-3000:]
    (run,) = _runs(db)
    (cond,) = run["conditions"]
    log = Path(cond["log_path"])
    size = log.stat().st_size
    assert size <= HEAD_BYTES + 2 * TAIL_BYTES + 4096, size
    text = log.read_bytes()
    assert b"fake llama-server mode=spewlog" in text[:HEAD_BYTES]  # the head is kept as written
    marker = [ln for ln in text.decode("utf-8", "replace").splitlines() if ln.startswith("# specreg: log kept")]
    # it says how much went: at least what the server wrote before serving, less what was kept
    # (the server writes that much whatever the machine's speed, and more while it serves)
    assert len(marker) == 1 and int(marker[0].split()[-4]) >= SPEW_BYTES - HEAD_BYTES - 2 * TAIL_BYTES, marker
    assert rss < 300 * MB


def test_double_forked_daemon_is_stopped_with_its_server(world: tuple[Path, list[int], Path, Path]) -> None:
    db, pairs, _, _ = world
    pidfile = db.parent / "daemon.pid"
    os.environ["FAKE_LLAMA_DAEMON_PIDFILE"] = str(pidfile)
    try:
        rc, _, err, _, _ = _bench(world, "daemon", pairs[0])
    finally:
        del os.environ["FAKE_LLAMA_DAEMON_PIDFILE"]
    assert rc == 0, err[-3000:]
    pid = int(pidfile.read_text())
    try:
        proc = psutil.Process(pid)
        assert proc.status() == psutil.STATUS_ZOMBIE, f"daemon {pid} is still running"
    except psutil.NoSuchProcess:
        pass
    (run,) = _runs(db)
    assert run["conditions"][0]["status"] == "ok"
