"""SIGINT and SIGTERM to each long command while its llama.cpp server runs (issue 47): exit 130,
and no process carrying a server's token is left - not the server, not anything it started.

Each command runs as its own process with a mark in its environment that every server it starts
inherits (servers/launcher.py passes the environment on, with the token that marks a server's
processes), so the test finds exactly the servers this command started, whatever else runs on
the machine. The command is signalled as soon as one of them is up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from _registry_helpers import model

from specreg.servers.launcher import TOKEN_VAR
from specreg.testing import write_model
from specreg.testing.modelspec import CYCLER

SPECREG = [sys.executable, "-m", "specreg.cli"]
MARK = "SPECREG_TEST_SIGNAL_MARK"
# long enough that the command is still measuring when it is signalled
LONG = [{"id": f"p{i}", "stratum": "repetitive", "max_tokens": 200, "prompt": "a b c a b c"} for i in range(40)]


def _servers(mark: str) -> list[psutil.Process]:
    """Live processes carrying a server's token that this test's command started (its mark)."""
    out = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if env.get(MARK) == mark and TOKEN_VAR in env and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


def _workload(folder: Path) -> Path:
    path = folder / "long.jsonl"
    path.write_text("".join(json.dumps(it) + "\n" for it in LONG))
    return path


def _bench(home: Path) -> list[str]:
    from _bench_helpers import admit

    from specreg.registry.store import Registry

    with Registry(home / "r.db", show_progress=False) as reg:
        pid = admit(reg, model(home, "t.gguf"), model(home, "d.gguf", name="tiny-draft"))
    return ["bench", "admitted", "--pair", str(pid), "--workload", str(_workload(home)), "--methods", "draft-simple",
            "--threads", "1", "--ctx-size", "512"]  # fmt: skip


def _demo(home: Path) -> list[str]:
    return ["demo", "--dir", str(home / "demo")]


def _drafts(home: Path) -> list[str]:
    target = write_model(home / "t.gguf", CYCLER.but(n_layer=4, name="Cyc-1B"))
    folder = home / "m"
    folder.mkdir()
    write_model(folder / "fast.gguf", CYCLER.but(n_layer=1, name="Cyc-100M"))
    return ["drafts", str(target), "--dir", str(folder), "--bench", "2", "--workload", str(_workload(home))]


COMMANDS = {"bench": _bench, "demo": _demo, "drafts": _drafts}


@pytest.mark.parametrize(
    ("command", "sig"),
    [
        pytest.param("demo", signal.SIGTERM, id="demo-SIGTERM"),  # the one that left its server running
        pytest.param("bench", signal.SIGTERM, id="bench-SIGTERM", marks=pytest.mark.slow),
        pytest.param("demo", signal.SIGINT, id="demo-SIGINT", marks=pytest.mark.slow),
        pytest.param("bench", signal.SIGINT, id="bench-SIGINT", marks=pytest.mark.slow),  # also test_bench_cli
        pytest.param("drafts", signal.SIGTERM, id="drafts-SIGTERM", marks=pytest.mark.slow),
        pytest.param("drafts", signal.SIGINT, id="drafts-SIGINT", marks=pytest.mark.slow),
    ],
)
def test_a_signalled_command_exits_130_and_leaves_no_server(tmp_path: Path, command: str, sig: int) -> None:
    home = tmp_path
    args = COMMANDS[command](home)
    mark = uuid.uuid4().hex
    env = {**os.environ, "SPECREG_HOME": str(home), "SPECREG_DB": str(home / "r.db"), MARK: mark, "COLUMNS": "200"}
    env.pop("SPECREG_DB") if command == "demo" else None  # the demo's registry is in its folder
    # as a terminal's foreground job: SIGINT not ignored (a background job's is, and stays so across exec)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen([*SPECREG, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        deadline = time.monotonic() + 180
        while not _servers(mark):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no server started"
            time.sleep(0.1)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, out[-2000:], err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    left = _servers(mark)
    for p in left:  # never leave them to the next test, whatever the assertion says
        p.kill()
    assert not left, [p.cmdline() for p in left]
