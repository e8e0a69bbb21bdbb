"""Memory from metadata: the estimate matches the buffers llama.cpp itself reports, and the RSS measured."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _audit_world import AuditWorld
from _pair_helpers import BASE, RULES
from _registry_helpers import cli, model

from specreg.errors import ServerStartError, UsageError
from specreg.gguf.reader import open_gguf
from specreg.registry.store import Registry
from specreg.schemas.bench import WorkloadItem
from specreg.schemas.memory import ServeSettings
from specreg.servers.launcher import bundled_command, launch
from specreg.testing import write_model
from specreg.testing.modelspec import CYCLER, LOOP_TEXT
from specreg.validators.memory_budget import (
    estimate,
    head_dim_check,
    kv_bytes,
    parse_size,
)
from specreg.validators.memory_facts import model_facts

MIB = 1 << 20
WIDE = BASE.but(n_embd=256, n_layer=3, n_head=8, n_head_kv=2, n_ff=512)  # GQA, head size 32 (quantized KV fits)

# (name, target spec, draft spec, flags, settings)
CASES = [
    ("tiny -c 1024", BASE, None, ["-c", "1024"], ServeSettings(ctx_size=1024)),
    ("tiny -c 8192 -np 4", BASE, None, ["-c", "8192", "-np", "4"], ServeSettings(ctx_size=8192, slots=4)),
    ("GQA f16 weights", WIDE.but(file_type="f16"), None, ["-c", "4096"], ServeSettings()),
    (
        "GQA -ctk q8_0 -ctv q4_0",
        WIDE,
        None,
        ["-c", "8192", "-ctk", "q8_0", "-ctv", "q4_0"],
        ServeSettings(ctx_size=8192, cache_type_k="q8_0", cache_type_v="q4_0"),
    ),
    (
        "draft-simple pair",
        BASE,
        BASE.but(noise=0.05),
        ["-c", "4096", "--spec-type", "draft-simple"],
        ServeSettings(),
    ),
]


def _logged(log: str) -> dict[str, float]:
    """MiB per buffer kind, summed over contexts, as llama.cpp logs them at load."""
    out = {}
    for kind, rx in (
        ("weights", r"model buffer size =\s+([\d.]+) MiB"),
        ("kv", r"KV buffer size =\s+([\d.]+) MiB"),
        ("compute", r"compute buffer size =\s+([\d.]+) MiB"),
    ):
        out[kind] = sum(float(x) for x in re.findall(rx, log))
    return out


def test_estimate_matches_llama_cpp_buffers(tmp_path: Path) -> None:
    for i, (name, tspec, dspec, flags, settings) in enumerate(CASES):
        target = write_model(tmp_path / f"t{i}.gguf", tspec)
        draft = write_model(tmp_path / f"d{i}.gguf", dspec) if dspec is not None else None
        args = ["-m", str(target), *(["-md", str(draft)] if draft else []), *flags, "-lv", "4"]
        log = tmp_path / f"{i}.log"
        launch(bundled_command(), args, log, start_timeout_s=60).stop()
        got = _logged(log.read_text(errors="replace"))
        est = estimate(open_gguf(target), open_gguf(draft) if draft else None, settings, RULES)
        weights = (est.target_weights_bytes + est.draft_weights_bytes) / MIB
        assert weights == pytest.approx(got["weights"], abs=0.01 * (2 if draft else 1)), name
        assert est.kv_bytes / MIB == pytest.approx(got["kv"], abs=0.01), name
        assert est.compute_bytes / MIB == pytest.approx(got["compute"], rel=0.15), name  # fitted: within 15%


def test_quantized_cache_needs_a_head_size_its_block_divides(tmp_path: Path) -> None:
    """The tiny model's heads are 16 wide: llama.cpp refuses q8_0 (block 32), and so does the check."""
    path = write_model(tmp_path / "t.gguf", BASE)
    settings = ServeSettings(cache_type_k="q8_0")
    (problem,) = head_dim_check(open_gguf(path), None, settings, RULES)
    assert problem == "target: K cache type q8_0 with block size 32 does not divide n_embd_head_k=16"
    log = tmp_path / "q8.log"
    with pytest.raises(ServerStartError):
        launch(bundled_command(), ["-m", str(path), "-ctk", "q8_0"], log, start_timeout_s=60)
    assert "K cache type q8_0 with block size 32 does not divide n_embd_head_k=16" in log.read_text()


