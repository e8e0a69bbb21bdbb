"""Predicted vs measured memory, per model family and server condition: how far the metadata
estimate is from the bundled server's peak RSS.

For each model and condition the bundled llama.cpp server is started with the condition's flags,
serves the built-in default workload once (32 tokens per request) and one repetitive request
(256 tokens: every n-gram method drafts a full-length draft on it), and its process tree's peak
RSS is taken (the benchmark's own MemorySampler: sampled RSS and the kernel's high-water mark,
so the load's peak counts). Three estimates, all from GGUF metadata and the flags, are compared
with that measured peak (the reference, measured in the same run):
- specreg resident: what `bench admitted` stores per condition (`predicted_rss_bytes`);
- specreg total: what `check pair --budget` compares (every buffer llama.cpp reserves); it
  must never be below the measured peak (a budget must not pass a server that exceeds it);
- fixed-overhead anchor: weights + f16 KV + 600 MB, modelinfo-cli's method.

Models: the factory's tiny model (392-token vocabulary) and tiny weights under llama.cpp's own
tokenizers (models/ggml-vocab-*.gguf: llama-spm 32k SPM, qwen2 152k BPE, gemma-4 262k), built so
that their output loops with a period of 64 tokens (specreg.testing.factory.CYCLER), so n-gram
and draft methods really draft in full; and the real SmolLM2-135M pair (F16 target, Q4_1 draft)
when the cache has it or --fetch is given.

Usage: python benchmarks/bench_memory.py [--models tiny,spm,qwen2,gemma4,smollm2] [--fetch]
       [--requests N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from specreg.benchmark.client import LlamaClient
from specreg.benchmark.workloads import load_workload
from specreg.gguf.reader import open_gguf
from specreg.schemas.bench import ConditionSpec, WorkloadItem
from specreg.schemas.memory import ServeSettings
from specreg.servers.launcher import bundled_command, launch
from specreg.servers.memory import GpuProbe, MemorySampler
from specreg.servers.memory_predict import predict_rss
from specreg.testing import ModelSpec, write_model
from specreg.testing.factory import CYCLER, LOOP_TEXT, SMALL_NOISE
from specreg.validators.memory_budget import estimate, model_facts
from specreg.validators.ruleset import load_rule_set

MIB = 1 << 20
ANCHOR_OVERHEAD = 600 * 1000 * 1000  # modelinfo-cli: a fixed 600 MB on top of weights and KV
REQUEST_TOKENS = 32
# one request every n-gram method drafts on in full (ngram-simple needs 12 + 48 tokens of a
# repeated passage, ngram-mod 24 + 48 and a chunk of 32 added late): 256 new tokens leave room
# for a full-length draft of every method after that
REPEAT = WorkloadItem(id="repeat", stratum="repeat", prompt=LOOP_TEXT * 3, max_tokens=256)
VOCABS = {"spm": "llama-spm", "qwen2": "qwen2", "gemma4": "gemma-4"}
METHODS = ("none", "ngram-simple", "ngram-mod", "draft-simple")


@dataclass
class Condition:
    model: str
    label: str
    target: str
    draft: str | None
    method: str
    flags: list[str]


def _family(model: str, target: str, draft: str) -> list[Condition]:
    """Every method on the target, then the draft file on its own (a single load)."""
    out = [Condition(model, m, target, draft if m.startswith("draft") else None, m, ["-c", "4096"]) for m in METHODS]
    out.append(Condition(model, "draft file alone", draft, None, "none", ["-c", "4096"]))
    return out


def _conditions(folder: Path, models: list[str], fetch: bool) -> list[Condition]:
    out: list[Condition] = []
    if "tiny" in models:
        base = ModelSpec()
        tiny = str(write_model(folder / "tiny.gguf", base))
        tiny_d = str(write_model(folder / "tiny-draft.gguf", base.but(noise=SMALL_NOISE)))
        wide_spec = base.but(n_embd=512, n_layer=8, n_head=8, n_head_kv=2, n_ff=1536)
        wide16 = str(write_model(folder / "wide-f16.gguf", wide_spec.but(file_type="f16")))
        out += _family("tiny", tiny, tiny_d)
        out += [
            Condition("tiny", "-c 16384 -np 4", tiny, None, "none", ["-c", "16384", "-np", "4"]),
            Condition("wide f16", "q8_0 KV", wide16, None, "none", ["-c", "8192", "-ctk", "q8_0", "-ctv", "q8_0"]),
        ]  # fmt: skip
    vocab_models = [m for m in models if m in VOCABS]
    if vocab_models:
        from specreg.testing.realvocab import ensure_vocab_files

        vocab_dir = ensure_vocab_files()
        for name in vocab_models:
            source = str(vocab_dir / f"ggml-vocab-{VOCABS[name]}.gguf")
            spec = CYCLER.but(tokenizer_from=source, file_type="f16")
            target = str(write_model(folder / f"{name}.gguf", spec))
            draft = str(write_model(folder / f"{name}-draft.gguf", spec.but(n_layer=1)))
            out += _family(f"{VOCABS[name]} vocab", target, draft)
    if "smollm2" in models:
        from specreg.testing import realmodel

        paths = {v: (realmodel.ensure_model(v) if fetch else realmodel.cached(v)) for v in ("f16", "q4_1", "q8_0")}
        if all(paths.values()):
            out += _family("SmolLM2-135M", str(paths["f16"]), str(paths["q4_1"]))
            out.append(Condition("SmolLM2-135M", "Q8_0 alone", str(paths["q8_0"]), None, "none", ["-c", "4096"]))
        else:
            print("SmolLM2 pair not in the cache: skipped (--fetch downloads it once)")
    return out


def _flag(flags: list[str], name: str, default: str) -> str:
    return flags[flags.index(name) + 1] if name in flags else default


def _measure(c: Condition, folder: Path, items: list[WorkloadItem], gpu: GpuProbe, n: int) -> int:
    argv = ["-m", c.target, *(["-md", c.draft] if c.draft else []), "--spec-type", c.method, *c.flags]
    server = launch(bundled_command(), argv, folder / f"{n}.log", start_timeout_s=300)
    try:
        with LlamaClient(server.base_url) as client, MemorySampler(server.pids, gpu) as sampler:
            for it in items:
                client.complete(it, max_tokens=it.max_tokens, seed=42)
    finally:
        server.stop()
    return sampler.peak_rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny,spm,qwen2,gemma4,smollm2", help="comma-separated model families")
    ap.add_argument("--fetch", action="store_true", help="download the SmolLM2 pair if the cache lacks it")
    ap.add_argument("--requests", type=int, default=None, help="serve only the first N default items (+ the repeat)")
    args = ap.parse_args()
    rules = load_rule_set()
    default = load_workload("default").items[: args.requests]
    items = [it.model_copy(update={"max_tokens": REQUEST_TOKENS}) for it in default] + [REPEAT]
    gpu = GpuProbe()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for c in _conditions(folder, args.models.split(","), args.fetch):
            peak = _measure(c, folder, items, gpu, len(rows))
            settings = ServeSettings(
                ctx_size=int(_flag(c.flags, "-c", "4096")),
                slots=int(_flag(c.flags, "-np", "1")),
                cache_type_k=_flag(c.flags, "-ctk", "f16"),
                cache_type_v=_flag(c.flags, "-ctv", "f16"),
                method=c.method,
            )
            spec = ConditionSpec(name=c.label, method=c.method, draft_path=c.draft)
            resident = predict_rss(
                spec, c.target, ctx_size=settings.ctx_size, slots=settings.slots, gpu_layers=None, items=items,
                max_tokens=None, cache_type_k=settings.cache_type_k, cache_type_v=settings.cache_type_v,
            )  # fmt: skip
            files = [open_gguf(c.target), open_gguf(c.draft) if c.draft else None]
            total = estimate(files[0], files[1], settings, rules).total_bytes
            f16 = settings.model_copy(update={"cache_type_k": "f16", "cache_type_v": "f16"})
            anchor = ANCHOR_OVERHEAD + sum(
                estimate(f, None, f16, rules).kv_bytes + model_facts(f, rules).weights for f in files if f is not None
            )
            rows.append((c.model, c.label, peak, resident, total, anchor))
            print(f"  measured {c.model} / {c.label}: {peak / MIB:.1f} MiB", flush=True)
    gpu.close()

    def err(pred: int | None, meas: int) -> float:
        return float("nan") if pred is None else (pred - meas) / meas * 100

    print(f"{'model':16} {'condition':18} {'measured':>8} {'resident':>15} {'total':>15} {'600 MB anchor':>16}")
    for model, label, meas, res, tot, anc in rows:
        cells = [f"{p / MIB:7.1f} {err(p, meas):+6.1f}%" for p in (res or 0, tot, anc)]
        print(f"{model:16} {label:18} {meas / MIB:8.1f} {cells[0]:>15} {cells[1]:>15} {cells[2]:>16}")
    print("(MiB, error %)")
    for model in dict.fromkeys(r[0] for r in rows):
        errs = [abs(err(r[3], r[2])) for r in rows if r[0] == model]
        print(f"{model:16} resident: mean |error| {statistics.mean(errs):5.1f}%  max |error| {max(errs):5.1f}%")
    for name, k in (("resident", 3), ("total", 4), ("anchor", 5)):
        errs = [abs(err(r[k], r[2])) for r in rows]
        print(f"all models {name:9} mean |error| {statistics.mean(errs):6.1f}%  max |error| {max(errs):6.1f}%")
    under = [f"{r[0]} / {r[1]}" for r in rows if r[4] < r[2]]
    print("total below the measured peak (a budget would pass it): " + (", ".join(under) if under else "none"))
    print("reference: peak RSS of the bundled server's process tree measured in this run")


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_memory`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "memory"))
