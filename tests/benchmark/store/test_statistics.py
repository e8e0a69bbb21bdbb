"""Speed-up intervals, E[L] and the acceptance check; the settings model; the run order.

Pure functions on numbers (no server): the real-server tests (benchmark/test_sweep.py, the audit
world) show the same numbers coming out of real runs.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from specreg.benchmark.plan import conditions
from specreg.benchmark.store import condition_summary as summary
from specreg.benchmark.store import statistics
from specreg.errors import UsageError
from specreg.schemas.bench import ConditionRun, ConditionSpec, SpecCounters
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.request_row import RequestRow

# -- bootstrap intervals -----------------------------------------------------------------------


def _noisy(n: int, centre: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [centre * rng.uniform(0.8, 1.2) for _ in range(n)]


def test_interval_is_reproducible_with_the_seed_and_holds_the_estimate() -> None:
    base, cond = _noisy(12, 100.0, 1), _noisy(12, 80.0, 2)
    a = statistics.bootstrap_ci(base, cond, seed=42, label="x|all|1")
    b = statistics.bootstrap_ci(base, cond, seed=42, label="x|all|1")
    assert a is not None and a == b  # bit for bit
    point = statistics.paired_speedup(base, cond)
    assert point is not None and a[0] <= point <= a[1]
    # the draws depend on the seed and on the group (with 2,000 draws the quantiles of medians of
    # 12 units settle on the same values, so look at a few draws)
    assert len({statistics.bootstrap_ci(base, cond, seed=s, label="x", resamples=100) for s in range(20)}) > 1
    assert len({statistics.bootstrap_ci(base, cond, seed=42, label=f"g{i}", resamples=100) for i in range(20)}) > 1
    wide = statistics.bootstrap_ci(base, cond, seed=42, label="x|all|1", level=0.99)
    assert wide is not None and wide[0] <= a[0] and wide[1] >= a[1]


def test_pairing_keeps_a_shared_slowdown_from_widening_the_interval() -> None:
    """A unit's two requests ran together: a slow moment hits both and cancels in a paired ratio."""
    drift = [1.0, 3.0, 1.0, 3.0, 1.0, 3.0, 1.0, 3.0]
    base = [100.0 * d for d in drift]
    cond = [50.0 * d for d in drift]
    assert statistics.bootstrap_ci(base, cond, seed=1, label="l") == (2.0, 2.0)  # despite a 3x spread
    # one cold request (the 11 s baseline) moves the median ratio little, not the interval's low end
    assert statistics.paired_speedup([11_200.0, *base[1:]], cond) == 2.0


def test_too_few_units_have_no_interval() -> None:
    assert statistics.bootstrap_ci([100.0], [50.0], seed=1, label="l") is None
    with pytest.raises(ValueError):
        statistics.bootstrap_ci([1.0, 2.0], [1.0], seed=1, label="l")


def test_reading_an_interval() -> None:
    assert statistics.difference((1.02, 1.3)) == "faster"
    assert statistics.difference((0.7, 0.98)) == "slower"
    assert statistics.difference((0.9, 1.1)) == "no measurable difference"
    assert statistics.difference(None) is None
    assert statistics.interval_text(1.05, (0.9, 1.2)) == "1.05x [0.90, 1.20] no measurable difference"
    assert statistics.interval_text(1.5, (1.2, 1.8)) == "1.50x [1.20, 1.80]"
    assert statistics.interval_text(None, None) == "-"


# -- E[L] and the acceptance check ---------------------------------------------------------------


def test_expected_accepted_length_is_the_seeds_formula() -> None:
    assert statistics.expected_accepted_length(0.5, 3) == pytest.approx((1 - 0.5**4) / (1 - 0.5))
    assert statistics.expected_accepted_length(0.0, 8) == 1.0  # nothing accepted: one token per step
    assert statistics.expected_accepted_length(1.0, 4) == 5.0  # everything: k drafts + the target's own
    assert statistics.expected_accepted_length(0.999999, 4) == pytest.approx(5.0, rel=1e-4)


def test_per_token_acceptance_from_the_accepted_share() -> None:
    """A step stops at the first rejection: 3 drafts at α=0.5 accept 0.875 of 3 on average."""
    share = (0.5 + 0.25 + 0.125) / 3
    assert statistics.alpha_from_rate(share, 3) == pytest.approx(0.5, abs=1e-9)
    assert statistics.alpha_from_rate(0.0, 3) == 0.0 and statistics.alpha_from_rate(1.0, 3) == 1.0


