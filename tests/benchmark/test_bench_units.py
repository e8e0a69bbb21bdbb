"""Benchmark pieces that need no server: workloads, metrics parsing, summaries, conditions, NVML."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from specreg.benchmark.plan import conditions
from specreg.benchmark.store import condition_summary as summary
from specreg.benchmark.workloads import expect
from specreg.benchmark.workloads.jsonl import STRATA, content_sha256, load_workload, parse_jsonl
from specreg.errors import PolicyError, ServerError, UsageError
from specreg.schemas.bench import ConditionRun, ConditionSpec, Expect, MemoryObservation, SpecCounters
from specreg.schemas.registry import PairRecord
from specreg.schemas.request_row import RequestRow
from specreg.servers import bundled_server, metrics, serverlog
from specreg.servers.memory import GpuProbe, MemorySampler

# What xllamacpp 2026.10.11549 printed on /metrics after one draft-simple request (identical draft).
REAL_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 17
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 16
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 11
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 11
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 4
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 3728.56
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 4
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 4
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 3
"""
# The same server before any request: zero counters and no per-position family yet.
REAL_METRICS_BEFORE = (
    "\n".join(
        ln if not ln.startswith("llamacpp:") else ln.rsplit(" ", 1)[0] + " 0"
        for ln in REAL_METRICS.splitlines()
        if "per_pos" not in ln
    )
    + "\n"
)


# -- workloads ---------------------------------------------------------------------------------


def test_builtin_workload_has_every_stratum() -> None:
    wl = load_workload("default")
    assert wl.strata() == list(STRATA)
    assert len(wl.items) == 15 and len({i.id for i in wl.items}) == 15
    # the source documents' own languages and emoji: text the server holds back across tokens
    text = " ".join(i.prompt or " ".join(m.content for m in i.messages or []) for i in wl.items)
    assert {"reason-ru", "long-ru-summary", "rep-ja-list", "chat-ja", "json-emoji"} <= {i.id for i in wl.items}
    assert "日本語" in text and "Решите" in text and "🚀" in text
    assert all(i.max_tokens == 32 for i in wl.items)
    one = load_workload("chat")
    assert {i.stratum for i in one.items} == {"chat"} and all(i.messages for i in one.items)
    assert len(wl.sha256) == 64


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"id": "a", "stratum": "chat", "prompt": "x", "max_token": 3}', "wl.jsonl:2: max_token: Extra inputs"),
        ('{"id": "a", "stratum": "chat"}', "wl.jsonl:2: give exactly one of prompt, messages"),
        (
            '{"id": "a", "stratum": "chat", "prompt": "x", "messages": [{"role": "user", "content": "y"}]}',
            "exactly one of prompt, messages",
        ),
        ('{"id": "a", "stratum": "Chat!", "prompt": "x"}', "wl.jsonl:2: stratum: String should match"),
        ('{"id": "a", "stratum": "chat", "prompt": "x", "max_tokens": 0}', "wl.jsonl:2: max_tokens:"),
        ('{"id": "a", "stratum": "chat", "messages": [{"role": "robot", "content": "y"}]}', "messages.0.role"),
        ('{"id": "a", "stratum": "chat", "prompt": "x", "expect": {"exact": "a", "regex": "b"}}', "expect"),
        ('{"id": "a", "stratum": "chat", "prompt": "x", "expect": {"regex": "("}}', "regex does not compile"),
        (
            '{"id": "a", "stratum": "chat", "prompt": "x", "expect": {"json_schema": {"oneOf": []}}}',
            "unsupported keywords: $.oneOf",
        ),
        ('{"id": "first", "stratum": "chat", "prompt": "x"}', "duplicate id 'first' (first on line 1)"),
        ("{not json", "wl.jsonl:2: not valid JSON"),
        ("[1, 2]", "wl.jsonl:2: expected a JSON object"),
    ],
)
def test_bad_workload_line_names_file_line_and_field(tmp_path: Path, line: str, needle: str) -> None:
    f = tmp_path / "wl.jsonl"
    f.write_text('{"id": "first", "stratum": "chat", "prompt": "hello"}\n' + line + "\n")
    with pytest.raises(PolicyError) as err:
        load_workload(str(f))
    assert needle in err.value.message


def test_workload_missing_file_and_empty(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="neither a built-in name nor a file"):
        load_workload(str(tmp_path / "nope.jsonl"))
    with pytest.raises(PolicyError, match="no items"):
        parse_jsonl("\n\n", "empty.jsonl")


