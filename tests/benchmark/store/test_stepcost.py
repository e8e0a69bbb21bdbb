"""The step-cost model behind the predicted speed-up, and per-stratum acceptance numbers.

Pure formulas with hand-computed numbers first, then `summarize` on rows shaped like llama.cpp's
(a request that drafted nothing carries no `draft_n`), then one real run on the bundled server:
ngram-simple with 3-grams drafts in the chat stratum and nothing in the repetitive
one, and a draft model of the target's own size.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from statistics import median
from types import SimpleNamespace
from typing import Any

import pytest
from _bench_helpers import NOISE, admit, db_rows
from _registry_helpers import model

from specreg.benchmark.store import condition_summary as summary
from specreg.benchmark.store import stepcost
from specreg.schemas.bench import ConditionRun, ConditionSpec, SpecCounters
from specreg.schemas.request_row import RequestRow

# -- the formulas --------------------------------------------------------------------------------


def test_verify_cost_is_one_decode_for_a_small_batch_and_b_prompt_tokens_for_a_large_one() -> None:
    # t_d = 20 ms per decode, t_p = 2.5 ms per prompt token: 8 prompt tokens cost one decode
    assert stepcost.verify_cost(3, 20.0, 2.5) == 1.0  # b = 4: 10 ms, still one decode
    assert stepcost.verify_cost(15, 20.0, 2.5) == 2.0  # b = 16: 40 ms
    assert stepcost.verify_cost(63, 20.0, 2.5) == 8.0  # b = 64: 160 ms


def test_counts_split_target_steps_into_drafted_and_plain() -> None:
    c = stepcost.Counts(tokens=100, accepted=60, drafted=80, draft_length=16.0)
    assert c.target_steps == 40 and c.drafting_steps == 5.0 and c.tokens_per_step == 2.5
    assert stepcost.Counts(10, 0, 0, None).drafting_steps == 0.0  # nothing drafted: k does not matter
    assert stepcost.Counts(10, 2, 8, None).drafting_steps is None  # drafted, k unknown: D cannot be told
    assert stepcost.Counts(10, 8, 40, 2.0).drafting_steps == 2.0  # never more drafting steps than steps
    assert stepcost.Counts(0, 0, 0, 4.0).tokens_per_step is None


def test_an_ngram_prediction_prices_the_long_verify_batch() -> None:
    """The real-pair flaw: 6 n-gram drafts of 64 tokens accepted 380 of 400 tokens.

    S = 20 target steps, 6 of them verify a 65-token batch (v = 65 * 2.5 / 20 = 8.125), 14 are
    plain decodes: 14 + 6 * 8.125 = 62.75 decode steps for 400 tokens, 6.37x. Pricing every
    step as one decode predicted E[L] = 1 + 380 / 6 = 64.3x."""
    c = stepcost.Counts(tokens=400, accepted=380, drafted=384, draft_length=64.0)
    v = stepcost.verify_cost(64.0, 20.0, 2.5)
    p = stepcost.predict(c, v, None, model_drafted=False)
    assert v == 8.125 and p.tokens_per_step == 20.0 and p.draft_cost == 0.0
    assert p.step_cost == pytest.approx(62.75 / 20) and p.predicted_speedup == pytest.approx(400 / 62.75)


def test_a_draft_models_cost_is_measured_from_the_conditions_decode_time() -> None:
    """N 100, A 50, Dr 100, k 4: S 50, D 25, U 25, G = Dr + S = 150 draft decodes; t_d 20 ms.
    1,600 ms of decode = 80 decode steps, 50 of them the target's: r = 30 / 150 = 0.2."""
    c = stepcost.Counts(tokens=100, accepted=50, drafted=100, draft_length=4.0)
    v = stepcost.verify_cost(4.0, 20.0, 2.5)  # b = 5: 12.5 ms < one decode
    r = stepcost.draft_cost(c, 1600.0, 20.0, v)
    assert v == 1.0 and stepcost.draft_model_decodes(c) == 150 and r == pytest.approx(0.2)
    p = stepcost.predict(c, v, r, model_drafted=True)
    assert p.step_cost == pytest.approx(80 / 50) and p.predicted_speedup == pytest.approx(100 / 80)
    # a stratum that drafted nothing still pays the draft model once per step: 1 / (1 + 0.2)
    idle = stepcost.predict(stepcost.Counts(40, 0, 0, 4.0), v, r, model_drafted=True)
    assert idle.tokens_per_step == 1.0 and idle.step_cost == pytest.approx(1.2)
    assert idle.predicted_speedup == pytest.approx(1 / 1.2)
    # an n-gram method with nothing drafted gains and loses nothing
    assert stepcost.predict(stepcost.Counts(40, 0, 0, None), None, None, False).predicted_speedup == 1.0
    assert stepcost.draft_cost(c, 800.0, 20.0, v) == 0.0  # faster than the target alone: never negative
    assert stepcost.predict(c, None, r, True).predicted_speedup is None  # drafted, verify cost unknown


