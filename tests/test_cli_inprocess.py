"""The in-process CLI runner the tests use answers as a fresh process does, and leaks nothing.

Most CLI tests run `specreg.cli.main(argv)` in the test process (tests/_cli_helpers.py): these
tests hold that runner to what a child process answers, and check that a command cannot steer
the next one through the process (environment, `--db`, cwd, streams, signals, logging).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _cli_helpers import SPECREG, run_specreg
from _registry_helpers import model

from specreg.cli import main

SIDES = ("child", "inner")


def _same(text: str) -> str:
    """What may differ between two runs: the registry's folder, the clock."""
    return re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z?", "TIME", text.replace("/inner/", "/child/"))


def _child(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SPECREG, *args], capture_output=True, text=True, env=env, timeout=120)


def test_answers_as_a_child_process_does(tmp_path: Path) -> None:
    """Exit code, stdout and stderr byte for byte: a success, an admitted pair, a usage error, a
    one-line failure, untrusted text, JSON, help at a given width (each case costs a child)."""
    t = model(tmp_path, "t.gguf")
    d = model(tmp_path, "d.gguf", seed=1, name="x\x1b[2J [bold]y[/]")
    # each side its own registry, in folders of names of one length (the lines wrap alike)
    envs = {side: {**os.environ, "SPECREG_DB": str(tmp_path / side / "r.db"), "COLUMNS": "80"} for side in SIDES}
    for side in SIDES:
        (tmp_path / side).mkdir()
    cases = [
        ["register", str(t)],
        ["check", "pair", str(t), str(d), "--method", "draft-simple"],
        ["pairs", "--json"],
        ["check", "pair", str(t), str(tmp_path / "missing.gguf")],
        ["check", "pair", "--no-such-option"],
        ["inspect", str(d)],
        ["--help"],
    ]
    for args in cases:
        child = _child(args, envs["child"])
        here = run_specreg(args, env=envs["inner"])
        assert here.returncode == child.returncode, (args, here.stderr, child.stderr)
        assert _same(here.stdout) == _same(child.stdout), args
        assert _same(here.stderr) == _same(child.stderr), args
    assert [run_specreg(a, env=envs["inner"]).returncode for a in cases[3:5]] == [2, 2]


def test_nothing_of_a_run_is_left_in_the_process(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    env_before, cwd_before = dict(os.environ), os.getcwd()
    streams = (sys.stdin, sys.stdout, sys.stderr)
    sigterm, hf_level = signal.getsignal(signal.SIGTERM), logging.getLogger("huggingface_hub").level
    env = {**os.environ, "COLUMNS": "33", "SPECREG_DEBUG": "1"}
    proc = run_specreg(["--db", str(db), "register", str(model(tmp_path, "t.gguf"))], env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert dict(os.environ) == env_before and os.getcwd() == cwd_before
    assert (sys.stdin, sys.stdout, sys.stderr) == streams
    assert signal.getsignal(signal.SIGTERM) is sigterm
    assert logging.getLogger("huggingface_hub").level == hf_level


def test_db_option_is_the_commands_not_the_processs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`main(['--db', F, ...])` sets SPECREG_DB for its command only (embedders call main often)."""
    os.environ["SPECREG_DB"] = str(tmp_path / "mine.db")  # conftest's monkeypatch puts it back
    with pytest.raises(SystemExit) as done:
        main(["--db", str(tmp_path / "other.db"), "register", str(model(tmp_path, "t.gguf"))])
    assert done.value.code == 0
    assert os.environ["SPECREG_DB"] == str(tmp_path / "mine.db")
    del os.environ["SPECREG_DB"]
    with pytest.raises(SystemExit):
        main(["--db", str(tmp_path / "other.db"), "artifacts"])
    assert "SPECREG_DB" not in os.environ
    capsys.readouterr()


def test_a_bug_is_a_traceback_and_exit_1_as_in_a_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("specreg.commands.artifacts.artifacts_cmd", boom)
    proc = run_specreg(["artifacts"])
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "RuntimeError: a bug" in proc.stderr


def test_a_hung_command_times_out_as_subprocess_run_does(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setattr("specreg.commands.artifacts.artifacts_cmd", lambda: time.sleep(30))
    before = signal.getsignal(signal.SIGALRM)
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_specreg(["artifacts"], timeout=0.5)
    assert time.monotonic() - t0 < 10
    assert signal.getsignal(signal.SIGALRM) is before


def test_a_run_from_another_thread_gets_a_child_of_its_own(tmp_path: Path) -> None:
    """The environment and streams are one per process: threads racing commands each get a child."""
    from concurrent.futures import ThreadPoolExecutor

    env = {**os.environ, "SPECREG_DB": str(tmp_path / "r.db")}
    t = model(tmp_path, "t.gguf")
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda a: run_specreg(a, env=env, timeout=120), [["inspect", str(t)], ["--version"]]))
    assert [p.returncode for p in procs] == [0, 0] and procs[1].stdout.startswith("specreg ")


def test_a_group_without_its_command_prints_its_help_not_an_error(tmp_path: Path) -> None:
    """`specreg`, `specreg rules`: the group's help as typer (and `hf`) print it, on stderr with
    exit 2, never as an `error:` line; a group with a default listing (`workloads`, `runs`) lists.
    Every group of `cli.COMMANDS` the same way, so a new group is held to it."""
    import typer

    from specreg.cli import COMMANDS, load
    from specreg.registry.store import Registry

    Registry(tmp_path / "r.db", show_progress=False).close()  # an empty registry: `runs` lists none
    env = {**os.environ, "SPECREG_DB": str(tmp_path / "r.db"), "SPECREG_HOME": str(tmp_path)}
    groups = [name for name, ref, _ in COMMANDS if isinstance(load(ref), typer.Typer)]
    assert {"check", "rules", "bench", "workloads", "runs"} <= set(groups)
    for name in ["", *groups]:
        done = run_specreg([name] if name else [], env=env, timeout=60)
        assert "error:" not in done.stderr and "Traceback" not in done.stderr, (name, done.stderr)
        group = load(next(ref for n, ref, _ in COMMANDS if n == name)) if name else None
        lists = isinstance(group, typer.Typer) and group.info.invoke_without_command
        if lists:
            assert done.returncode == 0 and (done.stdout or done.stderr), (name, done)
        else:
            usage = f"Usage: specreg {name} [OPTIONS] COMMAND [ARGS]..." if name else "Usage: specreg [OPTIONS]"
            assert done.returncode == 2 and done.stderr.startswith(usage) and not done.stdout, (name, done)
            assert "Commands:" in done.stderr and "\\x0a" not in done.stderr, (name, done.stderr)