def test_content_hash_covers_content_only() -> None:
    a, b, c = parse_jsonl(
        '{"id": "a", "stratum": "s", "prompt": "x", "max_tokens": 5}\n'
        '{"id": "b", "stratum": "t", "prompt": "x", "max_tokens": 9}\n'
        '{"id": "c", "stratum": "s", "prompt": "y"}\n',
        "w",
    )
    assert content_sha256(a) == content_sha256(b) != content_sha256(c)


# -- metrics -----------------------------------------------------------------------------------


def test_real_metrics_parse_and_delta() -> None:
    after = metrics.parse_metrics(REAL_METRICS)
    before = metrics.parse_metrics(REAL_METRICS_BEFORE)
    assert (
        after[metrics.DRAFTED] == 11
        and after['llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"}'] == 3
    )
    c = metrics.spec_counters(before, after)
    assert c is not None
    assert (c.drafted, c.accepted, c.steps) == (11, 11, 4)
    assert c.per_position == {0: 4, 1: 4, 2: 3}
    assert c.acceptance == 1.0 and c.mean_accepted_per_step == 11 / 4
    # deltas only: a second snapshot equal to the first means nothing happened in between
    same = metrics.spec_counters(after, after)
    assert same is not None and same.drafted == 0 and same.acceptance is None and same.mean_accepted_per_step is None


def test_acceptance_undefined_not_zero() -> None:
    c = SpecCounters(drafted=0, accepted=0, steps=0)
    assert c.acceptance is None
    assert json.loads(c.model_dump_json())["acceptance"] is None
    assert SpecCounters(drafted=10, accepted=0, steps=5).acceptance == 0.0


def test_metrics_without_spec_counters_and_malformed() -> None:
    assert metrics.spec_counters({}, metrics.parse_metrics("# TYPE x counter\nx_total 1\n")) is None
    with pytest.raises(ServerError, match="malformed Prometheus text"):
        metrics.parse_metrics("llamacpp:spec_decode_num_draft_tokens_total eleven\n")
    bad = REAL_METRICS.replace('position="2"', 'position="two"')
    with pytest.raises(ServerError, match="unexpected label"):
        metrics.spec_counters({}, metrics.parse_metrics(bad))


# -- summaries and equivalence -----------------------------------------------------------------


def _row(idx: int, cond: str, pid: str, total: float, **kw: Any) -> RequestRow:
    base: dict[str, Any] = dict(
        condition_idx=idx,
        condition=cond,
        prompt_id=pid,
        stratum="s",
        repeat=0,
        started_at=datetime.now(UTC),
        ok=True,
        total_ms=total,
        ttft_ms=1.0,
        output_tokens=8,
        predicted_ms=4.0,
    )
    base.update(kw)
    return RequestRow(**base)


def test_percentiles_match_numpy_linear() -> None:
    import numpy as np

    xs = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    assert summary.percentile(xs, 50) == pytest.approx(float(np.percentile(xs, 50)))
    assert summary.percentile(xs, 95) == pytest.approx(float(np.percentile(xs, 95)))
    assert summary.percentile([], 50) is None


def test_compare_outputs_tokens_then_chars() -> None:
    def cmp(a: RequestRow, b: RequestRow) -> tuple[bool, int | None, str]:
        c = summary.compare_outputs(a, b)
        return c.equal, c.first, c.unit

    ids = dict(output_tokens=3, output_text="abc")
    a = _row(0, "none", "p", 1, output_ids=[1, 2, 3], **ids)
    assert cmp(a, _row(1, "x", "p", 1, output_ids=[1, 2, 3], **ids)) == (True, None, "token")
    assert cmp(a, _row(1, "x", "p", 1, output_ids=[1, 9, 3], **ids)) == (False, 1, "token")
    # two ids for three tokens: never compared by ids, only by text
    assert cmp(a, _row(1, "x", "p", 1, output_ids=[1, 2], **ids)) == (True, None, "char")
    chat = _row(0, "none", "p", 1, output_text="hello")
    assert cmp(chat, _row(1, "x", "p", 1, output_text="help")) == (False, 3, "char")


