"""A run that knows when the machine was busy: which rounds ran under contention, set aside.

A speed-up is a ratio of two timings taken minutes apart. A neighbour that loads the cores during
one of them makes that ratio say more about the neighbour than about speculation (a run taken
while another job loaded the cores once made `deploy` print as deployable a condition that a
quiet re-run could not tell from the baseline). So each slot (one condition's round: a server
start, its warm-up, its requests) is watched while its requests run, and a slot is **set aside**
- kept out of the speed-up, its interval and the anytime-valid decision, for its own condition
and, when it is a baseline's, for every condition paired with it - when

1. **others loaded the cores**: the CPU time of every process that is not this specreg or its
   server, plus the time the hypervisor stole, per wall second of the slot, reached
   `--busy-share` of the logical cores (default `schemas.bench_settings.DEFAULT_BUSY_SHARE`; at least
   `servers.load.BUSY_MIN_CORES`); or
2. **a request ran far outside its prompt's spread**: slower than `SPREAD_FACTOR` times the
   median of the same prompt's other repetitions in the same condition, and by more than
   `SPREAD_MIN_MS` (the same greedy request on the same server does the same work each time;
   only something outside it makes it many times slower); or
3. **a request's two clocks disagree** (`clock_disagreement`): timings rest on the server's own
   clock (`RequestRow.timed_ms`), and the client's wall clock around the same request
   read more than `CLOCK_SHARE` and `CLOCK_MIN_MS` above it.

`bench --budget` measures the set-aside rounds again while the budget lasts (benchmark/run/runner.py
asks `kept_rows` for what its decision may rest on); without a budget they stay out, and a
condition whose every round was set aside gets no speed-up, with the reason. The rows kept
change as rounds come (a later round can show an earlier request far outside its prompt's
spread), so the decision is not made on one growing sequence; its error rate is checked on
simulated timings instead (tests/benchmark/store/test_contention.py; docs/statistics.md).

Why others' CPU time and not the load average: the benchmark itself loads the cores. Its server
runs one thread per core through every request and the client streams the tokens, so a quiet
run's 1-minute load is already about the number of cores (`load > cores` would fire on every
run, and the load average lags a minute behind the slot besides). What a neighbour adds is CPU
time on processes that are not ours, which `/proc/stat` (every process's time, and steal) minus
psutil's times of this process and the server's process tree gives exactly, per slot.

The thresholds: `benchmarks/bench_contention.py` measures what the probe reads with no, one and
two CPU-burning neighbours (the performance page). The default share sits well above what a
quiet run's others read and below what a single burner takes: a neighbour taking a quarter of
the machine is contention, whatever the machine, and `BUSY_MIN_CORES` keeps a 1-core machine
from calling a stray quarter-core busy. `SPREAD_FACTOR` is far outside what the same request
varies by on a quiet machine, and the `SPREAD_MIN_MS` floor keeps a scheduler hiccup on a short
request from counting.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from statistics import median  # the stdlib's (specreg.benchmark.store.statistics is the intervals)
from typing import TYPE_CHECKING

from specreg.schemas.bench import ALL_STRATA

if TYPE_CHECKING:
    from specreg.schemas.bench import ConditionRun, ConditionSummary
    from specreg.schemas.request_row import RequestRow

SPREAD_FACTOR = 3.0  # a request this many times its prompt's median (other repetitions) ran far outside
SPREAD_MIN_MS = 100.0  # ... and at least this much slower
CLOCK_SHARE = 0.5  # the client's clock this much above the server's (see clock_disagreement) ...
CLOCK_MIN_MS = 250.0  # ... and at least this much: the two clocks disagree

Slot = tuple[int, int]  # (condition idx, repetition): the unit a set-aside round removes
PARTNER = "its baseline's round: "  # a reason line that is the paired baseline's, not the condition's own


def spread_outliers(rows: Iterable[RequestRow]) -> dict[Slot, str]:
    """Slots holding a request far outside its prompt's spread in its condition (why, per slot)."""
    groups: dict[tuple[int, str], list[RequestRow]] = defaultdict(list)
    for r in rows:
        if r.ok and r.timed_ms:
            groups[(r.condition_idx, r.prompt_id)].append(r)
    out: dict[Slot, str] = {}
    for rs in groups.values():
        timed = [(o.repeat, float(o.timed_ms or 0.0)) for o in rs]  # read once: a property, per pair of rows
        for r, (_, ms) in zip(rs, timed, strict=True):
            others = [t for rep, t in timed if rep != r.repeat]
            if not others:
                continue
            med = median(others)
            if ms > SPREAD_FACTOR * med and ms - med > SPREAD_MIN_MS:
                out.setdefault(
                    (r.condition_idx, r.repeat),
                    f"request {r.prompt_id} took {ms / 1000:.2f} s, {ms / med:.0f}x its median "
                    f"{med / 1000:.2f} s in the other rounds",
                )
    return out