def test_sliding_window_and_per_layer_heads_from_metadata(tmp_path: Path) -> None:
    s = ServeSettings(ctx_size=8192)
    # gemma2's loader: every 2nd layer keeps a window (pattern 2, from the rule set)
    g2 = BASE.but(architecture="gemma2", n_layer=4, extra_kv=(("gemma2.attention.sliding_window", 100),))
    f = model_facts(open_gguf(write_model(tmp_path / "g2.gguf", g2)), RULES)
    assert f.swa == [True, False, True, False]
    total, full, swa = kv_bytes(f, s)
    assert (full, swa) == (8192, 768)  # pad(100 + 512 micro-batch, 256)
    per_cell = 2 * 4 * 16 * 2  # K and V, 4 kv heads x 16, f16
    assert total == (2 * 8192 + 2 * 768) * per_cell
    # the per-layer array wins over the arch's pattern; per-layer KV head counts are honoured
    arr = g2.but(
        extra_kv=(
            ("gemma2.attention.sliding_window", 100),
            ("gemma2.attention.sliding_window_pattern", [False, False, False, True]),
            ("gemma2.attention.head_count_kv", [4, 2, 2, 1]),
        )
    )
    f = model_facts(open_gguf(write_model(tmp_path / "arr.gguf", arr)), RULES)
    assert f.swa == [False, False, False, True] and f.heads_kv == [4, 2, 2, 1]
    total, _, _ = kv_bytes(f, s)
    assert total == (8192 * (4 + 2 + 2) + 768 * 1) * 2 * 16 * 2
    # no window in the file: no SWA layers, whatever the architecture
    plain = model_facts(open_gguf(write_model(tmp_path / "p.gguf", BASE.but(architecture="gemma2"))), RULES)
    assert not any(plain.swa)


def test_gpu_layers_split_weights_kv_and_compute(tmp_path: Path) -> None:
    gf = open_gguf(write_model(tmp_path / "t.gguf", WIDE))
    cpu = estimate(gf, None, ServeSettings(), RULES)
    assert cpu.vram_bytes == 0 and cpu.host_bytes == cpu.total_bytes
    every = estimate(gf, None, ServeSettings(gpu_layers=-1), RULES)
    # output buffers, the prompt cache, checkpoints and the HTTP threads: host memory
    host_only = every.overhead_bytes + every.output_bytes + every.vocab_bytes + every.prompt_cache_bytes
    host_only += every.checkpoint_bytes + every.http_bytes
    assert every.vram_bytes == every.total_bytes - host_only - (
        sum(t.n_bytes for t in gf.tensors if not t.name.startswith(("blk.", "output.")))
    )
    one = estimate(gf, None, ServeSettings(gpu_layers=1), RULES)
    assert 0 < one.vram_bytes < every.vram_bytes


@pytest.mark.parametrize(
    ("text", "value"),
    [("24GiB", 24 << 30), ("24G", 24 << 30), ("512MiB", 512 << 20), ("512MB", 512_000_000), ("1000", 1000)],
)
def test_budget_sizes(text: str, value: int) -> None:
    assert parse_size(text) == value


def test_bad_budget_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        parse_size("lots")