def test_summary_speedup_memory_and_mismatch() -> None:
    gpu = {"present": False, "reason": "no NVML"}
    base = ConditionRun(
        idx=0,
        spec=ConditionSpec(name="none", method="none"),
        status="ok",
        memory=MemoryObservation(peak_rss_bytes=100, gpu=gpu),
    )
    spec = ConditionRun(
        idx=1,
        spec=ConditionSpec(name="draft-simple", method="draft-simple"),
        status="ok",
        counters=SpecCounters(drafted=10, accepted=5, steps=4),
        memory=MemoryObservation(peak_rss_bytes=150, gpu=gpu),
    )
    rows = [
        _row(0, "none", "a", 20),
        _row(0, "none", "b", 40),
        _row(1, "draft-simple", "a", 10, draft_n=6, draft_n_accepted=3, matches_baseline=True),
        _row(
            1,
            "draft-simple",
            "b",
            20,
            draft_n=4,
            draft_n_accepted=2,
            matches_baseline=False,
            first_diff=3,
            diff_unit="token",
        ),
        _row(1, "draft-simple", "c", 5, ok=False, error="boom", total_ms=None),
    ]
    out = {(s.condition, s.stratum): s for s in summary.summarize([base, spec], rows)}
    s = out[("draft-simple", "all")]
    assert s.speedup == pytest.approx(30 / 15)
    assert (s.n_requests, s.n_ok, s.n_errors) == (3, 2, 1)
    assert s.acceptance == 0.5 and s.mean_accepted_per_step == 5 / 4  # from /metrics counters
    assert s.rss_overhead_bytes == 50 and s.peak_vram_bytes is None
    assert (s.n_equal, s.n_compared) == (1, 2) and s.first_mismatch == "b#0 @ token 3"
    assert out[("draft-simple", "s")].acceptance == 5 / 10  # per stratum: from request timings
    assert out[("none", "all")].acceptance is None and out[("none", "all")].speedup == 1.0


# -- expect ------------------------------------------------------------------------------------


def test_expect_checks() -> None:
    schema = {
        "type": "object",
        "required": ["n"],
        "properties": {"n": {"type": "integer", "minimum": 1}},
        "additionalProperties": False,
    }
    e = Expect(json_schema=schema)
    assert expect.check(e, ' {"n": 2} ') == (True, None)
    assert expect.check(e, '{"n": 0}')[1] == "$.n: below 1"
    assert expect.check(e, '{"n": true}')[1] == "$.n: expected integer, got bool"
    assert expect.check(e, '{"n": 1, "x": 1}')[1] == "$: unexpected fields ['x']"
    assert "not JSON" in (expect.check(e, "garbage")[1] or "")
    assert expect.check(Expect(regex=r"^\d+$"), "42") == (True, None)
    assert expect.check(Expect(exact="a"), "b")[0] is False


# -- conditions --------------------------------------------------------------------------------


def test_plan_baseline_first_and_refusals() -> None:
    plan = conditions.plan("draft-simple", draft_path="/d.gguf", draft_sha256="d" * 64)
    assert [c.name for c in plan] == ["none", "ngram-simple", "ngram-mod", "draft-simple"]
    assert plan[-1].draft_path == "/d.gguf" and plan[1].draft_path is None
    only = conditions.plan(
        "draft-simple", draft_path="/d.gguf", draft_sha256=None, methods=["draft-simple"], draft_n_max=5
    )
    assert [c.name for c in only] == ["none", "draft-simple"] and only[1].draft_n_max == 5
    with pytest.raises(UsageError, match="draft-eagle3 is not available"):
        conditions.plan("draft-simple", draft_path="/d", draft_sha256=None, methods=["draft-eagle3"])
    self_spec = conditions.plan("ngram-mod", draft_path=None, draft_sha256=None)
    assert [c.name for c in self_spec] == ["none", "ngram-simple", "ngram-mod"]
    opts = conditions.parse_ngram_options(["simple-size-n=8", "--spec-ngram-mod-n-match=16"])
    planned = conditions.plan("ngram-mod", draft_path=None, draft_sha256=None, ngram=opts)
    assert planned[1].params == {"--spec-ngram-simple-size-n": 8}
    assert planned[2].params == {"--spec-ngram-mod-n-match": 16}
    with pytest.raises(UsageError, match="not among the methods run"):
        conditions.plan(
            "ngram-mod",
            draft_path=None,
            draft_sha256=None,
            methods=["ngram-mod"],
            ngram={"--spec-ngram-simple-size-n": 8},
        )
    for bad in ("size-n=8", "simple-size-n", "simple-size-n=x"):
        with pytest.raises(UsageError):
            conditions.parse_ngram_options([bad])


