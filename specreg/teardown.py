"""What a console-script process leaves for its exit to drop instead of freeing it object by object.

An `audit --all` of a fleet ends holding ~10^5 small objects (its result: 4,600 pair audits,
5,000 decisions, 1,000 run digests): freeing them one by one when the command's frame unwinds
and then tearing the interpreter down is memory the kernel takes back at once anyway
(benchmarks/bench_fleet.py, the full fleet, quiet machine: 2.26 s with this exit, 2.49 s
"without the quick exit": 1.10x). So a command hands such a result to `keep`, and the console
script (`specreg.entry`), once the command has returned and its output is flushed, ends the
process with `os._exit`. Only the console
script does: called in-process (tests, embedders), `keep` holds nothing and `main()` returns or
raises as ever. Whatever the command opened is closed by then (registries by their `with`,
files written atomically); nothing specreg registers with `atexit` is skipped.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys

_kept: list[object] = []
_armed = False


def arm() -> None:
    """The console script's: this process may end without tearing down what was kept."""
    global _armed
    _armed = True


def keep(obj: object) -> None:
    """Leave `obj` for the process's exit (a no-op unless the console script armed it). What is
    alive now is frozen out of the cycle collector too: kept past the command's paused collector
    (`db.paused_gc`), the next collection would walk every object of the result again (measured:
    `audit --all` of the fleet 2.11 -> 2.29 s at best, kept but not frozen)."""
    if _armed:
        _kept.append(obj)
        gc.freeze()


def _exit_code(code: object) -> int:
    """`SystemExit.code` as the process's status, the way the interpreter reads it (a message
    is printed to stderr and exits 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def end(code: object) -> None:
    """Exit with `code`: at once when something was kept (its output flushed first), else as usual."""
    if not _kept:
        raise SystemExit(code)
    status = _exit_code(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: its reader has gone
            stream.flush()
    os._exit(status)