def test_a_budget_holds_the_estimate_plus_the_tolerance(tmp_path: Path) -> None:
    """Erring on the safe side: a budget just above the estimate, but within its 5%, fails."""
    from specreg.validators.memory_budget import BUDGET_MARGIN, budget_check

    est = estimate(open_gguf(write_model(tmp_path / "t.gguf", BASE)), None, ServeSettings(), RULES)
    need = est.total_bytes
    assert budget_check(est, need + need // 100, "--budget").severity == "error"
    ok = budget_check(est, need + need // 19, "--budget")
    assert ok.severity == "pass" and ok.evidence["margin_bytes"] == int(need * BUDGET_MARGIN)


def test_check_pair_reports_memory_and_fails_a_budget(tmp_path: Path) -> None:
    t = model(tmp_path, "t.gguf")
    d = model(tmp_path, "d.gguf", noise=0.05)
    db = tmp_path / "r.db"
    args = ["check", "pair", str(t), str(d), "-m", "draft-simple", "-c", "8192", "-np", "2", "--json"]
    ok = cli(*args, db=db)
    assert ok.returncode == 0, ok.stderr
    mem = json.loads(ok.stdout)["memory"]
    assert {"ctx_size", "slots", "target_weights_bytes", "draft_weights_bytes", "kv_bytes", "compute_bytes"} <= set(mem)
    assert (mem["ctx_size"], mem["slots"], mem["kv_cells"]) == (8192, 2, 8192)
    parts = (
        "target_weights_bytes",
        "draft_weights_bytes",
        "kv_bytes",
        "compute_bytes",
        "output_bytes",
        "vocab_bytes",
        "overhead_bytes",
        "method_bytes",
        "prompt_cache_bytes",
        "checkpoint_bytes",
        "http_bytes",
        "recurrent_bytes",
    )
    assert mem["total_bytes"] == sum(mem[k] for k in parts)
    assert mem["prompt_cache_bytes"] == 8192 * MIB and mem["checkpoint_bytes"] == 0  # llama.cpp's default, no SWA
    # issue 47: a budget judges the configuration, not the pair: its own exit code and record,
    # and the pair stays admitted
    small = cli(*args, "--budget", "40MiB", db=db)
    assert small.returncode == 3, small.stderr
    judged = json.loads(small.stdout)
    assert judged["admitted"] and not any(c["code"].startswith("memory.") for c in judged["checks"])
    fit = judged["fit"]
    assert not fit["fits"] and fit["cache_ram_mib"] is None and fit["budget_bytes"] == 40 * MIB
    check = next(c for c in fit["checks"] if c["code"] == "memory.budget")
    assert check["severity"] == "error" and "more than the budget of 40.0 MiB" in check["message"]
    # judged with no prompt cache and no checkpoints: even the resident part does not fit
    assert check["evidence"]["needed_bytes"] == fit["needed_bytes"] == fit["resident_bytes"]
    assert fit["resident_bytes"] == mem["total_bytes"] - mem["prompt_cache_bytes"] - mem["checkpoint_bytes"]
    pairs = json.loads(cli("pairs", "--json", db=db).stdout)
    assert [p["admitted"] for p in pairs] == [True]
    roomy = cli(*args, "--budget", "auto", "--cache-ram", "0", db=db)  # the host RAM holds 60 MiB, no prompt cache
    assert roomy.returncode == 0, roomy.stderr
    human = cli(*args[:-1], db=db)
    assert "memory  resident " in human.stdout and "fit  " not in human.stdout  # no budget, nothing judged
    assert "        -c 8192 -np 2 -ctk f16 -ctv f16: weights 0.5 + draft 0.5, KV 4.0," in human.stdout
    assert "draft KV 4.0 MiB (its own cache of the same cells)" in human.stdout  # the draft's own line
    assert mem["kv_bytes"] == mem["target_kv_bytes"] + mem["draft_kv_bytes"]
    bad = cli(*args, "--budget", "forty", db=db)
    assert bad.returncode == 2 and "expected a size like 24GiB" in bad.stderr
    zero = cli(*args, "--budget", "0GiB", db=db)
    assert zero.returncode == 2 and "--budget '0GiB': must be more than 0" in zero.stderr
    # --draft-max: the target verifies 1 + 16 tokens a step (llama.cpp's default: 3), each with logits
    long = json.loads(cli(*args, "--draft-max", "16", db=db).stdout)["memory"]
    assert long["output_bytes"] > mem["output_bytes"] and long["total_bytes"] > mem["total_bytes"]
    assert json.loads(cli(*args, "--draft-max", "3", db=db).stdout)["memory"] == mem


def test_benchmark_conditions_store_a_prediction_within_15_percent(audit_world: AuditWorld) -> None:
    """The shared real run: every condition's predicted peak RSS next to the measured one."""
    from specreg.benchmark.store.runstore import RunStore

    with Registry(audit_world.db, show_progress=False) as reg:
        run = RunStore(reg).load(audit_world.run_id)
    measured = [
        (c.spec.name, c.memory.predicted_rss_bytes, c.memory.peak_rss_bytes) for c in run.conditions if c.memory
    ]
    assert measured
    for name, predicted, peak in measured:
        assert predicted is not None and peak, name
        assert abs(predicted - peak) / peak < 0.15, (name, predicted / MIB, peak / MIB)


# --- predictions against the bundled server's measured peak RSS, on real tokenizers -------------

REPEAT = WorkloadItem(id="repeat", stratum="repeat", prompt=LOOP_TEXT * 3, max_tokens=256)
SHORT = WorkloadItem(id="short", stratum="short", prompt="Rename the variable x to count.", max_tokens=16)
TOLERANCE = 0.05  # predicted peak RSS within 5% of the measured one


def _served_peak(target: Path, draft: Path | None, method: str, items: list[WorkloadItem], tmp: Path) -> int:
    """Peak RSS (sampled and high-water mark) of the bundled server serving `items` once."""
    from specreg.benchmark.run.client import LlamaClient
    from specreg.servers.memory import GpuProbe, MemorySampler

    argv = ["-m", str(target), *(["-md", str(draft)] if draft else []), "--spec-type", method, "-c", "4096"]
    server = launch(bundled_command(), argv, tmp / f"{target.stem}-{method}.log", start_timeout_s=300)
    gpu = GpuProbe()
    try:
        with LlamaClient(server.base_url) as client, MemorySampler(server.pids, gpu) as sampler:
            for it in items:
                client.complete(it, max_tokens=it.max_tokens, seed=42)
    finally:
        server.stop()
        gpu.close()
    return sampler.peak_rss


def _predicted(target: Path, draft: Path | None, method: str, items: list[WorkloadItem]) -> tuple[int, int]:
    """(resident prediction as `bench` stores it, total as `--budget` compares it)."""
    from specreg.schemas.bench import ConditionSpec
    from specreg.servers.memory_predict import predict_rss

    spec = ConditionSpec(name=method, method=method, draft_path=str(draft) if draft else None)
    resident = predict_rss(spec, str(target), ctx_size=4096, slots=1, gpu_layers=None, items=items, max_tokens=None)
    assert resident is not None
    settings = ServeSettings(method=method)
    total = estimate(open_gguf(target), open_gguf(draft) if draft else None, settings, RULES).total_bytes
    return resident, total


def _check(target: Path, draft: Path | None, method: str, items: list[WorkloadItem], tmp: Path) -> None:
    peak = _served_peak(target, draft, method, items, tmp)
    resident, total = _predicted(target, draft, method, items)
    what = (target.name, method, round(resident / MIB, 1), round(peak / MIB, 1))
    assert abs(resident - peak) <= TOLERANCE * peak, what
    assert total >= peak, ("a budget of the total would pass this server", *what)


def test_the_resident_line_bounds_a_served_request_on_two_families(tmp_path: Path) -> None:
    """Issue 47: `check pair`'s first memory line leads with what the server holds from its start
    and while serving ("resident R"), before the prompt cache and the checkpoints grow. On a tiny
    llama and a tiny sliding-window gemma3, each with a draft, the bundled server's peak
    over a request longer than a micro-batch stays under R, by no more than what R bounds that
    such a request leaves untouched (the compute buffer's mask up to a full context, the HTTP
    threads' tokenizing of slot-long prompts); the SmolLM2 pair is benchmarks/bench_resident.py's."""
    from specreg.testing.factory import sliding_window_spec
    from specreg.validators.memory_fit import resident_bytes

    text = "The quick brown fox jumps over the lazy dog while the cat watches from the warm window. " * 12
    long = WorkloadItem(id="long", stratum="long", prompt=text, max_tokens=16)
    families = {
        "llama": (BASE.but(n_ctx=4096), BASE.but(n_ctx=4096, noise=0.05)),
        "gemma3": (sliding_window_spec("gemma3"), sliding_window_spec("gemma3", n_layer=2)),
    }
    for name, (t_spec, d_spec) in families.items():
        target = write_model(tmp_path / f"{name}.gguf", t_spec)
        draft = write_model(tmp_path / f"{name}-draft.gguf", d_spec)
        est = estimate(open_gguf(target), open_gguf(draft), ServeSettings(method="draft-simple"), RULES)
        peak = _served_peak(target, draft, "draft-simple", [long], tmp_path)
        resident = resident_bytes(est)
        what = (name, round(resident / MIB, 1), round(peak / MIB, 1))
        assert peak <= resident <= peak + 16 * MIB, what
        assert est.total_bytes > resident + 8000 * MIB  # llama.cpp's default prompt cache on top


def test_tokenizer_heap_from_metadata_grows_with_the_vocabulary(tmp_path: Path, real_vocab) -> None:
    """Per token, per long token byte, per merge: a 151k BPE vocabulary costs more than a 32k SPM one."""
    from specreg.validators.memory_facts import vocab_heap_bytes

    spm = write_model(tmp_path / "spm.gguf", CYCLER.but(tokenizer_from=str(real_vocab("llama-spm"))))
    n, heap = vocab_heap_bytes(open_gguf(spm))
    assert n == 32000 and 6 * MIB < heap < 8 * MIB  # measured on the bundled server: 6.4 MiB
    assert vocab_heap_bytes(open_gguf(real_vocab("qwen2")))[1] > 60 * MIB  # measured: 69.5 MiB
    assert model_facts(open_gguf(spm), RULES).n_vocab == 32000


def test_prediction_within_5_percent_of_a_real_server_on_a_real_tokenizer(tmp_path: Path, real_vocab) -> None:
    """The fast one: llama.cpp's own 32k SPM tokenizer on tiny weights, one short request."""
    target = write_model(tmp_path / "spm.gguf", CYCLER.but(tokenizer_from=str(real_vocab("llama-spm"))))
    _check(target, None, "none", [SHORT], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("vocab", ["llama-spm", "gemma-4"])
@pytest.mark.parametrize("method", ["none", "ngram-simple", "ngram-mod", "draft-simple", "draft alone"])
def test_prediction_within_5_percent_per_condition_on_real_tokenizers(
    tmp_path: Path, real_vocab, vocab: str, method: str
) -> None:
    """32k SPM and 262k (gemma-4) vocabularies on tiny weights that repeat their last token, so every
    method drafts in full: the logits of its verification batches are measured, not assumed."""
    spec = CYCLER.but(tokenizer_from=str(real_vocab(vocab)), file_type="f16")
    target = write_model(tmp_path / "t.gguf", spec)
    draft = write_model(tmp_path / "d.gguf", spec.but(n_layer=1))
    if method == "draft alone":
        _check(draft, None, "none", [SHORT, REPEAT], tmp_path)
    else:
        _check(target, draft if method.startswith("draft") else None, method, [SHORT, REPEAT], tmp_path)


@pytest.mark.slow
@pytest.mark.realmodel
@pytest.mark.parametrize("method", ["none", "ngram-simple", "ngram-mod", "draft-simple", "q4_1 alone"])
def test_prediction_within_5_percent_on_the_smollm2_pair(tmp_path: Path, real_model, method: str) -> None:
    target, draft = real_model("f16"), real_model("q4_1")
    if method == "q4_1 alone":
        _check(draft, None, "none", [SHORT, REPEAT], tmp_path)
    else:
        _check(target, draft if method.startswith("draft") else None, method, [SHORT, REPEAT], tmp_path)


def test_the_measured_peak_includes_what_no_sample_caught() -> None:
    """A spike freed before the sampler starts (a model load's metadata) still counts: VmHWM."""
    import os

    import psutil

    from specreg.servers.memory import GpuProbe, MemorySampler

    spike = bytearray(64 * MIB)
    spike[::4096] = b"x" * len(spike[::4096])  # touch every page
    del spike
    now = psutil.Process().memory_info().rss
    gpu = GpuProbe()
    sampler = MemorySampler(lambda: [os.getpid()], gpu)
    sampler.sample_once()
    gpu.close()
    assert sampler.peak_rss >= now + 60 * MIB


def test_a_fit_on_the_gpu_judges_the_offloaded_part_and_keeps_the_host_caps(tmp_path: Path) -> None:
    """With -ngl the budget is the GPU's: the offloaded weights, their KV and the compute buffers;
    the prompt cache and the checkpoints are host memory, kept as asked when it fits."""
    from specreg.validators.memory_fit import judge_fit

    gf = open_gguf(write_model(tmp_path / "t.gguf", BASE))
    settings = ServeSettings(gpu_layers=-1, method="none")
    vram = estimate(gf, None, settings, RULES).vram_bytes
    roomy = judge_fit(gf, None, settings, RULES, (vram * 2, "--budget"), target_sha256="a" * 64, draft_sha256=None)
    assert roomy is not None and roomy.fits and roomy.on == "GPU" and roomy.needed_bytes == vram
    assert (roomy.cache_ram_mib, roomy.ctx_checkpoints) == (settings.cache_ram_mib, settings.ctx_checkpoints)
    tight = judge_fit(gf, None, settings, RULES, (vram, "--budget"), target_sha256="a" * 64, draft_sha256=None)
    assert tight is not None and not tight.fits and tight.cache_ram_mib is None  # the 5% margin does not fit
    assert judge_fit(gf, None, ServeSettings(), RULES, None, target_sha256="a" * 64, draft_sha256=None) is None