def test_consistency_uses_the_per_position_curve_where_it_exists() -> None:
    c = statistics.consistency(
        drafted=40, accepted=20, draft_length=4.0, per_position={0: 8, 1: 6, 2: 4, 3: 2}, steps=10,
        tokens_per_step=1.5, step_cost=1.2, ci=(1.1, 1.4),
    )  # fmt: skip
    assert c.source == "per-position" and c.expected_accepted_length == pytest.approx(1 + 20 / 10)
    assert c.predicted_speedup == pytest.approx(1.5 / 1.2) and c.unexplained is False
    f = statistics.consistency(
        drafted=40, accepted=20, draft_length=4.0, per_position=None, steps=None, tokens_per_step=None,
        step_cost=None, ci=None,
    )  # fmt: skip
    assert f.source == "formula" and f.expected_accepted_length == pytest.approx(1 + 4 * 0.5)
    assert f.predicted_speedup is None and f.unexplained is None  # no interval, no verdict


def test_zero_accepted_and_faster_is_unexplained() -> None:
    c = statistics.consistency(
        drafted=14, accepted=0, draft_length=3.0, per_position={}, steps=5, tokens_per_step=1.0, step_cost=1.0,
        ci=(2.9, 4.1),
    )  # fmt: skip
    assert c.expected_accepted_length == 1.0 and c.alpha == 0.0 and c.unexplained is True
    assert "0 of 14 drafted tokens accepted: at most 1.00 tokens per target step" in (c.reason or "")
    inside = statistics.consistency(
        drafted=14, accepted=0, draft_length=3.0, per_position={}, steps=5, tokens_per_step=1.0, step_cost=1.0,
        ci=(0.9, 1.2),
    )  # fmt: skip
    assert inside.unexplained is False  # within noise of 1.0: slow, not unexplained
    hair = statistics.consistency(
        drafted=21, accepted=0, draft_length=3.0, per_position={}, steps=5, tokens_per_step=1.0, step_cost=1.0,
        ci=(1.0031, 1.02),
    )  # fmt: skip
    assert hair.unexplained is True  # seen on the real pair: an interval that excludes 1.0 by a hair
    assert "at most 1.0000 tokens per target step, yet the interval's low end is 1.0031" in (hair.reason or "")


def test_nothing_drafted_has_no_acceptance_one_token_per_step_and_predicts_one_over_the_step_cost() -> None:
    c = statistics.consistency(
        drafted=0, accepted=0, draft_length=4.0, per_position=None, steps=None, tokens_per_step=1.0, step_cost=1.25,
        ci=(1.02, 1.3),
    )  # fmt: skip
    assert c.alpha is None and c.expected_accepted_length == 1.0 and c.predicted_speedup == pytest.approx(0.8)
    assert c.unexplained is True and (c.reason or "").startswith("0 tokens drafted: at most 1.00 tokens")


def test_the_bound_is_tokens_per_target_step_not_e_l_of_the_steps_that_drafted() -> None:
    """n-gram: 3 steps drafted 16 tokens and accepted 12 each, the other 91 drafted nothing.
    E[L] = 13, but the run took 100 - 36 + ... target steps: T = 136 / 100 = 1.36."""
    kw: dict[str, Any] = dict(drafted=48, accepted=36, draft_length=16.0, per_position=None, steps=None)
    c = statistics.consistency(**kw, tokens_per_step=136 / 100, step_cost=1.1, ci=(1.5, 2.0))
    assert c.expected_accepted_length == pytest.approx(13.0) and c.unexplained is True
    assert "36 of 48 drafted tokens accepted: at most 1.36 tokens per target step" in (c.reason or "")
    assert statistics.consistency(**kw, tokens_per_step=1.36, step_cost=1.1, ci=(1.0, 1.3)).unexplained is False


# -- summaries ---------------------------------------------------------------------------------


def _row(idx: int, name: str, pid: str, rep: int, total: float, **kw: Any) -> RequestRow:
    return RequestRow(
        condition_idx=idx,
        condition=name,
        prompt_id=pid,
        stratum="s",
        repeat=rep,
        started_at=datetime.now(UTC),
        ok=True,
        total_ms=total,
        output_tokens=16,
        predicted_ms=total * 0.8,
        prompt_n=20,
        prompt_ms=total * 0.1,
        **kw,
    )


