"""The runner against the real bundled llama.cpp server (xllamacpp) on tiny factory models.

One module-scoped pair of runs (identical-weights draft, small-noise draft) carries the proof
assertions; each fault gets its own small run (one or two conditions, three short prompts).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import xllamacpp
from _bench_helpers import ITEMS, NOISE, admit, db_rows, force_verdict, workload
from _registry_helpers import model

from specreg.benchmark.run.context import Observer
from specreg.benchmark.run.runner import Runner
from specreg.errors import ArtifactChanged, NotAdmitted, ServerError
from specreg.registry.store import Registry
from specreg.schemas.bench import ConditionRun
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.request_row import RequestRow

FAKE = Path(__file__).parents[2] / "fake_llama_server.py"


def _opts(wl: Path, **kw: object) -> BenchSettings:
    base: dict[str, object] = dict(
        workload=str(wl), threads=1, ctx_size=512, start_timeout_s=30.0, request_timeout_s=30.0, repeat=1
    )
    base.update(kw)
    return BenchSettings(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def proof(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """Identical-weights draft with every method; small-noise draft with draft-simple only."""
    d = tmp_path_factory.mktemp("bench-proof")
    target = model(d, "target.gguf")
    same = model(d, "same.gguf", name="tiny-draft")  # same seed: identical weights, other bytes
    noisy = model(d, "noisy.gguf", noise=NOISE, name="tiny-noisy")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECREG_HOME", str(d / "home"))
        reg = Registry(d / "reg.db", show_progress=False)
        p_same, p_noise = admit(reg, target, same), admit(reg, target, noisy)
        wl = workload(d)
        same_run = Runner(reg, _opts(wl)).bench([p_same])[0]
        noise_run = Runner(reg, _opts(wl, methods=["draft-simple"])).bench([p_noise])[0]
        yield SimpleNamespace(
            reg=reg, db=d / "reg.db", home=d / "home", same=same_run, noise=noise_run, target=target, p_same=p_same
        )
        reg.close()


def _cond(run: object, name: str) -> ConditionRun:
    return next(c for c in run.conditions if c.spec.name == name)  # type: ignore[attr-defined]


def _rows(run: object, name: str) -> list[RequestRow]:
    return [r for r in run.requests if r.condition == name]  # type: ignore[attr-defined]


def _all(run: object, name: str) -> object:
    return next(s for s in run.summaries if s.condition == name and s.stratum == "all")  # type: ignore[attr-defined]


def test_identical_draft_accepts_everything_and_matches_baseline(proof: SimpleNamespace) -> None:
    c = _cond(proof.same, "draft-simple")
    assert c.status == "ok", c.failure
    assert c.counters is not None and c.counters.drafted > 0
    assert c.counters.acceptance == 1.0 and c.counters.accepted == c.counters.drafted
    assert c.counters.steps > 0 and sum(c.counters.per_position.values()) == c.counters.accepted
    rows = _rows(proof.same, "draft-simple")
    assert len(rows) == len(ITEMS) and all(r.ok for r in rows)
    assert all(r.matches_baseline is True and r.first_diff is None for r in rows)
    assert all(r.draft_n and r.draft_n == r.draft_n_accepted for r in rows)
    s = _all(proof.same, "draft-simple")
    assert s.acceptance == 1.0 and (s.n_equal, s.n_compared) == (3, 3) and s.speedup is not None


def test_small_noise_draft_partial_acceptance_same_output(proof: SimpleNamespace) -> None:
    c = _cond(proof.noise, "draft-simple")
    assert c.status == "ok", c.failure
    assert c.counters is not None and 0 < c.counters.acceptance < 1  # type: ignore[operator]
    rows = _rows(proof.noise, "draft-simple")
    assert all(r.ok and r.matches_baseline for r in rows), [(r.prompt_id, r.first_diff) for r in rows]
    assert proof.noise.info.status == "complete" and [x.spec.name for x in proof.noise.conditions] == [
        "none",
        "draft-simple",
    ]


def test_ngram_that_drafts_nothing_fails_instead_of_zero_acceptance(proof: SimpleNamespace) -> None:
    for name in ("ngram-simple", "ngram-mod"):
        c = _cond(proof.same, name)
        assert c.status == "failed" and c.failure == "speculation did not run: 0 tokens drafted over 3 requests"
        assert c.counters is not None and c.counters.drafted == 0 and c.counters.acceptance is None
        s = _all(proof.same, name)
        assert s.acceptance is None and s.n_ok == 3  # rows kept, acceptance undefined
    assert proof.same.info.status == "incomplete"
    assert "ngram-simple: speculation did not run" in (proof.same.info.status_reason or "")


def test_run_record_manifest_rows_and_logs(proof: SimpleNamespace) -> None:
    run = proof.same
    m = run.manifest
    assert m.runtime.kind == "bundled" and m.runtime.xllamacpp_version == xllamacpp.__version__
    assert len(m.runtime.sha256 or "") == 64 and "xllamacpp" in m.runtime.version_text
    assert m.runtime.spec_defaults["--spec-draft-n-max"] >= 1
    assert m.target.sha256 == run.info.target_sha256 and m.target.licence.effective == "apache-2.0"
    assert m.draft.artifact is not None and m.draft.artifact.sha256 == run.info.draft_sha256
    assert m.draft.compatibility and m.draft.pair_id == proof.p_same
    assert m.request.temperature == 0.0 and m.observation.warmup_requests == 8
    assert m.settings is not None and m.settings.repeat == 1 and m.settings.seed == 42  # the invocation
    # the order is on record: one round, the baseline first (its outputs are the reference)
    assert m.observation.order == "rounds" and m.observation.schedule[0].condition == "none"
    assert sorted(x.condition for x in m.observation.schedule) == sorted(c.spec.name for c in run.conditions)
    # warm-up: recorded per server start, stopped once two requests in a row agreed within 10%
    for c in run.conditions:
        (w,) = c.warmup
        assert 1 <= len(w.latencies_ms) <= 8 and all(x > 0 for x in w.latencies_ms)
        if w.steady:
            a, b = w.latencies_ms[-2:]
            assert abs(a - b) <= 0.10 * max(a, b)
        else:
            assert len(w.latencies_ms) == 8
    assert (m.hardware.gpu.present and m.hardware.gpu.devices) or (not m.hardware.gpu.present and m.hardware.gpu.reason)
    assert {p.id: p.kind for p in run.prompts} == {"rep": "prompt", "chat": "messages", "json": "prompt"}
    assert all(p.input_tokens and p.input_tokens > 3 and len(p.content_sha256) == 64 for p in run.prompts)
    # rows in the real SQLite file, keyed by the artifacts and the licence as it was
    stored = db_rows(proof.db, "SELECT * FROM bench_runs WHERE run_id = ?", (run.info.run_id,))[0]
    assert stored["target_sha256"] == run.info.target_sha256 and "apache-2.0" in stored["target_licence_json"]
    n = db_rows(proof.db, "SELECT count(*) AS n FROM bench_requests WHERE run_id = ?", (run.info.run_id,))[0]["n"]
    assert n == 4 * len(ITEMS)
    for c in run.conditions:
        # logs live beside the registry that recorded the run, not under SPECREG_HOME
        assert c.log_path and Path(c.log_path).is_file() and Path(c.log_path).parent.parent == proof.db.parent / "runs"
        assert "--metrics" in c.argv and "127.0.0.1" in c.argv and c.port
        assert c.memory is not None and c.memory.peak_rss_bytes and c.memory.peak_rss_bytes > 1_000_000
    assert "-md" in _cond(run, "draft-simple").argv and "-md" not in _cond(run, "none").argv
    js = [r for r in run.requests if r.prompt_id == "json"]
    assert all(r.expect_ok is False and r.expect_detail for r in js)  # garbage text is honestly not JSON
    assert all(r.ttft_ms and r.total_ms and r.total_ms >= r.ttft_ms and r.output_tokens == 16 for r in run.requests)
    assert all(not psutil.pid_exists(c.server_pid) for c in run.conditions if c.server_pid)


def _one_prompt(folder: Path) -> Path:
    return workload(folder, ITEMS[:1], "one.jsonl")


def test_refused_draft_fails_with_exact_log_lines(tmp_path: Path) -> None:
    target = model(tmp_path, "t.gguf")
    other = model(tmp_path, "other.gguf", extra_tokens=200)  # vocab sizes 200 apart: llama.cpp refuses
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        pid = force_verdict(reg, target, other, "draft-simple", admitted=True, note="stale verdict")
        run = Runner(reg, _opts(_one_prompt(tmp_path), methods=["draft-simple"])).bench([pid])[0]
    c = _cond(run, "draft-simple")
    assert c.status == "failed" and "refused" in (c.failure or "")
    assert any(ln.endswith("the target and draft vocabs are not compatible") for ln in c.failure_lines)
    assert c.counters is not None and c.counters.acceptance is None  # never 0%
    assert _all(run, "draft-simple").acceptance is None
    assert len(_rows(run, "draft-simple")) == 1 and run.info.status == "incomplete"


def test_rejected_or_unknown_pair_is_never_benchmarked(tmp_path: Path) -> None:
    target = model(tmp_path, "t.gguf")
    other = model(tmp_path, "other.gguf", extra_tokens=200)
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        pid = admit(reg, target, other)
        assert not reg.get_pair(pid).admitted
        runner = Runner(reg, _opts(_one_prompt(tmp_path)))
        with pytest.raises(NotAdmitted, match=rf"pair {pid} \(draft-simple\) was rejected.*vocab"):
            runner.bench([pid])
        with pytest.raises(NotAdmitted, match="pair 99 has never been checked"):
            runner.bench([99])
        with pytest.raises(NotAdmitted, match="no admitted pairs"):
            runner.bench()
    assert db_rows(tmp_path / "r.db", "SELECT count(*) AS n FROM bench_runs")[0]["n"] == 0


def test_model_changed_after_registration_is_refused_before_launch(tmp_path: Path) -> None:
    target = model(tmp_path, "t.gguf")
    draft = model(tmp_path, "d.gguf", name="tiny-draft")
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        pid = admit(reg, target, draft)
        registered = reg.get_pair(pid).target_sha256
        model(tmp_path, "t.gguf", seed=5)  # same path, other bytes
        with pytest.raises(ArtifactChanged) as err:
            Runner(reg, _opts(_one_prompt(tmp_path))).bench([pid])
    import hashlib

    now = hashlib.sha256(target.read_bytes()).hexdigest()
    assert registered in err.value.message and now in err.value.message
    assert db_rows(tmp_path / "r.db", "SELECT count(*) AS n FROM bench_runs")[0]["n"] == 0


def test_changed_file_refuses_its_pair_and_the_next_pair_runs(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        first = admit(reg, model(tmp_path / "a", "t.gguf"), model(tmp_path / "a", "d.gguf", name="tiny-draft"))
        second = admit(reg, model(tmp_path / "b", "t.gguf", seed=2), model(tmp_path / "b", "d.gguf", seed=2, name="x"))
        model(tmp_path / "a", "t.gguf", seed=5)  # pair `first` now points at changed bytes
        runner = Runner(reg, _opts(_one_prompt(tmp_path), methods=["none"]))
        runs = runner.bench([first, second])
    assert [r.info.pair_id for r in runs] == [second] and runs[0].info.status == "complete"
    assert len(runner.refused) == 1 and runner.refused[0].startswith(f"pair {first}: ")
    assert "file changed since registration" in runner.refused[0]


class _KillServer(Observer):
    """Kills the baseline's server with SIGKILL once its first row is stored."""

    def __init__(self) -> None:
        self.killed: int | None = None

    def request_done(self, cond: ConditionRun, row: RequestRow) -> None:
        if cond.spec.name == "none" and self.killed is None and cond.server_pid:
            self.killed = cond.server_pid
            os.kill(cond.server_pid, signal.SIGKILL)


