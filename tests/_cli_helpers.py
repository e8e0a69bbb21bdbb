"""The `specreg` command run in the test process: what a fresh process would answer, ~30x sooner.

Spawning `python -m specreg.cli` costs 0.3-0.4 s of interpreter start-up and imports per call;
`specreg.cli.main(argv)` in this process costs milliseconds once the modules are loaded. The
answer is the one a child process gives: a `subprocess.CompletedProcess` with the exit code
`main` chose (its error mapping included), stdout and stderr as text (pipes, not a terminal,
UTF-8 as the child's would be), and an escaping exception as the traceback and exit 1 a child
prints. Everything a command may change about a process is put back afterwards, so one test's
run cannot steer the next: the environment (the whole of it, `SPECREG_DB` from `--db` too),
the working directory, the standard streams, `sys.argv`, signal handlers, logging, warning
filters and the cycle collector's switch.

Tests whose subject is the process itself (signals sent to it, the console script's start-up,
peak RSS or wall time of a command, a real server's lifetime) still spawn one: see
`_hostile_helpers.measured` and tests/test_cli_startup.py.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

SPECREG = [sys.executable, "-m", "specreg.cli"]  # the argv a subprocess test spawns


class _TimedOut(BaseException):
    """Raised in the command by the timer: a BaseException, so no `except Exception` in the
    command swallows it, and its `finally` blocks (servers stopped, files closed) still run."""


def _stream(errors: str) -> io.TextIOWrapper:
    # what a child's stdout/stderr is on a pipe: UTF-8, not a terminal, stdout strict, stderr
    # backslashreplace (Python's defaults for the standard streams)
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=errors, newline="\n", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    raw = stream.buffer
    assert isinstance(raw, io.BytesIO)
    return raw.getvalue().decode("utf-8")  # as `subprocess.run(text=True)` decodes: strictly


def _loggers() -> dict[str, tuple[int, list[logging.Handler], bool, bool]]:
    found: dict[str, tuple[int, list[logging.Handler], bool, bool]] = {}
    for name, lg in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]:
        if isinstance(lg, logging.Logger):
            found[name] = (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
    return found


def _restore_loggers(saved: dict[str, tuple[int, list[logging.Handler], bool, bool]]) -> None:
    for name, lg in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]:
        if not isinstance(lg, logging.Logger):
            continue
        level, handlers, propagate, disabled = saved.get(name, (logging.NOTSET, [], True, False))
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.propagate, lg.disabled = propagate, disabled


def _signal_handlers() -> dict[signal.Signals, Any]:
    handlers = {}
    for sig in signal.valid_signals():
        try:
            handlers[signal.Signals(sig)] = signal.getsignal(sig)
        except (ValueError, OSError):
            continue
    return handlers


@contextmanager
def _process_state(env: Mapping[str, str], cwd: str | Path | None) -> Iterator[None]:
    """The environment and cwd of the 'child' for the duration; every global put back after."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_argv = list(sys.argv)
    saved_signals = _signal_handlers()
    saved_loggers = _loggers()
    os.environ.clear()
    os.environ.update(env)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with warnings.catch_warnings():
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.argv[:] = saved_argv
        for sig, handler in saved_signals.items():
            if signal.getsignal(sig) is not handler and handler is not None:
                signal.signal(sig, handler)
        _restore_loggers(saved_loggers)


def run_specreg(
    args: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    cwd: str | Path | None = None,
    input: str | None = None,  # subprocess.run's name for it
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([*SPECREG, *args], capture_output=True, text=True, env=env, ...)`, in this
    process. `env` is the whole environment of the run (default: this process's), as for a
    child; `timeout` raises `subprocess.TimeoutExpired` as `subprocess.run` does."""
    from specreg.cli import main

    argv = [os.fspath(a) for a in args]
    if threading.current_thread() is not threading.main_thread():
        # the environment, cwd and standard streams are the process's, one for all its threads:
        # a run from another thread (commands racing each other) gets a child of its own
        kw: dict[str, Any] = {"env": env, "timeout": timeout, "cwd": cwd, "input": input}
        return subprocess.run([*SPECREG, *argv], capture_output=True, text=True, **kw)
    stdin = io.TextIOWrapper(io.BytesIO((input or "").encode()), encoding="utf-8")
    out, err = _stream("strict"), _stream("backslashreplace")
    timer = timeout is not None

    def _expire(_sig: int, _frame: object) -> None:
        raise _TimedOut

    code = 0
    with _process_state(os.environ.copy() if env is None else env, cwd):
        sys.stdin, sys.stdout, sys.stderr = stdin, out, err
        sys.argv[:] = ["specreg", *argv]
        if timer:
            signal.signal(signal.SIGALRM, _expire)
            signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            main(argv)
        except SystemExit as exc:  # main always ends so; a typer/click exit carries its code
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                err.write(f"{exc.code}\n")
                code = 1
        except _TimedOut:
            raise subprocess.TimeoutExpired(["specreg", *argv], timeout or 0, _text(out), _text(err)) from None
        except BaseException:  # what a child prints and exits 1 with (KeyboardInterrupt: main's own)
            err.write(traceback.format_exc())
            code = 1
        finally:
            if timer:
                signal.setitimer(signal.ITIMER_REAL, 0)
    return subprocess.CompletedProcess(["specreg", *argv], code, _text(out), _text(err))


def main_captured(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`specreg ARGS` through the real entry point (its error mapping included), in this process:
    (exit code, stdout, stderr) as pytest's capsys caught them."""
    from specreg.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err
