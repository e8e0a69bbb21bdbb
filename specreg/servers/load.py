"""How busy the machine is while a llama.cpp server runs a slot: our CPU time against everyone
else's, and what the hypervisor stole; the judgment of a slot as contended.

The server side of `benchmark/store/contention.py` (which decides what a contended slot means for a
run): it reads /proc through psutil and knows which processes are ours, the way
`servers/memory.py` samples a server's memory. The threshold and the numbers behind it are in
`benchmark/store/contention.py`'s docstring. Before measuring, a run waits here while the
machine is that busy (`wait_for_quiet`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from specreg.schemas.bench import RoundLoad
from specreg.schemas.bench_settings import DEFAULT_BUSY_SHARE

BUSY_MIN_CORES = 0.5  # ... and never less than this many cores
_Snapshot = tuple[float, float, float, dict[int, float]]  # (monotonic, busy, steal, ours by pid) seconds


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
    requests run. A slot that waits for a quieter machine between its requests `pause`s the
    probe for the wait and `resume`s it after, so its load is its own; `recent` reads the load
    since the last look without ending the slot.
    """

    def __init__(
        self, pids: Callable[[], list[int]], round_no: int, repeats: Iterable[int], share: float = DEFAULT_BUSY_SHARE
    ) -> None:
        self._pids, self._share = pids, share
        self.round, self.repeats = round_no, list(repeats)
        self._acc: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # (wall, busy, steal, ours) counted
        self._since: _Snapshot | None = None  # counting since (None: paused)
        self._mark: _Snapshot = (0.0, 0.0, 0.0, {})  # what `recent` reads from

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

    def _snapshot(self) -> _Snapshot:
        busy, steal = self._machine()
        return time.monotonic(), busy, steal, self._ours()

    def _add(self, since: _Snapshot) -> tuple[float, float, float, float]:
        """(wall, busy, steal, ours) seconds from `since` to now."""
        t1, busy1, steal1, ours1 = self._snapshot()
        t0, busy0, steal0, ours0 = since
        ours = sum(t - ours0.get(pid, 0.0) for pid, t in ours1.items())
        return t1 - t0, busy1 - busy0, steal1 - steal0, ours

    def start(self) -> LoadProbe:
        self._acc = (0.0, 0.0, 0.0, 0.0)
        self._mark = self._since = self._snapshot()
        return self

    def pause(self) -> None:
        """Stop counting (a wait for a quieter machine is no part of the slot's load)."""
        if self._since is not None:
            w, b, st, o = self._add(self._since)
            self._acc = (self._acc[0] + w, self._acc[1] + b, self._acc[2] + st, self._acc[3] + o)
            self._since = None

    def resume(self) -> None:
        if self._since is None:
            self._mark = self._since = self._snapshot()

    def recent(self) -> RoundLoad:
        """The load since the last `recent` (or start, or resume), judged: whether the slot's
        requests run beside a neighbour now, without ending the slot."""
        wall, busy, steal, ours = self._add(self._mark)
        self._mark = self._snapshot()
        return self._load(wall, busy, steal, ours)

    def stop(self) -> RoundLoad:
        self.pause()
        return self._load(*self._acc)

    def _load(self, wall: float, busy: float, steal: float, ours: float) -> RoundLoad:
        wall = max(wall, 1e-3)
        load = RoundLoad(
            round=self.round,
            repeats=self.repeats,
            wall_s=round(wall, 3),
            cores=len(_cores()),
            ours_cores=round(max(0.0, ours) / wall, 3),
            others_cores=round(max(0.0, busy - ours) / wall, 3),
            steal_cores=round(max(0.0, steal) / wall, 3),
            load1=round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        )
        load.busy = judge(load, self._share)
        return load


LOOK_S = 1.0  # each look at the machine while waiting spans this long (a hundred CPU-time ticks)
TELL_EVERY_S = 20.0  # a waiting line at least this often


def look(pids: Callable[[], list[int]], share: float, seconds: float = LOOK_S) -> RoundLoad:
    """The machine's load over the next `seconds`, judged (ours: this process and `pids`)."""
    probe = LoadProbe(pids, 0, [], share).start()
    time.sleep(seconds)
    return probe.stop()


def wait_for_quiet(
    share: float,
    limit_s: float,
    tell: Callable[[str], None],
    *,
    pids: Callable[[], list[int]] = list,
    looks: Callable[[], RoundLoad] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[float, RoundLoad]:
    """Wait while other processes take `share` of the cores or more, at most `limit_s`, telling
    how busy the machine is when the wait begins and every `TELL_EVERY_S`; returns the seconds
    waited (0 when the first look found it quiet) and the last look.

    Measuring beside a neighbour costs a round that is set aside and measured again; waiting
    for it to go costs only the wait, so a run waits first, for as long as its `--busy-wait`
    allows, and measures after that whatever the machine does. `looks` takes one look (default:
    `look` over `LOOK_S`, this process and `pids` counted as ours); `clock` reads the time.
    """
    take = looks or (lambda: look(pids, share))
    t0 = clock()
    told: float | None = None
    while True:
        load = take()
        waited = clock() - t0
        if load.busy is None and told is None:
            return 0.0, load  # quiet at the first look: no wait
        if load.busy is None or waited >= limit_s:
            if load.busy is None:
                tell(f"the machine is quieter after {waited:.0f} s (others use {_cores_text(load)}): measuring")
            return waited, load
        if told is None or clock() - told >= TELL_EVERY_S:
            tell(f"waiting for a quieter machine: others use {_cores_text(load)}, {waited:.0f} s")
            told = clock()


def _cores_text(load: RoundLoad) -> str:
    return f"{load.others_cores + load.steal_cores:.1f} of {load.cores} cores"
