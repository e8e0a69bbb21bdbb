"""Helpers shared by the tests: tiny models on disk (the one `model` helper) and the real CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _cli_helpers import SPECREG as SPECREG  # re-exported: where a test's subject is the process
from _cli_helpers import run_specreg

from specreg.testing import ModelSpec, write_model


def aged(path: Path, seconds: int = 60) -> Path:
    """Backdate mtime so the stat cache may trust it (a just-written file is 'racy')."""
    t = time.time_ns() - seconds * 1_000_000_000
    os.utime(path, ns=(t, t))
    return path


def model(folder: Path, filename: str, *, age: bool = True, **spec: object) -> Path:
    """A tiny deterministic llama GGUF; `spec` overrides ModelSpec fields."""
    path = write_model(folder / filename, ModelSpec(**spec))  # type: ignore[arg-type]
    return aged(path) if age else path


def cli(*args: str, db: Path, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess[str]:
    """The real entry point `specreg.cli.main` (its error mapping included), answering as a
    fresh process would (tests/_cli_helpers.py)."""
    env = {**os.environ, "SPECREG_DB": str(db), "COLUMNS": "200"}
    return run_specreg(args, env=env, timeout=timeout, **kw)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The error line of a failed command; asserts exit 2, no traceback, at most error+hint."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error:"), proc.stderr
    assert len(lines) <= 2 and all(ln.startswith(("error:", "hint:")) for ln in lines), proc.stderr
    return lines[0]


def run(*args: str, db: Path) -> tuple[int, str, str]:
    """Run a command in-process (typer's CliRunner): fast, for paths that should succeed.

    Error-to-exit-code mapping lives in `specreg.cli.main`, so failures are tested with `cli()`.
    """
    from typer.testing import CliRunner

    from specreg.cli import app

    result = CliRunner().invoke(app, list(args), env={"SPECREG_DB": str(db), "COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@contextmanager
def immutable(path: Path) -> Iterator[None]:
    """Make a file or folder unwritable even for root (chattr +i); skip if we cannot."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)]).returncode != 0:
        pytest.skip("cannot make a path immutable here (chattr)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