def _req(pid: str, stratum: str, **kw: Any) -> RequestRow:
    base: dict[str, Any] = dict(condition_idx=0, condition="x", prompt_id=pid, stratum=stratum, repeat=0, ok=True)
    return RequestRow(started_at=datetime.now(UTC), **{**base, **kw})


def test_costs_and_counts_from_request_rows() -> None:
    rows = [
        _req("a", "s", output_tokens=10, predicted_ms=100.0, prompt_n=40, prompt_ms=20.0),
        _req(
            "b", "s", output_tokens=10, predicted_ms=120.0, prompt_n=10, prompt_ms=10.0, draft_n=6, draft_n_accepted=4
        ),
        _req("c", "s", output_tokens=10, predicted_ms=140.0, prompt_ms=9.0),  # a run from before prompt_n
        _req("d", "s", ok=False, output_tokens=10, predicted_ms=1e6, prompt_n=1, prompt_ms=1e6, draft_n=50),
    ]
    assert stepcost.decode_ms_per_token(rows) == 12.0  # median of 10, 12, 14 ms (the failed one is out)
    assert stepcost.prompt_ms_per_token(rows) == pytest.approx(0.75)  # median of 0.5, 1.0
    c = stepcost.counts(rows, 3.0)
    assert (c.tokens, c.accepted, c.drafted, c.draft_length) == (30, 4, 6, 3.0)  # no draft_n: drafted 0


def test_a_draft_models_cost_is_the_median_over_requests_so_one_slow_request_does_not_move_it() -> None:
    """Baseline: 10 tokens in 200 ms (t_d 20), 40 prompt tokens in 100 ms (t_p 2.5). Each draft
    request: N 10, A 5, Dr 10, k 4: S 5, D 2.5, U 2.5, v 1, G 15; 160 ms = 8 decode steps gives
    r = (8 - 5) / 15 = 0.2. One request slowed to 1,600 ms by a busy machine gives r = 5 alone;
    a pooled sum would say (96 - 15) / 45 = 1.8."""
    base = [_req(p, "s", output_tokens=10, predicted_ms=200.0, prompt_n=40, prompt_ms=100.0) for p in "abc"]
    spec = dict(output_tokens=10, draft_n=10, draft_n_accepted=5)
    rows = [_req(p, "s", predicted_ms=ms, **spec) for p, ms in (("a", 160.0), ("b", 160.0), ("c", 1600.0))]
    assert stepcost.fitted_draft_cost(rows, base, 4.0) == pytest.approx(0.2)
    assert stepcost.fitted_draft_cost(rows, [], 4.0) is None  # no baseline timing: nothing to price with


# -- per-stratum summaries -----------------------------------------------------------------------


def _world(chat_ms: float, rep_ms: float) -> dict[tuple[str, str], Any]:
    """A baseline and ngram-simple (k = 4) over two strata: `rep` drafts 8 and accepts 6 per request,
    `chat` drafts nothing (its rows carry no draft counts, as llama.cpp leaves them out at 0).
    Baseline: 20 tokens in 200 ms (t_d 10 ms), 50 prompt tokens in 25 ms (t_p 0.5 ms)."""
    base = ConditionRun(idx=0, spec=ConditionSpec(name="none", method="none"), status="ok")
    ngram = ConditionRun(
        idx=1,
        spec=ConditionSpec(name="ngram-simple", method="ngram-simple"),
        status="ok",
        counters=SpecCounters(drafted=32, accepted=24, steps=8, per_position={0: 8, 1: 8, 2: 6, 3: 2}),
    )
    rows = []
    for stratum, ms in (("rep", rep_ms), ("chat", chat_ms)):
        for p in (f"{stratum}1", f"{stratum}2"):
            for rep in range(2):
                common = dict(stratum=stratum, repeat=rep, output_tokens=20, prompt_n=50, prompt_ms=25.0)
                rows.append(
                    _req(p, condition_idx=0, condition="none", total_ms=250.0 + rep, predicted_ms=200.0, **common)
                )
                drafts = dict(draft_n=8, draft_n_accepted=6) if stratum == "rep" else {}
                rows.append(
                    _req(
                        p,
                        condition_idx=1,
                        condition="ngram-simple",
                        total_ms=ms + rep,
                        predicted_ms=ms - 50,
                        **common,
                        **drafts,
                    )
                )
    return {(s.condition, s.stratum): s for s in summary.summarize([base, ngram], rows)}