def test_server_args_use_this_builds_flag_names() -> None:
    spec = ConditionSpec(
        name="draft-simple", method="draft-simple", draft_path="/d.gguf", draft_n_max=4, draft_n_min=1, params={}
    )
    args = conditions.server_args(spec, "/t.gguf", conditions.ServerOptions(parallel=2, threads=1, seed=7))
    text = " ".join(args)
    assert "-m /t.gguf --spec-type draft-simple -md /d.gguf --spec-draft-n-max 4 --spec-draft-n-min 1" in text
    assert "-np 2" in text and "--seed 7" in text and "--metrics" in text and "-t 1" in text
    assert "synth" not in text and "--port" not in text  # the launcher picks the port
    # every flag we emit is one the bundled server (and common/arg.cpp) accepts
    ns = bundled_server.build_parser().parse_args([*args, "--port", "1"])
    assert ns.draft == "/d.gguf" and ns.draft_n_max == 4 and ns.parallel == 2


def test_refusal_lines_are_the_exact_log_lines() -> None:
    log = (
        "0.00.018.278 I srv    load_model: initializing, n_slots = 1\n"
        "0.00.018.346 E spec common_specu: the target and draft vocabs are not compatible\n"
        "0.00.018.548 E srv    load_model: failed to initialize speculative decoding context: draft model "
        "vocab type must match target model to use speculation\n"
        "0.00.021.792 I srv          init: listening on http://127.0.0.1:18081\n"
    )
    assert serverlog.refusal_lines(log) == log.splitlines()[1:3]
    assert serverlog.refusal_lines("all fine\n") == []
    # the same log read for errors (a dead server) and for drafting (a condition that drafted nothing)
    assert serverlog.error_lines(log) == log.splitlines()[1:3]
    assert serverlog.error_lines("a\n\nb\n") == [] and serverlog.last_lines("a\n\nb\n  \n", 8) == ["a", "b"]
    assert serverlog.speculation_lines("# spec header\nspec: draft n=0\nother\n") == ["spec: draft n=0"]
    assert serverlog.bind_failed("E couldn't bind HTTP server socket") and not serverlog.bind_failed(log)


# -- bundled server flag translation (real xllamacpp objects, no server) ----------------------


def test_bundled_flags_become_common_params() -> None:
    import xllamacpp

    ns = bundled_server.build_parser().parse_args(
        [
            "-m",
            "t.gguf",
            "-md",
            "d.gguf",
            "--spec-type",
            "draft-simple,ngram-mod",
            "--spec-draft-n-max",
            "5",
            "--spec-ngram-mod-n-match",
            "16",
            "-c",
            "256",
            "-np",
            "3",
            "-t",
            "1",
            "--seed",
            "9",
            "--metrics",
            "--port",
            "1234",
            "-ngl",
            "all",
        ]
    )
    p = bundled_server.build_params(ns)
    enum = xllamacpp.common_speculative_type
    assert list(p.speculative.types) == [
        enum.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE,
        enum.COMMON_SPECULATIVE_TYPE_NGRAM_MOD,
    ]
    assert p.speculative.draft.mparams.path == "d.gguf" and p.speculative.draft.n_max == 5
    assert p.speculative.ngram_mod.n_match == 16
    assert (p.n_ctx, p.n_parallel, p.cpuparams.n_threads, p.sampling.seed, p.port) == (256, 3, 1, 9, 1234)
    assert p.endpoint_metrics is True and p.n_gpu_layers == -2 and p.hostnames == ["127.0.0.1"]
    none = bundled_server.build_params(bundled_server.build_parser().parse_args(["-m", "t", "--spec-type", "none"]))
    assert list(none.speculative.types) == [enum.COMMON_SPECULATIVE_TYPE_NONE]
    assert none.n_threads_http == -1  # the build's default: max(-np + 4, CPUs - 1)
    http = bundled_server.build_parser().parse_args(["-m", "t", "--threads-http", "7"])
    assert bundled_server.build_params(http).n_threads_http == 7
    for bad in (
        ["-m", "t", "--threads-http", "0"],
        ["-m", "t", "--spec-type", "bogus"],
        ["-m", "t", "--spec-ngram-mod-n-match", "0"],
        ["-m", "t", "-ngl", "lots"],
        ["--spec-type", "none"],
    ):
        with pytest.raises(ValueError):
            bundled_server.build_params(bundled_server.build_parser().parse_args(bad))
    with pytest.raises(SystemExit):  # synthetic acceptance is not a flag we accept
        bundled_server.build_parser().parse_args(["-m", "t", "--spec-synth-len", "3"])


# -- GPU: the absent path for real, NVML parsing with a fake at the pynvml boundary ------------


def test_gpu_probe_on_this_machine() -> None:
    probe = GpuProbe()
    obs = probe.observation()
    if probe.present:  # a GPU machine: real devices, never an empty list
        assert obs.devices and obs.driver
    else:
        assert obs.reason and "NVML" in obs.reason
        assert obs.devices == [] and obs.peak_vram_bytes is None
    probe.close()


