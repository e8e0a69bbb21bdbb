"""Which cores a benchmark's server runs on, so the client measuring it does not compete with it.

A server started with the build's default threads takes every core, and the client that streams
its tokens (and the load probe watching the slot) then waits for a core in the middle of a
request: its time lands on whichever condition it happened to hit. With `--pin` (the default)
a machine with at least `MIN_CORES` usable cores leaves its last core to the client: the server
gets `-t` and `-tb` of the other cores' count and is bound to them (sched_setaffinity as soon as
it exists, so every thread it starts inherits them). `--threads N` sets the count; a count above
the cores left is the user's and is not bound. Fewer cores, or a machine without affinity: the
build's threads, unbound.

Why `MIN_CORES` is 4, not 2: on 2 cores pinning leaves the server one thread, and that costs a
draft method far more than the baseline, so the pinned ratio would describe a one-thread server
no production host runs (`benchmarks/bench_decision.py --pinning` measures it; see the
performance page). On 2-3 cores the server keeps every core (the client's share of a core is the
smaller error); from 4 cores on it gives the client one and keeps at least 3. The price, on a
machine shared with other work: the build's threads wait for each other at every step, so an
unpinned server slows far more than a one-thread one; `--threads 1` restores the pinned count
there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MIN_CORES = 4  # one for the client, at least three for the server (on 2 cores: -t 1, see above)


@dataclass(frozen=True)
class Pinning:
    threads: int | None  # -t / -tb (None: the build's default)
    cpus: tuple[int, ...] | None  # the server's cores (None: unbound)


def usable_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return []


def server_pinning(threads: int | None, pin: bool, cores: list[int] | None = None) -> Pinning:
    """The server's threads and cores for `--threads` and `--pin` (`cores`: the usable ones,
    default this process's affinity)."""
    cores = usable_cores() if cores is None else cores
    if not pin or len(cores) < MIN_CORES:
        return Pinning(threads, None)
    mine = tuple(cores[:-1])  # the last core is the client's
    n = threads or len(mine)
    return Pinning(n, mine if n <= len(mine) else None)
