"""Mismatch triage against the real bundled server: a near tie, a confident divergence, chat ids.

A "faulty" speculative server is the real bundled llama.cpp server behind a wrapper that loads
another target for the speculative condition (the baseline keeps the registered one), so its
output really differs. The near tie: that other target is the registered one with its weights
perturbed by 1% noise - a tiny change to every logit, which flips the choice only where the
baseline's top two tokens were nearly tied (the tiny random model's distribution is flat: p
about 0.009 a token), the way batched verification's rounding does. The divergence: a target
whose output loops with another period (CYCLER, 4 instead of 64), so at token 4 it picks a token
the baseline gave p < 1e-5.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from _bench_helpers import ITEMS, admit, workload
from _registry_helpers import model

from specreg.audit.gates import equivalence_gate
from specreg.benchmark.run.reply import TokenProbs
from specreg.benchmark.run.runner import Runner
from specreg.benchmark.store.digest import digest_run
from specreg.cli import main
from specreg.equivalence.triage import aligned
from specreg.registry.store import Registry
from specreg.report import common
from specreg.schemas.audit import Policy
from specreg.schemas.bench import BenchRun
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.request_row import RequestRow
from specreg.schemas.triage import TopToken, Triage, worst

CYCLER = {"head_seed": 7, "block_scale": 0.01, "cycle": 64, "extra_tokens": 400}  # word tokens in the cycle


def _faulty_run(d: Path, base: dict[str, object], faulty: dict[str, object], max_tokens: int) -> BenchRun:
    target = model(d, "target.gguf", **base)  # type: ignore[arg-type]
    draft = model(d, "draft.gguf", name="tiny-draft", **base)  # type: ignore[arg-type]
    other = model(d, "faulty.gguf", **{**base, "name": "tiny-faulty", **faulty})  # type: ignore[arg-type]
    wrapper = d / "llama-server"
    wrapper.write_text(
        f"#!{sys.executable}\nimport os, sys\na = sys.argv[1:]\n"
        'if "--spec-type" in a and a[a.index("--spec-type") + 1] != "none" and "-m" in a:\n'
        f'    a[a.index("-m") + 1] = {str(other)!r}\n'
        f'os.execv({sys.executable!r}, [{sys.executable!r}, "-m", "specreg.servers.bundled_server", *a])\n'
    )
    wrapper.chmod(0o755)
    reg = Registry(d / "reg.db", show_progress=False)
    try:
        pair = admit(reg, target, draft)
        wl = workload(d, [dict(i, max_tokens=max_tokens) for i in ITEMS])
        opts = BenchSettings(
            workload=str(wl), threads=1, ctx_size=512, start_timeout_s=30.0, request_timeout_s=30.0, repeat=1,
            methods=["draft-simple"], server=str(wrapper),
        )  # fmt: skip
        return Runner(reg, opts).bench([pair])[0]
    finally:
        reg.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    near_dir, div_dir = tmp_path_factory.mktemp("near-tie"), tmp_path_factory.mktemp("divergence")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECREG_HOME", str(near_dir / "home"))
        near = _faulty_run(near_dir, {}, {"noise": 0.01}, 16)
        div = _faulty_run(div_dir, CYCLER, {"cycle": 4}, 12)
    yield SimpleNamespace(near=near, div=div, div_db=div_dir / "reg.db")


def _spec_rows(run: BenchRun) -> dict[str, RequestRow]:
    return {r.prompt_id: r for r in run.requests if r.condition != "none"}


def test_a_near_tie_is_reported_not_failed(runs: SimpleNamespace) -> None:
    row = _spec_rows(runs.near)["json"]
    t = row.triage
    assert row.matches_baseline is False and t is not None and t.kind() == "near tie", t
    assert t.position == row.first_diff and t.top[0].id == t.base_id and t.row_logprob is not None
    assert t.row_id in {x.id for x in t.top} and (t.gap() or 1) <= 0.1
    assert "near tie, token" in t.text() and "<= 0.1" in t.text()
    whole = next(s for s in runs.near.summaries if s.condition != "none" and s.stratum == "structured")
    assert whole.n_near_ties == 1 and whole.n_divergences == 0
    digest = digest_run(runs.near)
    cond = next(c for c in digest.conditions if not c.is_baseline)
    g = equivalence_gate(digest, cond, Policy(), 1)
    assert (
        g.strata["structured"] is True and 'near ties reported, not failed (quality.near_ties = "report")' in g.message
    )
    strict = Policy.model_validate({"quality": {"near_ties": "fail"}})
    assert equivalence_gate(digest, cond, strict, 1).strata["structured"] is False
    tight = Policy.model_validate({"quality": {"near_tie_margin": (t.gap() or 0) / 2}})
    g = equivalence_gate(digest, cond, tight, 1)
    assert g.strata["structured"] is False and "json: divergence" in g.message


def test_a_confident_divergence_fails_whatever_the_policy(runs: SimpleNamespace) -> None:
    rows = _spec_rows(runs.div)
    for pid, row in rows.items():
        t = row.triage
        assert t is not None and t.kind() == "divergence", (pid, t)
        assert t.position == 4 and t.row_logprob is None and (t.gap() or 0) > 5  # p > 0.99 vs p < 1e-5
        assert t.base_logprob is not None and t.base_logprob > -0.05
    digest = digest_run(runs.div)
    cond = next(c for c in digest.conditions if not c.is_baseline)
    g = equivalence_gate(digest, cond, Policy(), 1)
    assert not g.passed and not any(g.strata.values()) and "divergence, token 4" in g.message
    notes = common.comparison_notes(digest)
    assert any("triage: chat: divergence, token 4" in n for n in notes), notes


def test_chat_rows_get_ids_through_the_servers_template(runs: SimpleNamespace) -> None:
    """A chat stream names no ids: the differing speculative row got them from a replay of the
    template the server applied, and its baseline row from the triage's replay; both compared by token."""
    chat = [r for r in runs.div.requests if r.prompt_id == "chat"]
    assert {r.ids_source for r in chat} == {"replay"}
    assert all(r.output_ids and len(r.output_ids) == r.output_tokens for r in chat)
    spec = _spec_rows(runs.div)["chat"]
    assert spec.diff_unit == "token" and spec.first_diff == 4


