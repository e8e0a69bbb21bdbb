"""Planning a `--budget`: how much more measuring would decide a condition, and what it costs.

A run measured until decided must know in advance when its budget cannot decide a condition,
or it spends the budget and ends with nothing decided and nothing said. So every undecided
condition's kept pairs are projected forward (`need`: future pairs drawn from the log ratios
measured so far, fed to the same test the decision uses, looking after every pair as it
does), priced at its own and its baseline's cost per slot and per request (`costs`,
`cost_of`), and told to the user in the units a person plans with (`Need.line`, `minutes`). The
scheduler (benchmark/plan/scheduler.py) measures what fits and gives up what does not, naming the
budget that would decide it; the projection stored with a run for what it left undecided is
the same `need`, read in rounds. A projection is a plan, never a decision: the decision is only
ever made on what was measured.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from specreg.decision import bar

HORIZON = 40  # rounds looked ahead: past this, "not within any budget worth asking for"


@dataclass(frozen=True)
class Cost:
    """What measuring costs: a slot's fixed part (server start, warm-up, stop) and each request,
    in seconds; summed over the conditions a decision needs (a condition and its baseline)."""

    slot_s: float
    request_s: float
    once_s: float = 0.0  # paid by the next slot only: a condition's first id replays (execute.py)
    replay_s: float = 0.0  # a measured condition's first slot's replays: what `once_s` of one priced like it is

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.slot_s + other.slot_s, self.request_s + other.request_s, self.once_s + other.once_s)

    def seconds(self, pairs: int, per_round: int) -> float:
        """`pairs` more paired requests, in slots of at most `per_round` requests each."""
        if pairs <= 0:
            return 0.0
        return self.once_s + math.ceil(pairs / max(1, per_round)) * self.slot_s + pairs * self.request_s

    def fits(self, left_s: float, per_round: int) -> int:
        """How many requests of one more slot each (of at most `per_round`) fit in `left_s`."""
        fixed = self.slot_s + self.once_s
        if self.request_s <= 0:
            return per_round if left_s >= fixed else 0
        return max(0, min(per_round, math.floor((left_s - fixed) / self.request_s)))


def costs(
    slot_s: dict[int, list[float]], request_s: dict[int, list[float]], replay_s: dict[int, list[float]] | None = None
) -> dict[int, Cost]:
    """Each measured condition's cost: its mean request (the client's wall time) and its slots'
    time beyond their requests, less their id replays (`replay_s`, per slot): its later slots
    reuse them (priced into every later slot, a large share on small models, they made the plan
    give up on conditions the budget could decide). A condition not measured yet is priced by
    `cost_of`."""
    out = {}
    for idx, slots in slot_s.items():
        reqs = request_s.get(idx, [])
        replays = (replay_s or {}).get(idx, [])
        per = sum(reqs) / len(reqs) if reqs else 0.0
        over = max(0.0, (sum(slots) - sum(reqs) - sum(replays)) / len(slots)) if slots else 0.0
        out[idx] = Cost(over, per, replay_s=replays[0] if replays else 0.0)
    return out


def cost_of(known: dict[int, Cost], idx: int, like: int | None = None) -> Cost:
    """A condition's cost: its own, else that of `like` (the `--tune` first pass for a candidate
    not measured yet), else the mean of every condition measured."""
    if idx in known:
        return Cost(known[idx].slot_s, known[idx].request_s)
    if like is not None and like in known:  # its first slot replays as the one it is priced like did
        return Cost(known[like].slot_s, known[like].request_s, once_s=known[like].replay_s)
    if not known:
        return Cost(0.0, 0.0)
    n = len(known)
    return Cost(sum(c.slot_s for c in known.values()) / n, sum(c.request_s for c in known.values()) / n)


@dataclass(frozen=True)
class Need:
    """One condition's projection: more paired requests (None: not within `HORIZON` rounds) in
    slots of `per_round`, and their seconds."""

    name: str
    pairs: int | None
    seconds: float | None
    per_round: int = 1

    @property
    def rounds(self) -> int | None:
        return None if self.pairs is None else math.ceil(self.pairs / max(1, self.per_round))

    def line(self, left_s: float) -> str:
        if self.pairs is None:
            return (
                f"{self.name}: not decidable within {HORIZON} more rounds (its measured speed-up is "
                f"within its spread of the bar); budget left {minutes(left_s)}"
            )
        if self.pairs == 0:
            return f"{self.name}: decided"
        rounds = self.rounds or 0
        pairs = f"{self.pairs} more paired request" + ("s" if self.pairs != 1 else "")
        slots = f"{rounds} round" + ("s" if rounds != 1 else "")
        return f"{self.name}: about {pairs} ({slots}), {minutes(self.seconds or 0.0)}; budget left {minutes(left_s)}"

    def fits(self, left_s: float) -> bool:
        return self.pairs is not None and (self.seconds or 0.0) <= left_s


def minutes(seconds: float) -> str:
    """Seconds under a minute and a half, then minutes (one decimal below ten): what a person
    plans with (whole minutes read a short budget as longer than it is)."""
    if seconds < 90:
        return f"{max(0.0, seconds):.0f} s"
    if seconds < 600:
        return f"{seconds / 60:.1f}".removesuffix(".0") + " min"
    return f"{seconds / 60:.0f} min"


def need(
    name: str,
    base_ms: Sequence[float],
    cond_ms: Sequence[float],
    min_speedup: float,
    *,
    per_round: int,
    cost: Cost | None = None,
    at_least: int = 0,
    pool: Sequence[float] = (),
    seed: int = 0,
    fresh: bool = False,
    method: bar.Method = bar.METHOD,
) -> Need:
    """How much more would decide one condition: the only projection there is. The `--budget`
    plan prices it and the stored projection (`decision_more_rounds`) reads its `rounds`, so the
    two never disagree on the same pairs.

    Args:
        base_ms, cond_ms: the condition's paired totals with its baseline, in measured order.
        per_round: the prompts of a full slot (a round of the condition or stratum).
        cost: what measuring it and its baseline costs (`costs`, `cost_of`); the seconds of
            the projection. Without it, only the pairs and rounds mean anything.
        at_least: the pairs the policy still asks for whatever the decision.
        pool: the log ratios of its neighbours (other draft lengths of the same tuning,
            re-centred on this one's), which sharpen the spread the future is drawn from.
        fresh: it measured nothing yet; `base_ms`/`cond_ms` stand in for it (its sequence
            starts empty and they are only drawn from).
        method: the test that decides the run (`bar.METHOD`; an older run's, for an import
            that draws its projection again).
    """
    more = _pairs_to_decide(
        base_ms, cond_ms, min_speedup, per_round=per_round, seed=seed, pool=pool, fresh=fresh, method=method
    )
    if more is None:
        return Need(name, None, None, per_round)
    more = max(more, at_least)
    return Need(name, more, (cost or Cost(0.0, 0.0)).seconds(more, per_round), per_round)


def _pairs_to_decide(
    base_ms: Sequence[float],
    cond_ms: Sequence[float],
    min_speedup: float,
    *,
    per_round: int,
    paths: int = 7,
    seed: int = 0,
    pool: Sequence[float] = (),
    fresh: bool = False,
    method: bar.Method = bar.METHOD,
) -> int | None:
    """About how many more paired requests decide this condition if it goes on as measured: future
    rounds of `per_round` pairs are drawn (with replacement) from the log ratios measured so far
    and fed to a copy of the sequence, `paths` times, looking after every pair as the decision
    does; the median of the pairs each path took (0: decided already; None: not within `HORIZON`
    rounds on most paths - the measured speed-up is within its noise of the bar). Whole rounds are
    drawn before a path looks inside one, so the rounds a path takes do not depend on where in
    its last round it decided."""
    xs = bar.log_ratios(base_ms, cond_ms)
    seq = bar.sequence(method) if fresh else bar.sequence(method).add_logs(xs)
    if not fresh and bar.verdict_of(seq, min_speedup) != "undecided":
        return 0
    if len(xs) < 2 or per_round < 1:
        return None
    rng = random.Random(seed)
    draw = [*xs, *pool]
    took: list[float] = []
    for _ in range(paths):
        s = seq.copy()
        for r in range(HORIZON):
            batch = [rng.choice(draw) for _ in range(per_round)]
            before = s.copy()
            if bar.verdict_of(s.add_logs(batch), min_speedup) != "undecided":
                # which pair of the round decided it (the last, if looking pair by pair never does)
                looks = (bar.verdict_of(before.add_logs([x]), min_speedup) for x in batch)
                k = next((j for j, d in enumerate(looks, 1) if d != "undecided"), per_round)
                took.append(r * per_round + k)
                break
        else:
            took.append(math.inf)
    took.sort()
    mid = took[len(took) // 2]
    return None if math.isinf(mid) else int(mid)


def round_seconds(slot_s: dict[int, list[float]], idxs: Sequence[int]) -> float:
    """A round of these conditions (one slot each), at each one's mean slot so far; a condition
    not measured yet at the mean of every slot."""
    every = [x for xs in slot_s.values() for x in xs]
    mean_all = sum(every) / len(every) if every else 0.0
    return sum((sum(slot_s[i]) / len(slot_s[i])) if slot_s.get(i) else mean_all for i in idxs)


def undecided_text(rounds: int, more_rounds: int | None, budget: str | None) -> str:
    """How an undecided condition or stratum reads (`more_rounds` past `HORIZON`: not decidable
    within it): how much it rests on and what would decide it, never its interval, which at a
    few pairs spans the whole clip and read like a verdict on its speed."""
    if rounds <= 0:
        return "undecided: not measured"
    done = f"undecided after {rounds} round" + ("s" if rounds != 1 else "")
    if more_rounds is None:  # not projected (too few pairs, or a run of fixed rounds)
        return done
    if more_rounds > HORIZON:
        return f"{done} (not decidable within {HORIZON} more rounds: its speed-up is within its spread of the bar)"
    would = f"; --budget {budget} would" if budget else ""
    return f"{done} (needs about {more_rounds} more{would})"


def budget_for(spent_s: float, seconds: float) -> str:
    """The `--budget` that would have decided it: what was spent plus what is needed, rounded up
    to the minute."""
    return f"{math.ceil((spent_s + seconds) / 60):.0f}m"


def thin_strata_text(strata: Sequence[str]) -> str | None:
    """What a run says before measuring when its strata are too thin to be decided on their own
    pairs in a round or two (`strata`: one per prompt of a round): each stratum's decision rests
    on its own pairs alone, and a decision takes at least `bar.fewest_pairs()` of them, many more
    near the bar. None when there is one stratum, or every one could be decided in one round."""
    per: dict[str, int] = {}
    for st in strata:
        per[st] = per.get(st, 0) + 1
    fewest = bar.fewest_pairs()
    if len(per) < 2 or min(per.values()) >= fewest:
        return None
    lo, hi = min(per.values()), max(per.values())
    prompts = f"{lo} prompt" + ("s" if lo != 1 else "") if lo == hi else f"{lo} to {hi} prompts"
    rounds = math.ceil(fewest / hi), math.ceil(fewest / lo)
    least = f"{rounds[1]}" if rounds[0] == rounds[1] else f"{rounds[0]} to {rounds[1]}"
    return (
        f"budget: each of the {len(per)} strata has {prompts} a round; a stratum is decided on its own "
        f"pairs, at least {fewest} of them ({least} rounds) and many more near the bar, so the budget "
        "decides the whole workload first and a stratum only where what is left allows"
    )