def test_each_stratum_has_its_own_e_l_and_prediction() -> None:
    out = _world(chat_ms=250.0, rep_ms=200.0)
    rep, chat, whole = (out[("ngram-simple", s)] for s in ("rep", "chat", "all"))
    # rep, per request: N 20, A 6, D = 8 / 4 = 2 drafting steps of S = 14; a 5-token batch costs
    # 2.5 ms < one 10 ms decode: 14 decode steps for 20 tokens
    assert rep.drafted == 32 and rep.acceptance == 0.75 and rep.accepted_length_source == "formula"
    assert rep.expected_accepted_length == pytest.approx(1 + 6 / 2) and rep.alpha is not None
    assert rep.tokens_per_step == pytest.approx(20 / 14) and rep.predicted_speedup == pytest.approx(20 / 14)
    assert rep.verify_cost == 1.0 and rep.draft_cost == 0.0 and rep.unexplained is False  # 1.25x <= 1.43
    # chat drafted nothing: no acceptance, one token per step, no gain predicted, measured 1.0x
    assert chat.drafted == 0 and chat.accepted == 0 and chat.acceptance is None and chat.alpha is None
    assert chat.expected_accepted_length == 1.0 and chat.tokens_per_step == 1.0 and chat.predicted_speedup == 1.0
    assert chat.unexplained is False
    # the whole condition: E[L] from the per-position curve, T over all 136 target steps
    assert whole.accepted_length_source == "per-position" and whole.expected_accepted_length == pytest.approx(4.0)
    assert whole.tokens_per_step == pytest.approx(160 / 136) and whole.predicted_speedup == pytest.approx(160 / 136)


def test_a_stratum_that_drafted_nothing_yet_ran_faster_is_unexplained_the_honest_one_is_not() -> None:
    out = _world(chat_ms=200.0, rep_ms=200.0)
    chat, rep = out[("ngram-simple", "chat")], out[("ngram-simple", "rep")]
    assert chat.speedup_ci95 is not None and chat.speedup_ci95[0] > 1.0
    assert chat.unexplained is True and chat.unexplained_reason is not None
    assert chat.unexplained_reason.startswith("0 tokens drafted: at most 1.00 tokens per target step")
    assert rep.unexplained is False  # the same 1.25x is within what 6 of 20 tokens accepted allow
    # the condition-wide E[L] of 4 would have explained 1.25x for both; tokens per step (1.18) does not
    assert out[("ngram-simple", "all")].unexplained is True


# -- a real run ----------------------------------------------------------------------------------

# the tiny random models' workload (the demo's before it had models built to win): these random
# weights loop on the chat prompts and never on the repetitive ones
WORKLOAD = (
    "\n".join(
        [
            '{"id": "code-rename", "stratum": "repetitive", "max_tokens": 48, "prompt": "def add(x):\\n    x = x + 1\\n'
            '    return x\\n\\ndef add(x):\\n    x = x + 1\\n    return x\\n\\ndef add("}',
            '{"id": "yaml-list", "stratum": "repetitive", "max_tokens": 48, "prompt": "name: a\\nkey: b\\nname: a\\n'
            'key: b\\nname: a\\nkey:"}',
            '{"id": "chat-what", "stratum": "chat", "max_tokens": 48, '
            '"prompt": "Question: what is a draft model?\\nAnswer:"}',
            '{"id": "chat-why", "stratum": "chat", "max_tokens": 48, "prompt": "Why test a server before production?"}',
        ]
    )
    + "\n"
)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    from specreg.benchmark.run.runner import Runner
    from specreg.registry.store import Registry
    from specreg.schemas.bench_settings import BenchSettings

    d = tmp_path_factory.mktemp("stepcost")
    target, draft = model(d, "t.gguf", name="audit-target"), model(d, "d.gguf", name="noisy", noise=NOISE)
    (d / "wl.jsonl").write_text(WORKLOAD)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECREG_HOME", str(d / "home"))
        with Registry(d / "r.db", show_progress=False) as reg:
            pid = admit(reg, target, draft)
            opts = BenchSettings(
                workload=str(d / "wl.jsonl"),
                methods=["ngram-simple", "draft-simple"],
                ngram={
                    "--spec-ngram-simple-size-n": 3,
                    "--spec-ngram-simple-size-m": 8,
                },  # repetitive outputs repeat none
                repeat=2,
                threads=1,
                ctx_size=512,
                start_timeout_s=60,
                request_timeout_s=60,
            )
            run = Runner(reg, opts).bench([pid])[0]
    yield SimpleNamespace(run=run, db=d / "r.db", by={(s.condition, s.stratum): s for s in run.summaries})


