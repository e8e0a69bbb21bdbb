"""Expensive read-only fixtures built once per test session, also when pytest-xdist runs the
suite in several worker processes (`-n auto`): a session fixture is per process, so without
this each worker would start its own llama.cpp servers for the same shared run.

`built_once(tmp_path_factory, name, build)`: the first worker to ask calls `build(folder)` in a
folder every worker of the run sees (the parent of the workers' own temp folders), under an
exclusive lock; the others wait for it and then read what it wrote. A build that fails leaves no
mark, so the next worker tries again and fails the same way. Without xdist it is the plain
session folder. `locked(tmp_path_factory, name)` is the lock alone, for fetches into a shared
cache that are not safe to run twice at once (the real vocab files' `.part` names).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _run_root(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The folder all workers of this run share; None when not under xdist. Named for the run's
    id: with `--basetemp DIR`, DIR outlives the run, and another run must not read its worlds."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if os.environ.get("PYTEST_XDIST_WORKER") is None or not run:
        return None
    # beside .../popen-gwK; 8 hex digits of the id: its paths appear in 80-column output (a deploy
    # command's model paths), and a path is one word no view may break
    root = tmp_path_factory.getbasetemp().parent / f"shared-{run[:8]}"
    root.mkdir(exist_ok=True)
    return root


@contextmanager
def locked(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[None]:
    """Exclusive among this run's workers (a no-op without xdist): flock on a file in the run root."""
    root = _run_root(tmp_path_factory)
    if root is None:
        yield
        return
    with open(root / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes, also if the worker dies
        yield


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `build` filled: built by the first worker that asks, read by the others."""
    root = _run_root(tmp_path_factory)
    if root is None:
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    folder, done = root / name, root / f"{name}.built"
    with locked(tmp_path_factory, name):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a worker that failed half-way left
            folder.mkdir()
            build(folder)
            done.touch()
    return folder