class _FakeNVML:
    """pynvml's surface as used by GpuProbe, returning values shaped like a real H100's."""

    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2

    def __init__(self, pids: dict[int, int | None]) -> None:
        self.pids, self.temps, self.shutdown = pids, iter([61, 74, 68]), False

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"  # older bindings return bytes

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> object:
        return ("h", i)

    def nvmlDeviceGetName(self, h: object) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, h: object) -> Any:
        return SimpleNamespace(total=85520809984, used=1, free=1)

    def nvmlDeviceGetTemperature(self, h: object, kind: int) -> int:
        return next(self.temps, 60)

    def nvmlDeviceGetClockInfo(self, h: object, kind: int) -> int:
        return 1980 if kind == 1 else 2619

    def nvmlDeviceGetComputeRunningProcesses(self, h: object) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.pids.items()]


def test_nvml_values_parsed_and_folded() -> None:
    fake = _FakeNVML({4242: 1_073_741_824, 4243: None, 999: 5})  # None: NVML could not attribute memory
    probe = GpuProbe(nvml=fake)
    assert probe.present and probe.driver == "550.54.15"
    sampler = MemorySampler(lambda: [4242, 4243], probe)
    for _ in range(3):
        sampler.sample_once()
    gpu = sampler.result().gpu
    assert gpu.present and gpu.devices[0].name == "NVIDIA H100 80GB HBM3"
    assert gpu.devices[0].memory_total_bytes == 85520809984
    assert gpu.devices[0].temperature_c_max == 74 and gpu.devices[0].sm_clock_mhz_min == 1980
    assert gpu.peak_vram_by_pid == {4242: 1_073_741_824} and gpu.peak_vram_bytes == 1_073_741_824
    probe.close()
    assert fake.shutdown


def test_nvml_init_failure_is_absent_with_reason() -> None:
    class NoDriver(_FakeNVML):
        def nvmlInit(self) -> None:
            raise RuntimeError("Driver Not Loaded")

    probe = GpuProbe(nvml=NoDriver({}))
    assert not probe.present and probe.reason == "NVML unavailable: Driver Not Loaded"
    obs = MemorySampler(lambda: [], probe).result()
    assert obs.gpu.present is False and obs.gpu.peak_vram_bytes is None and obs.peak_rss_bytes is None


def _pair(pid: int, target: str, draft: str | None, method: str) -> PairRecord:
    t = datetime.now(UTC)
    return PairRecord(
        id=pid,
        target_sha256=target,
        draft_sha256=draft,
        method=method,
        rule_set="r",
        admitted=True,
        verdict_id=pid,
        created_at=t,
        updated_at=t,
    )


def test_self_speculation_pairs_covered_by_a_draft_run_are_not_run_twice() -> None:
    from specreg.benchmark.plan.conditions import plan
    from specreg.benchmark.plan.eligibility import drop_covered

    def planned(p):  # type: ignore[no-untyped-def]
        return (p, plan(p.method, draft_path="d" if p.draft_sha256 else None, draft_sha256=p.draft_sha256))

    draft_pair = _pair(1, "T", "D", "draft-simple")
    ngram_same_target = _pair(2, "T", None, "ngram-mod")
    ngram_other_target = _pair(3, "U", None, "ngram-simple")
    cache_same_target = _pair(4, "T", None, "ngram-cache")  # not among a draft run's conditions
    kept, covered = drop_covered(
        [planned(p) for p in (ngram_same_target, draft_pair, ngram_other_target, cache_same_target)]
    )
    assert [p.id for p, _ in kept] == [1, 3, 4]
    assert [(p.id, by.id) for p, by in covered] == [(2, 1)]


def test_llama_log_drain_uses_the_builds_own_flush() -> None:
    """The installed xllamacpp exports common_log_flush: a failed start drains llama.cpp's log
    queue itself instead of waiting and hoping (the fallback wait is for other builds)."""
    import ctypes
    import sys
    import time

    import xllamacpp as x

    so = sys.modules[x.Server.__module__].__file__
    lib = ctypes.CDLL(so)
    assert hasattr(lib, bundled_server._LOG_MAIN) and hasattr(lib, bundled_server._LOG_FLUSH)
    t0 = time.monotonic()
    bundled_server.drain_llama_log(so)
    assert time.monotonic() - t0 < bundled_server._LOG_DRAIN_S  # flushed, not the fallback wait
    t0 = time.monotonic()
    bundled_server.drain_llama_log("/nonexistent.so")
    assert time.monotonic() - t0 >= bundled_server._LOG_DRAIN_S