def test_real_run_stratum_without_drafts_has_its_own_numbers(real: SimpleNamespace) -> None:
    by = real.by
    rep, chat, whole = (by[("ngram-simple", s)] for s in ("repetitive", "chat", "all"))
    assert whole.status == "ok" and chat.drafted and chat.accepted  # it drafts where the output loops
    assert rep.drafted == 0 and rep.acceptance is None and rep.alpha is None
    assert rep.expected_accepted_length == 1.0 and rep.tokens_per_step == 1.0 and rep.predicted_speedup == 1.0
    assert whole.accepted_length_source == "per-position" and chat.accepted_length_source == "formula"
    assert chat.expected_accepted_length is not None and chat.expected_accepted_length > 1.0
    for s in (rep, chat, whole):  # the flag is exactly "the interval's low end above tokens per step"
        assert s.speedup_ci95 is not None and s.tokens_per_step is not None
        assert s.unexplained is (s.speedup_ci95[0] > s.tokens_per_step + 1e-9)


def test_real_run_prices_steps_from_its_own_measurements(real: SimpleNamespace) -> None:
    rows = db_rows(real.db, "SELECT condition, prompt_n, prompt_ms FROM bench_requests WHERE ok = 1")
    assert rows and all(r["prompt_n"] and r["prompt_n"] > 0 and r["prompt_ms"] for r in rows)  # stored (m011)
    for (cond, _stratum), s in real.by.items():
        if cond == "none":
            continue
        assert s.verify_cost is not None and s.verify_cost >= 1.0 and s.step_cost is not None
        assert s.predicted_speedup == pytest.approx(s.tokens_per_step / s.step_cost)
        if cond == "ngram-simple":  # drafting is a lookup: a step costs at least one decode
            assert s.draft_cost == 0.0 and s.step_cost >= 1.0 and s.predicted_speedup <= s.tokens_per_step + 1e-9
    d = real.by[("draft-simple", "all")]
    # the draft has the target's shapes (small noise on its weights): one of its decodes costs about
    # one target decode, measured from the condition's decode time (a loose band: a busy machine)
    assert d.draft_cost is not None and 0.2 < d.draft_cost < 8.0
    for st in ("repetitive", "chat"):
        assert real.by[("draft-simple", st)].draft_cost == d.draft_cost  # one r per condition
    # r from the stored rows by hand: per request (pred_ms / t_d - U - D v) / G, then the median
    q = "SELECT * FROM bench_requests WHERE ok = 1 AND condition = ?"
    base, mine = db_rows(real.db, q, ("none",)), db_rows(real.db, q, ("draft-simple",))
    t_d = median(r["predicted_ms"] / r["output_tokens"] for r in base)
    t_p = median(r["prompt_ms"] / r["prompt_n"] for r in base)
    counters = next(c.counters for c in real.run.conditions if c.spec.name == "draft-simple")
    k = counters.drafted / counters.steps
    v = max(1.0, (k + 1) * t_p / t_d)
    each = []
    for r in mine:
        steps = r["output_tokens"] - (r["draft_n_accepted"] or 0)
        drafting = min((r["draft_n"] or 0) / k, steps)
        units = (steps - drafting) + drafting * v
        each.append((r["predicted_ms"] / t_d - units) / ((r["draft_n"] or 0) + steps))
    assert d.draft_cost == pytest.approx(max(0.0, median(each)), rel=1e-9)
