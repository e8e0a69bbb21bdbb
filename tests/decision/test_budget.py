"""The budget plan's arithmetic (decision/budget.py) and a part-slot's prompts: pure functions."""

from __future__ import annotations

import random

import pytest

from specreg.benchmark.run.execute import partial_order
from specreg.decision import budget
from specreg.schemas.bench import WorkloadItem


def test_a_cost_prices_pairs_in_slots_and_says_how_many_requests_fit() -> None:
    cost = budget.Cost(10.0, 2.0) + budget.Cost(5.0, 1.0)  # a condition and its baseline
    assert cost == budget.Cost(15.0, 3.0)
    assert cost.seconds(16, 16) == pytest.approx(15 + 48)  # one full slot each
    assert cost.seconds(17, 16) == pytest.approx(30 + 51)  # a second slot's start
    assert cost.fits(63.0, 16) == 16 and cost.fits(45.0, 16) == 10  # (45 - 15) / 3
    assert cost.fits(14.0, 16) == 0  # not even the servers' start fits
    assert budget.Cost(1.0, 0.0).fits(2.0, 8) == 8


def test_costs_split_a_slot_into_its_start_and_its_requests() -> None:
    known = budget.costs({0: [12.0, 14.0], 1: [30.0]}, {0: [1.0] * 16, 1: [2.0] * 10})
    assert known[0] == budget.Cost(5.0, 1.0)  # (26 - 16) / 2 slots; 16 s over 16 requests
    assert known[1] == budget.Cost(10.0, 2.0)
    assert budget.cost_of(known, 7, like=1) == known[1]  # a candidate not run: priced as its first pass
    assert budget.cost_of(known, 7) == budget.Cost(7.5, 1.5)
    assert budget.cost_of({}, 0) == budget.Cost(0.0, 0.0)


def test_a_slot_is_priced_without_the_id_replays_its_later_slots_reuse() -> None:
    """Issue 32: a tiny model's first slot spent ~1.2 s of ~3.3 s replaying rows whose stream held
    text back; later slots of that condition reuse the replays, so its further slots are priced
    without them, while a length not run yet, priced like it, pays them once."""
    known = budget.costs({0: [12.0, 6.0]}, {0: [1.0] * 8}, {0: [4.0, 0.0]})
    assert known[0].slot_s == pytest.approx(3.0) and known[0].replay_s == 4.0  # (18 - 8 - 4) / 2 slots
    assert budget.cost_of(known, 0) == budget.Cost(3.0, 1.0)  # measured: nothing to replay again
    fresh = budget.cost_of(known, 5, like=0)
    assert fresh == budget.Cost(3.0, 1.0, once_s=4.0)
    assert fresh.seconds(8, 4) == pytest.approx(4 + 2 * 3 + 8) and fresh.seconds(0, 4) == 0.0
    assert fresh.fits(10.0, 8) == 3  # (10 - 3 - 4) / 1
    assert (fresh + budget.cost_of(known, 0)).once_s == 4.0  # with its baseline: paid once


def test_a_fresh_leader_is_projected_from_its_stand_in_without_counting_it() -> None:
    """A clear 0.6x first pass decides itself `not faster`; as a stand-in for a length not run
    yet it only shapes the projection, which then needs pairs of its own."""
    rng = random.Random(1)
    base = [rng.uniform(100, 400) for _ in range(16)]
    cond = [b / 0.6 * rng.uniform(0.95, 1.05) for b in base]
    cost = budget.Cost(10.0, 1.0)
    own = budget.need("k16", base, cond, 1.05, per_round=16, cost=cost)
    assert own.pairs == 0 and own.line(60.0) == "k16: decided"
    fresh = budget.need("k4", base, cond, 1.05, per_round=16, cost=cost, fresh=True)
    assert fresh.pairs is not None and 1 <= fresh.pairs <= 16, fresh
    assert fresh.seconds == pytest.approx(cost.seconds(fresh.pairs, 16))
    assert "more paired request" in fresh.line(60.0) and "(1 round)" in fresh.line(60.0)


def test_a_part_slot_takes_one_prompt_of_each_stratum_in_turn() -> None:
    items = [
        WorkloadItem(id=f"{s}-{i}", stratum=s, prompt="p", max_tokens=4) for s in ("a", "b", "c") for i in range(2)
    ]
    assert [i.id for i in partial_order(items)] == ["a-0", "b-0", "c-0", "a-1", "b-1", "c-1"]


def test_durations_read_as_a_person_plans_them() -> None:
    assert [budget.minutes(s) for s in (-3, 50, 89.4, 90, 150, 180, 599, 600, 750)] == [
        "0 s",
        "50 s",
        "89 s",
        "1.5 min",
        "2.5 min",
        "3 min",
        "10 min",
        "10 min",
        "12 min",
    ]


def test_thin_strata_are_told_before_measuring() -> None:
    """A stratum of a prompt or two a round cannot be decided on its own pairs in a round or two:
    no decision rests on fewer than `bar.fewest_pairs()` (every pair at the clip, the test's
    largest stake), which the run says before it measures; a workload whose strata each fill a
    round, or of one stratum, says nothing."""
    from specreg.decision import bar

    fewest = bar.fewest_pairs()
    test = bar.BarTest()
    for n in range(1, fewest + 1):  # every deviation far above the bar: decided at the fewest, not before
        assert test.add_logs([2.0]).verdict(1.05) == ("faster" if n == fewest else "undecided")
    text = budget.thin_strata_text(["a", "b", "c", "d"])
    assert (
        text is not None
        and "4 strata has 1 prompt a round" in text
        and f"at least {fewest} of them ({fewest} rounds)" in text
    )
    mixed = budget.thin_strata_text(["a", "a", "b", "b", "b"])
    assert mixed is not None and "2 to 3 prompts a round" in mixed
    assert budget.thin_strata_text(["a"] * 3) is None
    assert budget.thin_strata_text(["a"] * fewest + ["b"] * fewest) is None