def clock_disagreement(r: RequestRow) -> str | None:
    """Why a request's two clocks disagree (None: they agree, or there is one clock). The
    server's own time is what speed-ups rest on; the client's wall clock around the same request
    is its cross-check: it is the server's time plus the HTTP stream, a few ms. A client that
    took more than `CLOCK_SHARE` longer than the server, and `CLOCK_MIN_MS` more, waited for
    something the server's clock did not see (its own thread starved on a loaded machine, a
    stalled connection), and the slot's figures are not trusted either way."""
    server, client = r.server_ms, r.total_ms
    if not r.ok or server is None or client is None or server <= 0:
        return None
    if client > server * (1 + CLOCK_SHARE) and client - server > CLOCK_MIN_MS:
        return (
            f"request {r.prompt_id}: the client's clock read {client / 1000:.2f} s, the server's "
            f"{server / 1000:.2f} s (beyond {CLOCK_SHARE:.0%} and {CLOCK_MIN_MS:g} ms)"
        )
    return None


def set_aside(conditions: Iterable[ConditionRun], rows: Iterable[RequestRow], spread: bool = True) -> dict[Slot, str]:
    """Every slot that ran under contention, with why: its measured load (judged when it ran,
    with the run's `--busy-share`), then its requests (`spread`: False when set-aside is off)."""
    out: dict[Slot, str] = {}
    for c in conditions:
        for load in c.load:
            if load.busy:
                for rep in load.repeats:
                    out.setdefault((c.idx, rep), load.busy)
    rows = list(rows)
    for slot, why in spread_outliers(rows).items() if spread else ():
        out.setdefault(slot, why)
    for r in rows if spread else ():
        clocks = clock_disagreement(r)
        if clocks is not None:
            out.setdefault((r.condition_idx, r.repeat), clocks)
    return out


def kept_rows(rows: Iterable[RequestRow], aside: dict[Slot, str], partner: int | None = None) -> list[RequestRow]:
    """The rows a speed-up may rest on: not in a set-aside slot of their own condition, nor of
    `partner` (the baseline they are paired with) in the same repetition."""
    return [
        r
        for r in rows
        if (r.condition_idx, r.repeat) not in aside and (partner is None or (partner, r.repeat) not in aside)
    ]


def reasons(cond: ConditionRun, partner: ConditionRun | None, aside: dict[Slot, str]) -> list[str]:
    """One line per repetition set aside for this condition (its own slot's reason first)."""
    reps = sorted({rep for (idx, rep) in aside if idx == cond.idx or (partner is not None and idx == partner.idx)})
    out = []
    for rep in reps:
        own = aside.get((cond.idx, rep))
        if own is not None:
            out.append(f"round {rep}: {own}")
        elif partner is not None:
            out.append(f"round {rep}: {PARTNER}{aside[(partner.idx, rep)]}")
    return out


def run_notes(summaries: Iterable[ConditionSummary]) -> list[str]:
    """What a run set aside, for people: a headline with the count, then each condition's round
    and why (its own slots; a baseline's round is listed once, under the baseline). Empty when
    nothing was set aside."""
    own = [
        f"{s.condition} {line}"
        for s in summaries
        if s.stratum == ALL_STRATA
        for line in s.set_aside
        if not line.split(": ", 1)[-1].startswith(PARTNER)
    ]
    if not own:
        return []
    rounds = "condition round" + ("s" if len(own) > 1 else "")
    head = f"{len(own)} {rounds} set aside (machine busy): left out of the speed-ups, intervals and decisions"
    return [head, *own]


def every_round_set_aside(conds: list[ConditionRun], rows: list[RequestRow], aside: dict[Slot, str]) -> str | None:
    """The first reason, when every slot measured so far was set aside (None: some were kept):
    then there is nothing to price a draft length from or decide on (a busy machine's first pass
    would price every length from set-aside rounds: a flat curve of "slow-downs")."""
    measured = {(r.condition_idx, r.repeat) for r in rows}
    if not measured or any(slot not in aside for slot in measured):
        return None
    return aside[min(measured)]


def busy_line(why: str, busy_share: float, budget: bool = False) -> str:
    """One line for a run whose every round was set aside, with the ways forward."""
    spent = ", so the budget is not spent measuring again" if budget else ""
    return (
        f"every round so far was set aside as contended ({why}): nothing measured to decide on{spent}; "
        f"wait for a quieter machine, raise --busy-share (now {busy_share:g}), or --busy-share off "
        "(contended timings then count: a neighbour's load lands on whichever condition it hit)"
    )
