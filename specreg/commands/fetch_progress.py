"""How `demo --real` shows the fetch of its model (specreg.testing.realmodel's `Step`).

On a terminal each step is a rich bar on stderr (bytes where the step can count them, a pulsing
bar where it cannot: pip's download); elsewhere (a log, CI) one plain line per step on stderr,
with how long it took, so a captured log says what the minutes went on without carriage returns.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from specreg.testing.realmodel import Advance, Step


def fetch_steps(stream: TextIO | None = None) -> Step:
    """The `Step` for `stream` (default stderr): rich bars on a terminal, lines otherwise."""
    out = stream if stream is not None else sys.stderr
    return _bars(out) if out.isatty() else _lines(out)


def _lines(out: TextIO) -> Step:
    @contextmanager
    def step(what: str, total: int | None) -> Iterator[Advance]:
        t0 = time.monotonic()
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n

        try:
            yield advance
        except BaseException:
            print(f"fetch: {what}: failed after {time.monotonic() - t0:.1f} s", file=out, flush=True)
            raise
        size = f", {done / 1e6:.1f} MB" if total is not None else ""
        print(f"fetch: {what}: done in {time.monotonic() - t0:.1f} s{size}", file=out, flush=True)

    return step


def _bars(out: TextIO) -> Step:
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(file=out)

    @contextmanager
    def step(what: str, total: int | None) -> Iterator[Advance]:
        columns = [TextColumn("{task.description}"), BarColumn(), *([DownloadColumn()] if total else [])]
        with Progress(*columns, TimeElapsedColumn(), console=console, transient=False) as bar:
            task = bar.add_task(what, total=total)
            yield lambda n: bar.advance(task, n)
            if total is None:
                bar.update(task, total=1, completed=1)

    return step