def test_runs_show_prints_the_triage(runs: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECREG_DB", str(runs.div_db))
        mp.setenv("COLUMNS", "80")
        with pytest.raises(SystemExit) as exit_:
            main(["runs", "show", runs.div.info.run_id])
    out = " ".join(capsys.readouterr().out.split())
    assert not exit_.value.code and "triage: divergence, token 4: baseline" in out
    assert "0 near ties (reported, not failed, by the default policy), 3 divergences or untriaged" in out


def test_kinds_gaps_and_the_most_severe() -> None:
    top = [TopToken(id=1, text="a", logprob=-0.70), TopToken(id=2, text="b", logprob=-0.75)]
    tie = Triage(base_id=1, base_logprob=-0.70, row_id=2, row_logprob=-0.75, floor=-0.75, top=top)
    assert tie.kind() == "near tie" and tie.kind(0.01) == "divergence"
    unlisted = Triage(base_id=1, base_logprob=-0.70, row_id=9, floor=-0.75, top=top)
    assert unlisted.kind() == "unclassified" and unlisted.kind(0.01) == "divergence"  # only a bound
    assert Triage(note="no probabilities").kind() == "unclassified"
    assert worst([tie, unlisted]) is unlisted and worst([tie, None]) is None and worst([tie]) is tie


def test_probabilities_are_placed_at_their_tokens() -> None:
    """The server lists no entry for a token held back inside a UTF-8 sequence (ids 7, 8 below)."""
    probs = [TokenProbs(5, -0.1, []), TokenProbs(9, -0.2, []), TokenProbs(5, -0.3, [])]
    assert {i: p.logprob for i, p in aligned([5, 7, 8, 9, 5], probs).items()} == {0: -0.1, 3: -0.2, 4: -0.3}
    assert aligned([5, 7], probs) == {}  # not a subsequence: nothing placed
