"""How busy the machine is while a llama.cpp server runs a slot: our CPU time against everyone
else's, and what the hypervisor stole; the judgment of a slot as contended.

The server side of `benchmark/store/contention.py` (which decides what a contended slot means for a
run): it reads /proc through psutil and knows which processes are ours, the way
`servers/memory.py` samples a server's memory. The threshold and the numbers behind it are in
`benchmark/store/contention.py`'s docstring.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from specreg.schemas.bench import RoundLoad
from specreg.schemas.bench_settings import DEFAULT_BUSY_SHARE

BUSY_MIN_CORES = 0.5  # ... and never less than this many cores


def busy_threshold(cores: int, share: float = DEFAULT_BUSY_SHARE) -> float | None:
    """Cores of others' CPU time (and steal) from which a slot counts as contended (None: off)."""
    return max(BUSY_MIN_CORES, share * max(1, cores)) if share > 0 else None


def judge(load: RoundLoad, share: float = DEFAULT_BUSY_SHARE) -> str | None:
    """Why this slot ran under contention, or None: others (and steal) at or above the threshold."""
    taken = load.others_cores + load.steal_cores
    threshold = busy_threshold(load.cores, share)
    if threshold is None or taken < threshold:
        return None
    steal = f", {load.steal_cores:.2f} stolen" if load.steal_cores >= 0.01 else ""
    return f"other processes used {load.others_cores:.2f} of {load.cores} cores{steal}"


def _cores() -> list[int]:
    """The logical cores this process may run on (its affinity; every core where that is unknown)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _cpu_seconds(pid: int) -> float | None:
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return None
    return float(t.user + t.system)


class LoadProbe:
    """Watches one slot: the machine's CPU time (psutil.cpu_times: /proc/stat) and ours (this
    process, every thread, and the server's process tree) at its start and its end.

    The slot is watched from before its server starts to its last request: on tiny models the
    requests alone last only a few of the kernel's CPU-time ticks (USER_HZ), so a window that
    short could not tell a quarter of a core from none. A process of ours that starts inside the window
    (the server) counts from zero. Reading is a few /proc files: no thread, no cost while the
    requests run.
    """

    def __init__(
        self, pids: Callable[[], list[int]], round_no: int, repeats: Iterable[int], share: float = DEFAULT_BUSY_SHARE
    ) -> None:
        self._pids, self._share = pids, share
        self.round, self.repeats = round_no, list(repeats)
        self._t0 = 0.0
        self._busy0 = self._steal0 = 0.0
        self._ours0: dict[int, float] = {}

    def _ours(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for pid in {os.getpid(), *self._pids()}:
            t = _cpu_seconds(pid)
            if t is not None:
                out[pid] = t
        return out

    @staticmethod
    def _machine() -> tuple[float, float]:
        """(busy, steal) CPU seconds since boot of the cores this process may run on (its
        affinity: a neighbour on cores we never use takes nothing from us); idle and iowait are
        not busy."""
        import psutil

        busy = steal = 0.0
        per_cpu = psutil.cpu_times(percpu=True)
        for i in _cores():
            if i >= len(per_cpu):
                continue
            t = per_cpu[i]
            st = float(getattr(t, "steal", 0.0))
            idle = float(t.idle) + float(getattr(t, "iowait", 0.0))
            # guest time is already inside user (Linux), so the total is every field but these
            total = sum(float(getattr(t, f)) for f in t._fields if f not in ("guest", "guest_nice"))
            busy += total - idle - st
            steal += st
        return busy, steal

    def start(self) -> LoadProbe:
        self._ours0 = self._ours()
        self._busy0, self._steal0 = self._machine()
        self._t0 = time.monotonic()
        return self

    def stop(self) -> RoundLoad:
        wall = max(time.monotonic() - self._t0, 1e-3)
        busy, steal = self._machine()
        ours1 = self._ours()
        ours = sum(t - self._ours0.get(pid, 0.0) for pid, t in ours1.items())
        others = max(0.0, (busy - self._busy0) - ours)
        load = RoundLoad(
            round=self.round,
            repeats=self.repeats,
            wall_s=round(wall, 3),
            cores=len(_cores()),
            ours_cores=round(ours / wall, 3),
            others_cores=round(others / wall, 3),
            steal_cores=round(max(0.0, steal - self._steal0) / wall, 3),
            load1=round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        )
        load.busy = judge(load, self._share)
        return load