def test_server_killed_mid_run_keeps_rows_and_next_condition_runs(tmp_path: Path) -> None:
    target = model(tmp_path, "t.gguf")
    draft = model(tmp_path, "d.gguf", name="tiny-draft")
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        pid = admit(reg, target, draft)
        killer = _KillServer()
        run = Runner(reg, _opts(workload(tmp_path), methods=["draft-simple"]), observer=killer).bench([pid])[0]
    base = _cond(run, "none")
    assert (
        killer.killed and base.status == "failed" and "server exited (code -9) during the run" in (base.failure or "")
    )
    kept = _rows(run, "none")
    assert kept[0].ok and 1 <= len(kept) <= 2  # the finished row, plus the one that saw the death
    assert _cond(run, "draft-simple").status == "ok" and len(_rows(run, "draft-simple")) == 3
    assert run.info.status == "incomplete" and "none: server exited" in (run.info.status_reason or "")


def _fake_binary(folder: Path) -> Path:
    exe = folder / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    exe.chmod(0o755)
    return exe


@pytest.fixture()
def self_pair(tmp_path: Path) -> Iterator[tuple[Registry, int]]:
    target = model(tmp_path, "t.gguf")
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        yield reg, force_verdict(reg, target, None, "ngram-mod", admitted=True)


