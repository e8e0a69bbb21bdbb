"""What a serving server holds over time: the prompt cache (idle slots included), context checkpoints
(sliding-window and recurrent), the HTTP threads, replayed from the requests, against what the
bundled server logs it holds and the peak RSS it reaches."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from _pair_helpers import RULES

from specreg.audit.deploy import server_argv
from specreg.benchmark.run.client import LlamaClient
from specreg.gguf.reader import open_gguf
from specreg.schemas.bench import ChatMessage, ConditionSpec, WorkloadItem
from specreg.schemas.memory import DEFAULT_CACHE_RAM_MIB, DEFAULT_CTX_CHECKPOINTS, ServeSettings
from specreg.servers.launcher import bundled_command, launch
from specreg.servers.memory import GpuProbe, MemorySampler
from specreg.servers.memory_predict import predict_rss
from specreg.testing import ModelSpec, write_model
from specreg.testing.factory import recurrent_spec, sliding_window_spec
from specreg.testing.modelspec import CYCLER
from specreg.validators.memory_budget import (
    BUDGET_MARGIN,
    DRAFT_TOKENS,
    estimate,
    exceeded_text,
    longest_draft,
    prediction_exceeded,
)
from specreg.validators.memory_facts import model_facts
from specreg.validators.memory_served import (
    Served,
    checkpoint_positions,
    http_threads,
    partial_bytes,
    served_growth,
    state_bytes,
)

MIB = 1 << 20
WORDS = "The cat and the dog walked to the old mill by the river and talked about the weather. "
# distinct from their first token on: no prompt continues another (the server's similarity path)
ITEMS = [
    WorkloadItem(id=f"p{i}", stratum="s", prompt=f"{i}{i} " + WORDS * (2 + 3 * i), max_tokens=24 + 8 * i)
    for i in range(4)
]
CHATS = [
    WorkloadItem(id=f"c{i}", stratum="s", messages=[ChatMessage(role="user", content=WORDS * (3 + i))], max_tokens=48)
    for i in range(5)
]


def test_the_defaults_assumed_are_the_bundled_builds() -> None:
    """A build whose defaults moved would make every prediction (and the pinned deploy) wrong."""
    import xllamacpp

    p = xllamacpp.CommonParams()
    assert (p.cache_ram_mib, p.n_ctx_checkpoints, p.swa_full) == (DEFAULT_CACHE_RAM_MIB, DEFAULT_CTX_CHECKPOINTS, False)


def _serve(
    target: Path, draft: Path | None, method: str, items: list[WorkloadItem], log: Path, *flags: str
) -> tuple[int, list[Served]]:
    """Serve `items` one after another (a later -c in `flags` wins); a request the server refuses
    (longer than a slot's context) is kept as refused."""
    argv = ["-m", str(target), *(["-md", str(draft)] if draft else []), "--spec-type", method, "-c", "4096", *flags]
    server = launch(bundled_command(), argv, log, start_timeout_s=120)
    served = []
    gpu = GpuProbe()
    try:
        with LlamaClient(server.base_url) as client, MemorySampler(server.pids, gpu) as sampler:
            for it in items:
                n = client.input_tokens(it)
                done = client.complete(it, max_tokens=it.max_tokens, seed=42)
                if not done.ok:
                    assert "exceeds the available context size" in (done.error or ""), done.error
                    served.append(Served(it.id, n, n, it.messages is not None, refused=True))
                    continue
                total = n + max(0, (done.output_tokens or 0) - 1)
                served.append(Served(it.id, n, total, it.messages is not None, drafted=done.drafted))
    finally:
        server.stop()
        gpu.close()
    return sampler.peak_rss, served


def test_the_replayed_prompt_cache_and_checkpoints_match_the_servers_log(tmp_path: Path) -> None:
    """gemma3-like target (5 of 6 layers windowed) and draft: after each request the cache holds
    what the server says it holds, to the byte's rounding, and the checkpoints are the ones it made."""
    target = write_model(tmp_path / "t.gguf", sliding_window_spec("gemma3"))
    draft = write_model(tmp_path / "d.gguf", sliding_window_spec("gemma3", n_layer=2))
    log = tmp_path / "s.log"
    _, served = _serve(target, draft, "draft-simple", ITEMS, log, "-lv", "4")
    text = log.read_text(errors="replace")
    logged = [float(x) for x in re.findall(r"cache state: \d+ prompts, ([\d.]+) MiB", text)]
    made = [float(x) for x in re.findall(r"created context checkpoint .*size = ([\d.]+) MiB", text)]
    t, d = model_facts(open_gguf(target), RULES), model_facts(open_gguf(draft), RULES)
    growth = served_growth(t, d, ServeSettings(method="draft-simple"), served)
    assert len(logged) == len(served)
    # the server's figure leaves out the entries' copies of their tokens (4 bytes each)
    held = [sum(r.total_tokens for r in served[:i]) * 4 for i in range(len(served))]
    assert [round((x - h) / MIB, 3) for x, h in zip(growth.trace, held, strict=True)] == pytest.approx(
        logged, abs=0.002
    )
    assert growth.checkpoints == len(made) and growth.checkpoints >= len(served)
    # no checkpoints with --swa-full, and none on a model without a window
    assert served_growth(t, d, ServeSettings(swa_full=True), served).checkpoints == 0
    plain = model_facts(open_gguf(write_model(tmp_path / "p.gguf", CYCLER)), RULES)
    assert served_growth(plain, None, ServeSettings(), served).checkpoints == 0


def test_the_cache_limit_and_off_switch_bound_the_growth(tmp_path: Path) -> None:
    t = model_facts(open_gguf(write_model(tmp_path / "t.gguf", CYCLER)), RULES)
    many = [Served(f"p{i}", 500, 900) for i in range(40)]
    grown = served_growth(t, None, ServeSettings(), many)
    assert grown.entries == 39 and grown.peak_bytes == grown.trace[-1]  # every earlier prompt kept
    assert served_growth(t, None, ServeSettings(cache_ram_mib=0), many).peak_bytes == 0
    one = grown.peak_bytes // 39
    capped = served_growth(t, None, ServeSettings(cache_ram_mib=max(1, 5 * one // MIB)), many)
    assert capped.peak_bytes <= max(1, 5 * one // MIB) * MIB
    again = served_growth(t, None, ServeSettings(), many + many)  # the same prompts again: restored, not added
    assert again.peak_bytes == grown.peak_bytes
    assert checkpoint_positions(2000, 512) == [1484, 1996] and checkpoint_positions(300, 512) == [296]
    assert checkpoint_positions(300, 512, chat=True) == [1, 296]


def _within(
    target: Path, draft: Path | None, method: str, items: list[WorkloadItem], tmp: Path, *flags: str
) -> list[Served]:
    """Served one at a time, the prediction is within the margin of the measured peak, and the
    bound `check pair` gives (no workload known) is not below it; the requests as served."""
    peak, served = _serve(target, draft, method, items, tmp / f"{method}.log", *flags)
    ctx = int(flags[flags.index("-c") + 1]) if "-c" in flags else 4096
    slots = int(flags[flags.index("-np") + 1]) if "-np" in flags else 1
    k = int(flags[flags.index("--spec-draft-n-max") + 1]) if "--spec-draft-n-max" in flags else None
    settings = ServeSettings(swa_full="--swa-full" in flags)
    spec = ConditionSpec(name=method, method=method, draft_path=str(draft) if draft else None, draft_n_max=k)
    predicted = predict_rss(
        spec, str(target), ctx_size=ctx, slots=slots, gpu_layers=None, items=items, max_tokens=None,
        served=served, settings=settings, in_flight=1,
    )  # fmt: skip
    assert predicted is not None
    what = (target.name, method, flags, round(predicted / MIB, 1), round(peak / MIB, 1))
    assert abs(predicted - peak) <= BUDGET_MARGIN * peak, what
    assert prediction_exceeded(peak, predicted) is None, what
    settings = replace(settings, ctx_size=ctx, slots=slots, method=method, draft_n_max=k)
    total = estimate(open_gguf(target), open_gguf(draft) if draft else None, settings, RULES).total_bytes
    assert total >= peak, what
    return served


# slow: a whole workload on a real server for one more family's 5%; the default suite replays the same
# sliding-window prompt cache and checkpoints against the server's log (test_the_replayed_prompt_cache...)
@pytest.mark.slow
def test_prediction_within_5_percent_on_a_sliding_window_family_under_a_chat_workload(tmp_path: Path) -> None:
    target = write_model(tmp_path / "g3.gguf", sliding_window_spec("gemma3", base=CYCLER.but(file_type="f16")))
    _within(target, None, "none", CHATS, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
@pytest.mark.parametrize("method", ["none", "draft-simple", "--swa-full"])
def test_prediction_within_5_percent_per_sliding_window_family(tmp_path: Path, arch: str, method: str) -> None:
    target = write_model(tmp_path / "t.gguf", sliding_window_spec(arch, base=CYCLER.but(file_type="f16")))
    draft = write_model(tmp_path / "d.gguf", sliding_window_spec(arch, n_layer=2))
    if method == "--swa-full":
        _within(target, None, "none", CHATS + ITEMS, tmp_path, "--swa-full")
    else:
        _within(target, draft if method.startswith("draft") else None, method, CHATS + ITEMS, tmp_path)


@pytest.mark.slow
@pytest.mark.realmodel
def test_prediction_within_5_percent_on_the_smollm2_pair_under_a_workload(tmp_path: Path, real_model) -> None:
    """The real pair's KV (23 KB a token) makes the prompt cache the largest thing that grows."""
    _within(real_model("f16"), real_model("q4_1"), "draft-simple", CHATS, tmp_path)


# prose the CYCLER model answers with its 64-token cycle: 32 new tokens draft nothing (no n-gram
# repeats yet), 100 draft once the cycle comes round (about 23 tokens, cut to what the request has left)
DRAFTING = [
    WorkloadItem(id="few", stratum="s", prompt="1 " + WORDS * 3, max_tokens=32),
    WorkloadItem(id="late", stratum="s", prompt="2 " + WORDS * 5, max_tokens=100),
]


def _vocab_pair(tmp: Path, vocab: Path, method: str) -> tuple[Path, Path | None]:
    spec = CYCLER.but(tokenizer_from=str(vocab), file_type="f16")
    target = write_model(tmp / "t.gguf", spec)
    return target, write_model(tmp / "d.gguf", spec.but(n_layer=1)) if method.startswith("draft") else None


@pytest.mark.slow  # a real server under a workload; its lines run in the replays above, and in CI per vocabulary below
def test_the_prediction_follows_what_a_workload_drafted_on_a_real_spm_vocabulary(tmp_path: Path, real_vocab) -> None:
    """llama.cpp's 32k SPM tokenizer on tiny weights, ngram-simple: one request drafts nothing, one
    drafts short. Sized from the tokens each drafted (timings.draft_n), the prediction is within 5%
    of the measured peak; a full 48-token draft per step was +8.9% here (+13.8% in bench_memory's
    mt-bench: the verification logits, n_vocab floats a row, never asked for)."""
    target, _ = _vocab_pair(tmp_path, real_vocab("llama-spm"), "ngram-simple")
    served = _within(target, None, "ngram-simple", DRAFTING, tmp_path)
    assert served[0].drafted == 0
    longest = longest_draft(served)
    assert longest is not None and 0 < longest < DRAFT_TOKENS["ngram-simple"]


@pytest.mark.slow
@pytest.mark.parametrize("vocab", ["llama-spm", "qwen2", "gemma-4"])
@pytest.mark.parametrize("method", ["ngram-mod", "draft-simple", "ngram-simple"])
def test_the_prediction_follows_what_a_workload_drafted_per_real_vocabulary(
    tmp_path: Path, real_vocab, vocab: str, method: str
) -> None:
    target, draft = _vocab_pair(tmp_path, real_vocab(vocab), method)
    _within(target, draft, method, DRAFTING, tmp_path)


@pytest.mark.slow
def test_a_longer_draft_length_is_predicted_with_its_verification_rows(tmp_path: Path, real_vocab) -> None:
    """draft-simple at --spec-draft-n-max 32 on gemma-4's 262k vocabulary: every verification
    batch holds 33 logit rows (1 MiB each), not the default draft's 4 (-8.7% under when the
    length was not passed to the prediction)."""
    target, draft = _vocab_pair(tmp_path, real_vocab("gemma-4"), "draft-simple")
    _within(target, draft, "draft-simple", DRAFTING, tmp_path, "--spec-draft-n-max", "32")


# slow: a real server for --swa-full's variant of the replay that the default suite runs (whose
# arithmetic it also runs with swa_full)
@pytest.mark.slow
def test_a_full_size_window_cache_still_saves_only_the_window(tmp_path: Path) -> None:
    """--swa-full: llama.cpp keeps its iSWA cache (the window's as large as the other) and a saved
    state writes only the window's unmasked cells; the replay matches the logged cache (counting
    every cell of the windowed layers was +4.4% on gemma3 in bench_memory), and no checkpoints."""
    target = write_model(tmp_path / "t.gguf", sliding_window_spec("gemma3", base=CYCLER.but(file_type="f16")))
    log = tmp_path / "s.log"
    _, served = _serve(target, None, "none", ITEMS, log, "--swa-full", "-lv", "4")
    text = log.read_text(errors="replace")
    t = model_facts(open_gguf(target), RULES)
    growth = served_growth(t, None, ServeSettings(swa_full=True), served)
    held = [sum(r.total_tokens for r in served[:i]) * 4 for i in range(len(served))]
    logged = [x for _, x in _cache_states(log)]
    assert [round((x - h) / MIB, 3) for x, h in zip(growth.trace, held, strict=True)] == pytest.approx(
        logged, abs=0.002
    )
    assert growth.checkpoints == 0 and "created context checkpoint" not in text


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_the_http_pool_follows_the_online_cpus_not_the_pinned_set() -> None:
    """The server sizes its HTTP pool from std::thread::hardware_concurrency(), which counts the
    online CPUs even in a process pinned to one: what `online_cpus` gives there, pinned too
    (os.sched_getaffinity(0) would say 1)."""
    code = (
        "import ctypes, os\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from specreg.validators.memory_served import online_cpus\n"
        "hc = ctypes.CDLL('libstdc++.so.6')._ZNSt6thread20hardware_concurrencyEv\n"
        "hc.restype = ctypes.c_uint\n"
        "print(hc(), online_cpus(), len(os.sched_getaffinity(0)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    hardware, online, pinned = (int(x) for x in done.stdout.split())
    assert (hardware, pinned) == (online, 1)
    assert http_threads(ServeSettings(slots=1)) == max(5, hardware - 1)


@pytest.mark.slow
def test_bench_memory_measures_every_family_by_default(tmp_path: Path, real_vocab) -> None:
    """A rerun without --models covers every family of the test data: each gives conditions (the
    SmolLM2 pair where cached)."""
    from benchmarks import bench_memory

    real_vocab("llama-spm")  # the vocabulary files fetched (or the test skipped offline)
    built = {c.model for c in bench_memory._conditions(tmp_path, list(bench_memory.FAMILIES), fetch=False)}
    families = [f for f in bench_memory.FAMILIES if f != "smollm2"]
    assert len(built - {"SmolLM2-135M"}) == len(families) == 7, built


def test_bench_memory_refuses_a_family_it_does_not_know() -> None:
    """Not skipped silently: a rerun asked for it would report fewer families than it was asked."""
    from benchmarks import bench_memory

    script = Path(bench_memory.__file__)
    done = subprocess.run(
        [sys.executable, str(script), "--models", "tiny,qwen3"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "--models: unknown qwen3 (families: " + ", ".join(bench_memory.FAMILIES) + ")"
    ]


def test_under_predictions_are_flagged_with_the_margin() -> None:
    assert prediction_exceeded(689.6, 636.5) == pytest.approx(0.0834, abs=1e-3)  # the baseline
    assert prediction_exceeded(660.0, 636.5) is None  # within 5%
    assert prediction_exceeded(None, 636.5) is None and prediction_exceeded(600.0, None) is None
    line = exceeded_text("baseline", 689.6, 636.5, 0.0834)
    assert line == "baseline: measured peak 689.6 MiB is 8.3% over the predicted 636.5 MiB (more than the 5% margin)"


def test_check_pair_names_the_serving_lines_with_their_flags(tmp_path: Path) -> None:
    from _registry_helpers import cli

    t = write_model(tmp_path / "t.gguf", sliding_window_spec("gemma3"))
    d = write_model(tmp_path / "d.gguf", sliding_window_spec("gemma3", n_layer=2))
    db = tmp_path / "r.db"
    args = ["check", "pair", str(t), str(d), "-m", "draft-simple"]
    out = cli(*args, "--budget", "9GiB", db=db)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "prompt cache up to 8,192.0 MiB as prompts are served (--cache-ram 8192 (llama.cpp's default)" in text
    assert (
        "context checkpoints up to 32 x" in text and "(--ctx-checkpoints 32 (default), -np; --swa-full: none)" in text
    )
    # the line a person reads first: what is held, then what may grow to which cap
    assert re.search(
        r"memory resident [\d.]+ MiB; up to 8\.1 GiB if the prompt cache and the context checkpoints fill "
        r"\(--cache-ram 8192, llama.cpp's default; --ctx-checkpoints 32 per slot, llama.cpp's default\)",
        text,
    ), text
    assert re.search(
        r"fit FITS 9\.0 GiB \(--budget 9GiB\): 8\.1 GiB \+ 5% at --cache-ram 8192 --ctx-checkpoints 32", text
    )
    off = cli(*args, "--cache-ram", "0", "--ctx-checkpoints", "0", "--budget", "1GiB", db=db)
    flat = " ".join(off.stdout.split())
    assert off.returncode == 0 and "prompt cache off (--cache-ram 0)" in flat
    assert "context checkpoints" not in off.stdout and "; nothing grows past it (--cache-ram 0)" in flat
    # the default 8 GiB prompt cache does not fit 1 GiB: the largest that does is named, exit 0
    tight = cli(*args, "--budget", "1GiB", "--json", db=db)
    fit = json.loads(tight.stdout)["fit"]
    assert tight.returncode == 0 and fit["fits"] and fit["lowered"] and fit["ctx_checkpoints"] == 32
    assert 0 < fit["cache_ram_mib"] < 1024 and fit["needed_bytes"] * 1.05 <= 1 << 30
    # one MiB more of prompt cache, and every checkpoint, would not fit: it is the largest
    more = str(fit["cache_ram_mib"] + 1)
    over = cli(*args, "--budget", "1GiB", "--cache-ram", more, "--ctx-checkpoints", "32", db=db)
    flat = " ".join(over.stdout.split())
    assert over.returncode == 3 and f"--cache-ram {fit['cache_ram_mib']} --ctx-checkpoints 32 would fit" in flat
    # a cap given is kept; the one not given is lowered to make room for it
    kept = json.loads(cli(*args, "--budget", "1GiB", "--cache-ram", more, "--json", db=db).stdout)["fit"]
    assert kept["fits"] and kept["cache_ram_mib"] == int(more) and kept["ctx_checkpoints"] < 32
    # so little room that the checkpoints are cut too: the checkpoints first, the cache after
    snug = json.loads(cli(*args, "--budget", f"{int(fit['resident_bytes'] * 1.06)}", "--json", db=db).stdout)["fit"]
    assert snug["fits"] and snug["cache_ram_mib"] == 0 and 0 < snug["ctx_checkpoints"] < 32


def test_deploy_pins_what_the_prediction_assumed() -> None:
    recorded = ["python", "-m", "specreg.servers.bundled_server", "-m", "/m/t.gguf", "--spec-type", "none"]
    argv = server_argv(recorded)
    assert argv[argv.index("--cache-ram") + 1] == str(DEFAULT_CACHE_RAM_MIB)
    assert argv[argv.index("--ctx-checkpoints") + 1] == str(DEFAULT_CTX_CHECKPOINTS)
    assert argv[argv.index("--threads-http") + 1] == "5"  # -np + 4: no more than any prediction counted
    argv = server_argv([*recorded, "--cache-ram", "0", "--threads-http", "7"])
    assert argv[argv.index("--cache-ram") + 1] == "0" and argv[argv.index("--threads-http") + 1] == "7"


def _cache_states(log: Path) -> list[tuple[int, float]]:
    text = log.read_text(errors="replace")
    return [(int(n), float(x)) for n, x in re.findall(r"cache state: (\d+) prompts, ([\d.]+) MiB", text)]


def test_idle_slots_are_saved_when_fewer_requests_are_in_flight_than_slots(tmp_path: Path) -> None:
    """-np 4, one request at a time: once a task has its slot the server saves every idle slot
    (--cache-idle-slots, on by default), so the cache holds the earlier prompts although no slot
    was ever taken over (the -5% miss of bench_memory's `-c 16384 -np 4`); the replay with one
    request in flight ends where the server's log does."""
    target = write_model(tmp_path / "t.gguf", ModelSpec(n_ctx=4096))
    log = tmp_path / "s.log"
    _, served = _serve(target, None, "none", ITEMS, log, "-c", "16384", "-np", "4", "-lv", "4")
    states = _cache_states(log)
    t = model_facts(open_gguf(target), RULES)
    settings = ServeSettings(ctx_size=16384, slots=4)
    growth = served_growth(t, None, settings, served, in_flight=1)
    tokens = sum(r.total_tokens for r in served[:-1]) * 4  # the entries' token copies, not in the log
    assert states[-1][0] == growth.entries == len(served) - 1
    assert round((growth.trace[-1] - tokens) / MIB, 3) == pytest.approx(states[-1][1], abs=0.002)
    assert served_growth(t, None, settings, served).peak_bytes == 0  # 4 in flight: none idle, none saved
    off = served_growth(t, None, replace(settings, cache_idle_slots=False), served, in_flight=1)
    assert off.peak_bytes == 0


# slow: -c 16384 -np 4 under a whole workload; the default suite checks the idle slots' cache against the
# server's log (above) and the HTTP threads (test_the_http_pool_follows_the_online_cpus_not_the_pinned_set)
@pytest.mark.slow
def test_the_slots_idle_serving_and_http_threads_hold_what_is_predicted(tmp_path: Path) -> None:
    """The whole prediction for -c 16384 -np 4 served one request at a time is within 5% of the
    measured peak RSS, and the server runs as many HTTP threads as counted."""
    target = write_model(tmp_path / "t.gguf", ModelSpec(n_ctx=4096))
    _within(target, None, "none", CHATS + ITEMS, tmp_path, "-c", "16384", "-np", "4", "-lv", "4")
    threads = re.findall(r"using (\d+) threads for HTTP server", (tmp_path / "none.log").read_text(errors="replace"))
    assert threads and int(threads[-1]) == http_threads(ServeSettings(slots=4))


def test_a_refused_prompt_decodes_nothing_but_is_tokenized(tmp_path: Path) -> None:
    """A prompt longer than a slot's context (the factory's 512) is refused before its first batch:
    the prediction counts no compute for it (the +6% miss of bench_memory's humaneval draft-simple,
    every prompt refused), only the HTTP threads that tokenized it."""
    long = [WorkloadItem(id=f"l{i}", stratum="s", prompt=f"{i} " + WORDS * 40, max_tokens=16) for i in range(3)]
    target = write_model(tmp_path / "t.gguf", CYCLER)
    draft = write_model(tmp_path / "d.gguf", CYCLER.but(n_layer=1))
    _within(target, draft, "draft-simple", long, tmp_path)
    text = (tmp_path / "draft-simple.log").read_text(errors="replace")
    assert "exceeds the available context size" in text


def test_a_recurrent_models_state_and_checkpoints_match_the_servers_log(tmp_path: Path) -> None:
    """A tiny mamba (every layer recurrent): no KV cache, a recurrent state per slot of the size the
    server allocates, context checkpoints of one slot's state, the prompt cache as logged."""
    target = write_model(tmp_path / "m.gguf", recurrent_spec(n_layer=4))
    log = tmp_path / "m.log"
    _, served = _serve(target, None, "none", ITEMS + CHATS[:1], log, "-lv", "4")  # distinct prompts
    text = log.read_text(errors="replace")
    t = model_facts(open_gguf(target), RULES)
    settings = ServeSettings()
    est = estimate(open_gguf(target), None, settings, RULES)
    rs = [float(x) for x in re.findall(r"RS buffer size =\s+([\d.]+) MiB", text)]
    assert rs and round(est.recurrent_bytes / MIB, 2) == pytest.approx(rs[0], abs=0.005)
    assert est.kv_bytes == 0 and "KV buffer size" not in text
    assert not any("not counted" in n for n in est.notes)
    made = [float(x) for x in re.findall(r"created context checkpoint .*size = ([\d.]+) MiB", text)]
    assert made and all(x == pytest.approx(partial_bytes(t, settings, 100) / MIB, abs=0.001) for x in made)
    saved = [float(x) for x in re.findall(r"saving prompt with length \d+, total state size = ([\d.]+) MiB", text)]
    assert saved and all(x == pytest.approx(state_bytes(t, settings, 100) / MIB, abs=0.001) for x in saved)
    growth = served_growth(t, None, settings, served)
    assert growth.checkpoints == len(made)
    tokens = [sum(r.total_tokens for r in served[:i]) * 4 for i in range(len(served))]
    logged = [x for _, x in _cache_states(log)]
    assert [round((x - h) / MIB, 3) for x, h in zip(growth.trace, tokens, strict=True)] == pytest.approx(
        logged, abs=0.002
    )


def test_a_recurrent_layout_not_sized_is_said_to_be_not_counted(tmp_path: Path) -> None:
    """A file with an SSM state but not of the mamba family (a hybrid's keys on a llama file):
    the estimate says its recurrent state and checkpoints are not counted, never silently 0."""
    spec = CYCLER.but(kv_overrides=(("llama.ssm.state_size", 16, "UINT32", None),))
    est = estimate(open_gguf(write_model(tmp_path / "h.gguf", spec)), None, ServeSettings(), RULES)
    assert any("recurrent (SSM) layers of a layout not sized (llama)" in n for n in est.notes)
    assert any("checkpoints of the target's recurrent state are not counted" in n for n in est.notes)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["none", "draft-simple"])
def test_prediction_within_5_percent_on_a_recurrent_family(tmp_path: Path, method: str) -> None:
    target = write_model(tmp_path / "m.gguf", recurrent_spec(n_layer=4))
    draft = write_model(tmp_path / "d.gguf", recurrent_spec(n_layer=1))
    _within(target, draft if method == "draft-simple" else None, method, CHATS + ITEMS, tmp_path)
    _within(target, None, "none", ITEMS, tmp_path / "np4", "-c", "16384", "-np", "4")


def test_a_benchmarks_refused_rows_are_replayed_as_refused() -> None:
    """bench's stored prediction: a row with an error and no token (not a time-out) was refused
    before its first batch; a timed-out one occupied its slot and is replayed as served. What each
    drafted comes with it: the server leaves draft_n out when 0, so a row with timings and no
    draft_n drafted nothing; one without timings, unknown (as long as the method allows)."""
    from datetime import UTC, datetime

    from specreg.schemas.request_row import RequestRow
    from specreg.servers.memory_predict import served_requests

    def row(pid: str, ok: bool, out: int | None, timed_out: bool = False, **timings: int) -> RequestRow:
        now = datetime.now(UTC)
        return RequestRow(
            condition_idx=0, condition="c", prompt_id=pid, stratum="s", repeat=0, started_at=now, ok=ok,
            output_tokens=out, timed_out=timed_out, error=None if ok else "HTTP 400", **timings,
        )  # fmt: skip

    rows = [
        row("a", True, 8, prompt_n=10),
        row("b", False, None),
        row("c", False, None, timed_out=True),
        row("a", True, 8, prompt_n=10, draft_n=6),
    ]
    served = served_requests(rows, {"a": 10, "b": 900, "c": 20}, set(), warmup=[("a", 4, 2)])
    assert served is not None
    got = [(r.key, r.refused, r.total_tokens, r.drafted) for r in served]
    assert got == [
        ("a", False, 13, 2),
        ("a", False, 17, 0),
        ("b", True, 900, None),
        ("c", False, 20, None),
        ("a", False, 17, 6),
    ]
    assert longest_draft(served) is None  # the timed-out one's drafts are not known
    assert longest_draft([r for r in served if r.key != "c"]) == 6
    from specreg.benchmark.run.reply import Completion

    timings = ({"predicted_n": 8}, {"predicted_n": 8, "draft_n": 6}, {})  # draft_n left out when 0
    assert [Completion(timings=t).drafted for t in timings] == [0, 6, None]
