"""Which cores a benchmark's server runs on, so the client measuring it does not compete with it.

A server started with the build's default threads takes every core, and the client that streams
its tokens (and the load probe watching the slot) then waits for a core in the middle of a
request: its time lands on whichever condition it happened to hit (issue 32). With `--pin` (the
default) a machine with at least `MIN_CORES` usable cores leaves its last core to the client: the
server gets `-t` and `-tb` of the other cores' count and is bound to them (sched_setaffinity as
soon as it exists, so every thread it starts inherits them). `--threads N` sets the count; a
count above the cores left is the user's and is not bound. Fewer cores, or a machine without
affinity: the build's threads, unbound, as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MIN_CORES = 2  # one for the client, at least one for the server


@dataclass(frozen=True)
class Pinning:
    threads: int | None  # -t / -tb (None: the build's default)
    cpus: tuple[int, ...] | None  # the server's cores (None: unbound)


def usable_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return []


def server_pinning(threads: int | None, pin: bool) -> Pinning:
    """The server's threads and cores for `--threads` and `--pin`."""
    cores = usable_cores()
    if not pin or len(cores) < MIN_CORES:
        return Pinning(threads, None)
    mine = tuple(cores[:-1])  # the last core is the client's
    n = threads or len(mine)
    return Pinning(n, mine if n <= len(mine) else None)