def test_server_never_healthy_fails_each_condition_with_its_log(
    tmp_path: Path, self_pair: tuple[Registry, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    reg, pid = self_pair
    monkeypatch.setenv("FAKE_LLAMA_MODE", "never")
    opts = _opts(_one_prompt(tmp_path), methods=["ngram-mod"], server=str(_fake_binary(tmp_path)), start_timeout_s=1.0)
    run = Runner(reg, opts).bench([pid])[0]
    assert run.manifest.runtime.kind == "external" and "fake" in run.manifest.runtime.version_text
    assert [c.status for c in run.conditions] == ["failed", "failed"]  # the second still ran
    for c in run.conditions:
        assert c.failure and c.failure.startswith("server did not become healthy within 1s")
        assert "loading model forever" in (c.log_tail or "") and not psutil.pid_exists(c.server_pid or 0)
    assert run.info.status == "incomplete" and not run.requests


@pytest.mark.parametrize(
    ("mode", "row_error", "cond_failure"),
    [
        ("hang", "timed out after 1s", "no request succeeded (first error: timed out after 1s)"),
        ("badjson", "malformed event from server", "no request succeeded (first error: malformed event"),
        ("badmetrics", None, "/metrics: malformed Prometheus text"),
    ],
)
def test_stream_faults_become_rows_and_failures(
    tmp_path: Path,
    self_pair: tuple[Registry, int],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    row_error: str | None,
    cond_failure: str,
) -> None:
    reg, pid = self_pair
    monkeypatch.setenv("FAKE_LLAMA_MODE", mode)
    opts = _opts(
        _one_prompt(tmp_path), methods=["none"], server=str(_fake_binary(tmp_path)), request_timeout_s=1.0, warmup=0
    )
    run = Runner(reg, opts).bench([pid])[0]
    (c,) = run.conditions
    assert c.status == "failed" and (c.failure or "").startswith(cond_failure)
    if row_error:
        (row,) = run.requests
        assert not row.ok and row_error in (row.error or "") and row.timed_out == (mode == "hang")
    assert run.info.status == "incomplete"


def test_missing_or_non_executable_binary(tmp_path: Path, self_pair: tuple[Registry, int]) -> None:
    reg, _ = self_pair
    with pytest.raises(ServerError, match="does not exist"):
        Runner(reg, _opts(_one_prompt(tmp_path), server=str(tmp_path / "nope")))
    plain = tmp_path / "llama-server"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(ServerError, match="is not executable"):
        Runner(reg, _opts(_one_prompt(tmp_path), server=str(plain)))


def test_model_that_fails_to_load(tmp_path: Path) -> None:
    # A valid GGUF that our reader accepts but llama.cpp cannot load (a layer tensor is missing).
    # (A vocab-only file would be refused before launch: see the vocab-only test below.)
    target = model(tmp_path, "t.gguf", drop_tensors=("blk.1.ffn_down.weight",))
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        pid = force_verdict(reg, target, None, "ngram-mod", admitted=True)
        run = Runner(reg, _opts(_one_prompt(tmp_path), methods=["none"])).bench([pid])[0]
    (c,) = run.conditions
    assert c.status == "failed" and (c.failure or "").startswith("server exited during start (exit code 1)")
    assert c.failure_lines and any("load" in ln.lower() for ln in c.failure_lines)


def test_concurrency_uses_slots_and_keeps_every_row(tmp_path: Path, self_pair: tuple[Registry, int]) -> None:
    reg, pid = self_pair
    run = Runner(reg, _opts(workload(tmp_path), methods=["none"], concurrency=2, repeat=2)).bench([pid])[0]
    (c,) = run.conditions
    assert c.status == "ok" and c.argv[c.argv.index("-np") + 1] == "2"
    assert len(run.requests) == 6 and all(r.ok for r in run.requests)
    assert sorted((r.prompt_id, r.repeat) for r in run.requests) == sorted(
        (i["id"], k) for i in ITEMS for k in range(2)
    )
    assert run.manifest.request.concurrency == 2


def test_vocab_only_pair_is_refused_before_any_server_starts(tmp_path: Path) -> None:
    """Admitted with a warning (it can be checked) but never benchmarked: nothing to serve."""
    target = model(tmp_path, "t.gguf")
    vocab = model(tmp_path, "v.gguf", vocab_only=True, name="vocab-only")
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        pid = admit(reg, target, vocab)
        assert reg.get_pair(pid).admitted
        with pytest.raises(NotAdmitted, match=rf"^pair {pid} \(draft-simple\) is admitted, not benchmarkable: draft"):
            Runner(reg, _opts(_one_prompt(tmp_path))).bench([pid])
        # asked for every admitted pair: nothing else to run is "could not decide", named once
        with pytest.raises(NotAdmitted, match="no admitted pair can be benchmarked"):
            Runner(reg, _opts(_one_prompt(tmp_path))).bench()
    assert db_rows(tmp_path / "r.db", "SELECT count(*) AS n FROM bench_runs")[0]["n"] == 0


def test_the_reported_tpot_stays_put_when_the_same_rows_are_flagged_again(proof: SimpleNamespace) -> None:
    """Issue 47: a client TPOT and the server's per-token time agree only to the clocks' noise, so
    a strict `<` flagged rows at random and moved the reported median. The same real rows are
    flagged again against a server figure that agrees with each client TPOT to that noise (each
    row its own draw, up to 0.4 ms either way, what the two clocks of one real server disagree
    by): the reported TPOT stays within 2% of the median of every row, where the strict
    comparison drops rows. The stored summary reports the median of the rows the rule keeps (the
    tiny models' streams do come in bursts under load: those rows are below by far more, and
    flagged either way; tests/e2e/test_real_model.py holds a real model's reported TPOT to the
    all-rows median)."""
    import random
    from statistics import median

    from specreg.benchmark.store.condition_summary import stat

    draw = random.Random(47)
    dropped_strictly = 0
    for run in (proof.same, proof.noise):
        for s in run.summaries:
            if s.stratum != "all":
                continue
            rows = [r for r in _rows(run, s.condition) if r.ok and r.tpot_ms is not None and r.server_tpot_ms]
            assert len(rows) >= 3, s.condition
            assert s.tpot_ms.p50 == stat(r.tpot_ms for r in rows if not r.tpot_below_server).p50, s.condition
            every = median(r.tpot_ms for r in rows if r.tpot_ms is not None)
            for _ in range(5):
                moved = [
                    r.model_copy(update={"server_tpot_ms": (r.tpot_ms or 0.0) + draw.uniform(-0.4, 0.4)}) for r in rows
                ]
                kept = stat(r.tpot_ms for r in moved if not r.tpot_below_server).p50
                assert kept is not None and abs(kept - every) <= 0.02 * every, (s.condition, kept, every)
                dropped_strictly += sum(1 for r in moved if (r.tpot_ms or 0.0) < (r.server_tpot_ms or 0.0))
    assert dropped_strictly, "the old strict comparison would have dropped rows: the test can tell the two apart"


def test_every_row_holds_every_generated_id_and_honest_timings(proof: SimpleNamespace) -> None:
    """The stream leaves out the ids of tokens whose text it held back (an incomplete UTF-8
    sequence): the tiny models' "json" output does; its rows get every id from the replay."""
    sources: dict[str, int] = {}
    for run in (proof.same, proof.noise):
        for r in run.requests:
            assert r.ok, r.error
            sources[r.ids_source or "?"] = sources.get(r.ids_source or "?", 0) + 1
            if r.prompt_id == "chat":  # the chat stream names no ids: compared by text alone
                assert r.ids_source == "none" and r.output_ids is None
                assert r.condition == "none" or r.diff_unit == "char"
                continue
            assert r.ids_source in ("stream", "replay") and r.ids_complete, (r.condition, r.prompt_id, r.ids_source)
            assert r.output_ids is not None and len(r.output_ids) == r.output_tokens == 16
            assert r.stream_ids_n is not None and r.stream_ids_n <= 16
            assert (r.ids_source == "stream") == (r.stream_ids_n == 16)
            assert r.condition == "none" or r.diff_unit == "token"
            # client timings: the arrivals after the first text add up, TPOT is their mean gap
            assert r.arrivals and r.arrivals[0][0] == pytest.approx(r.ttft_ms, abs=1e-3)
            assert sum(k for _, k in r.arrivals) <= 16 and len(r.itl_ms) == sum(k for _, k in r.arrivals[1:])
            assert r.server_tpot_ms and r.server_tpot_ms > 0
            if r.tpot_ms is not None:
                assert r.tpot_ms == pytest.approx(sum(r.itl_ms) / len(r.itl_ms), abs=1e-3)
    assert sources.get("replay") and sources.get("stream"), sources
    for run in (proof.same, proof.noise):
        for s in run.summaries:
            assert s.server_tpot_ms.p50 is not None and s.itl_ms.p50 is not None
            shown = [r for r in run.requests if r.condition == s.condition and r.tpot_ms is not None]
            flagged = [r for r in shown if r.tpot_below_server]
            if s.stratum == "all":
                assert s.n_tpot_flagged == len(flagged)
                assert (s.tpot_ms.p50 is None) == (len(flagged) == len(shown))