def _run(spec_status: str = "ok", accepted: int = 0, spec_ms: float = 25.0, drafted: int = 24) -> list[Any]:
    base = ConditionRun(idx=0, spec=ConditionSpec(name="none", method="none"), status="ok")
    spec = ConditionRun(
        idx=1,
        spec=ConditionSpec(name="ngram-simple", method="ngram-simple"),
        status=spec_status,
        failure=None if spec_status == "ok" else "speculation did not run: the server refused it",
        counters=SpecCounters(drafted=drafted, accepted=accepted, steps=6),
    )
    rows = []
    for p in ("a", "b"):
        for rep in range(3):
            rows.append(_row(0, "none", p, rep, 100.0 + rep))
            rows.append(
                _row(1, "ngram-simple", p, rep, spec_ms + rep, draft_n=drafted // 6, draft_n_accepted=accepted // 6)
            )
    return summary.summarize([base, spec], rows, summary.StatSettings(seed=7))


def test_zero_accepted_tokens_faster_condition_is_flagged() -> None:
    out = {(s.condition, s.stratum): s for s in _run()}
    s = out[("ngram-simple", "all")]
    assert s.speedup == pytest.approx(101 / 26) and s.speedup_ci95 is not None and s.n_paired == 6
    assert s.accepted == 0 and s.expected_accepted_length == 1.0 and s.tokens_per_step == 1.0
    assert s.unexplained is True and s.predicted_speedup == 1.0  # n-gram, nothing accepted: no gain predicted
    assert out[("ngram-simple", "s")].unexplained is True
    assert out[("none", "all")].speedup == 1.0 and out[("none", "all")].speedup_note == "reference"


def test_failed_condition_has_no_speed_up_only_its_reason() -> None:
    for s in _run(spec_status="failed"):
        if s.condition == "ngram-simple":
            assert s.speedup is None and s.speedup_ci95 is None and s.difference is None
            assert s.speedup_note == "condition failed: speculation did not run: the server refused it"
            assert s.predicted_speedup is None and s.unexplained is None


def test_summaries_are_reproducible_and_carry_the_condition_parameters() -> None:
    # 8 of 16 tokens per request accepted: 8 target steps instead of 16, at most 2x; measured 1.66x
    a, b = _run(accepted=48, drafted=60, spec_ms=60.0), _run(accepted=48, drafted=60, spec_ms=60.0)
    assert [s.model_dump() for s in a] == [s.model_dump() for s in b]
    s = next(x for x in a if x.condition == "ngram-simple" and x.stratum == "all")
    assert s.concurrency == 1 and s.draft_n_max is None and s.params == {}
    assert s.unexplained is False and s.difference == "faster"


# -- settings and order ------------------------------------------------------------------------


def test_settings_constraints_name_the_flag() -> None:
    s = BenchSettings(concurrency=4, draft_n_max=[16, 2, 4, 2])
    assert s.concurrency == [4] and s.draft_n_max == [2, 4, 16] and s.repeat == 3
    for values, needle in [
        ({"repeat": 0}, "--repeat: Input should be greater than or equal to 1"),
        ({"concurrency": [1, 0]}, "--concurrency: every concurrency must be at least 1"),
        ({"concurrency": []}, "--concurrency: List should have at least 1 item"),
        ({"draft_n_max": [-1]}, "--draft-max: every draft length must be >= 0"),
        ({"request_timeout_s": 0}, "--request-timeout: Input should be greater than 0"),
        ({"repat": 3}, "repat: Extra inputs are not permitted"),
    ]:
        with pytest.raises(UsageError) as exc:
            BenchSettings.from_options(**values)
        assert needle in exc.value.message


def test_rounds_shuffle_with_the_seed_and_start_with_the_baselines() -> None:
    specs = conditions.plan(
        "draft-simple", draft_path="/d", draft_sha256="d" * 64, draft_n_max=[2, 8], concurrency=[1, 4]
    )
    names = [s.name for s in specs]
    assert names[:2] == ["none c1", "none c4"] and "draft-simple k8 c4" in names and len(names) == 10
    assert {s.concurrency for s in specs if s.name.endswith("c4")} == {4}
    order = conditions.schedule(specs, 3, "rounds", seed=5)
    assert order == conditions.schedule(specs, 3, "rounds", seed=5)
    assert order != conditions.schedule(specs, 3, "rounds", seed=6)
    for r in range(3):
        slots = [x for x in order if x.round == r]
        assert sorted(x.condition for x in slots) == sorted(names) and all(x.repeats == [r] for x in slots)
    assert {order[0].condition, order[1].condition} == {"none c1", "none c4"}
    blocked = conditions.schedule(specs, 3, "blocked", seed=5)
    assert [x.condition for x in blocked] == names and all(x.repeats == [0, 1, 2] for x in blocked)
