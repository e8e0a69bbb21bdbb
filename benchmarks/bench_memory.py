"""Predicted vs measured memory under standard workloads, per model family and server condition:
how far the metadata estimate is from the bundled server's peak RSS after serving real prompts.

For each family, workload and condition the bundled llama.cpp server is started with the
condition's flags (llama.cpp's defaults otherwise: --cache-ram 8192, --ctx-checkpoints 32),
serves the workload's prompts once, one after another, as `bench` sends them, and its process
tree's peak RSS is taken (the benchmark's own MemorySampler: sampled RSS and the kernel's
high-water mark). Three estimates, from GGUF metadata, the flags and the requests as served
(each prompt's tokens on the server, its output's length, the tokens the server drafted for it:
its timings' draft_n, which sizes the verification batches' logits), are compared with that
measured peak (the reference, measured in the same run):
- specreg resident: what `bench` stores per condition (`predicted_rss_bytes`): the load, the
  buffers the requests touch, and the prompt cache and context checkpoints they leave held;
  within 5% of the measured peak is the target, and never below it once the 5% is added;
- specreg total: what `check pair --budget` compares (every buffer llama.cpp reserves, the
  prompt cache up to --cache-ram, every checkpoint a slot may keep); never below the peak;
- fixed-overhead anchor: weights + f16 KV + 600 MB, modelinfo-cli's method.

Workloads: mt-bench, humaneval and a sharegpt sample (specreg/benchmark/workloads/standard.py; fetched
once with `specreg workloads fetch NAME`, skipped when not cached), the first --requests prompts
of each, at most --max-tokens new tokens each. Families (all by default): the factory's tiny model; tiny weights
under llama.cpp's own tokenizers (llama-spm 32k, qwen2 152k, gemma-4 262k); two tiny
sliding-window families llama.cpp serves with an iSWA cache and context checkpoints (gemma2:
every 2nd layer windowed; gemma3: 5 of 6; a 64-token window, so prompts pass it); a tiny mamba
(recurrent state and its context checkpoints, no KV cache); and the real
SmolLM2-135M pair (F16 target, Q4_1 draft) when the cache has it or --fetch is given.

Usage: python benchmarks/bench_memory.py [--models tiny,spm,qwen2,gemma4,gemma2-swa,gemma3-swa,mamba,smollm2]
       [--workloads mt-bench,humaneval,sharegpt] [--requests N] [--max-tokens N] [--fetch]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from specreg.benchmark.run.client import LlamaClient
from specreg.benchmark.workloads.jsonl import load_workload
from specreg.benchmark.workloads.standard import is_cached, standard_set
from specreg.gguf.reader import open_gguf
from specreg.schemas.bench import ConditionSpec, WorkloadItem
from specreg.schemas.memory import ServeSettings
from specreg.servers.launcher import bundled_command, launch
from specreg.servers.memory import GpuProbe, MemorySampler
from specreg.servers.memory_predict import predict_rss
from specreg.testing import ModelSpec, write_model
from specreg.testing.factory import recurrent_spec, sliding_window_spec
from specreg.testing.modelspec import CYCLER, SMALL_NOISE
from specreg.validators.memory_budget import BUDGET_MARGIN, estimate
from specreg.validators.memory_facts import model_facts
from specreg.validators.memory_served import Served
from specreg.validators.ruleset import load_rule_set

MIB = 1 << 20
ANCHOR_OVERHEAD = 600 * 1000 * 1000  # modelinfo-cli: a fixed 600 MB on top of weights and KV
VOCABS = {"spm": "llama-spm", "qwen2": "qwen2", "gemma4": "gemma-4"}
# every family of the test data (the default: a rerun covers them all)
FAMILIES = ("tiny", *VOCABS, "gemma2-swa", "gemma3-swa", "mamba", "smollm2")
METHODS = ("none", "ngram-simple", "ngram-mod", "draft-simple")
CTX = 4096


@dataclass
class Condition:
    model: str
    label: str
    target: str
    draft: str | None
    method: str
    flags: list[str]


def _family(model: str, target: str, draft: str, methods: tuple[str, ...] = METHODS) -> list[Condition]:
    """Every method on the target, then the draft file on its own (a single load)."""
    ctx = ["-c", str(CTX)]
    out = [Condition(model, m, target, draft if m.startswith("draft") else None, m, ctx) for m in methods]
    out.append(Condition(model, "draft file alone", draft, None, "none", ctx))
    return out


def _conditions(folder: Path, models: list[str], fetch: bool) -> list[Condition]:
    out: list[Condition] = []
    if "tiny" in models:
        base = ModelSpec()
        tiny = str(write_model(folder / "tiny.gguf", base))
        tiny_d = str(write_model(folder / "tiny-draft.gguf", base.but(noise=SMALL_NOISE)))
        out += _family("tiny", tiny, tiny_d)
        out.append(Condition("tiny", "-c 16384 -np 4", tiny, None, "none", ["-c", "16384", "-np", "4"]))
    for name, arch in (("gemma2-swa", "gemma2"), ("gemma3-swa", "gemma3")):
        if name in models:
            spec = sliding_window_spec(arch, base=CYCLER.but(file_type="f16"))
            target = str(write_model(folder / f"{name}.gguf", spec))
            draft = str(write_model(folder / f"{name}-draft.gguf", sliding_window_spec(arch, n_layer=2, base=CYCLER)))
            out += _family(f"{arch} SWA", target, draft, ("none", "ngram-simple", "draft-simple"))
            out.append(Condition(f"{arch} SWA", "--swa-full", target, None, "none", ["-c", str(CTX), "--swa-full"]))
    if "mamba" in models:  # recurrent: a state per slot and its context checkpoints, no KV cache
        target = str(write_model(folder / "mamba.gguf", recurrent_spec(n_layer=4)))  # f32: ssm_conv / ssm_scan
        draft = str(write_model(folder / "mamba-draft.gguf", recurrent_spec(n_layer=1)))
        out += _family("mamba", target, draft, ("none", "ngram-simple", "draft-simple"))
        out.append(Condition("mamba", "-c 16384 -np 4", target, None, "none", ["-c", "16384", "-np", "4"]))
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

        paths = {v: (realmodel.ensure_model(v) if fetch else realmodel.cached(v)) for v in ("f16", "q4_1")}
        if all(paths.values()):
            out += _family("SmolLM2-135M", str(paths["f16"]), str(paths["q4_1"]))
        else:
            print("SmolLM2 pair not in the cache: skipped (--fetch downloads it once)")
    return out


def _flag(flags: list[str], name: str, default: str) -> str:
    return flags[flags.index(name) + 1] if name in flags else default


def _settings(c: Condition) -> ServeSettings:
    return ServeSettings(
        ctx_size=int(_flag(c.flags, "-c", str(CTX))),
        slots=int(_flag(c.flags, "-np", "1")),
        method=c.method,
        swa_full="--swa-full" in c.flags,
    )


def _measure(c: Condition, folder: Path, items: list[WorkloadItem], gpu: GpuProbe, n: int) -> tuple[int, list[Served]]:
    """Peak RSS of one server serving `items` once, and the requests as it counted them."""
    argv = ["-m", c.target, *(["-md", c.draft] if c.draft else []), "--spec-type", c.method, *c.flags]
    server = launch(bundled_command(), argv, folder / f"{n}.log", start_timeout_s=300)
    served = []
    try:
        with LlamaClient(server.base_url) as client, MemorySampler(server.pids, gpu) as sampler:
            for it in items:
                prompt = client.input_tokens(it)
                done = client.complete(it, max_tokens=it.max_tokens, seed=42)
                if not done.ok:  # refused (longer than a slot's context): tokenized, nothing decoded
                    print(f"  {c.model} / {it.id}: refused, {prompt} tokens ({(done.error or '')[:40]})")
                    served.append(Served(it.id, prompt, prompt, it.messages is not None, refused=True))
                    continue
                total = prompt + max(0, (done.output_tokens or 0) - 1)  # the last token is never decoded
                served.append(Served(it.id, prompt, total, it.messages is not None, drafted=done.drafted))
    finally:
        server.stop()
    return sampler.peak_rss, served


def _workloads(names: list[str], requests: int, max_tokens: int) -> dict[str, list[WorkloadItem]]:
    out = {}
    for name in names:
        if not is_cached(standard_set(name)):
            print(f"workload {name} not cached: skipped (specreg workloads fetch {name})")
            continue
        items = load_workload(name, sample=None if name != "sharegpt" else 2, seed=0, ctx_tokens=CTX).items
        out[name] = [it.model_copy(update={"max_tokens": min(max_tokens, it.max_tokens)}) for it in items[:requests]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", default=",".join(FAMILIES), help="comma-separated families (default: all)")
    ap.add_argument("--workloads", default="mt-bench,humaneval,sharegpt", help="comma-separated standard sets")
    ap.add_argument("--requests", type=int, default=8, help="prompts served per workload (the first N)")
    ap.add_argument("--max-tokens", type=int, default=128, help="new tokens per request at most")
    ap.add_argument("--fetch", action="store_true", help="download the SmolLM2 pair if the cache lacks it")
    args = ap.parse_args()
    unknown = sorted(set(args.models.split(",")) - set(FAMILIES))
    if unknown:
        raise SystemExit(f"--models: unknown {', '.join(unknown)} (families: {', '.join(FAMILIES)})")
    rules = load_rule_set()
    workloads = _workloads(args.workloads.split(","), args.requests, args.max_tokens)
    gpu = GpuProbe()
    rows = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        conditions = _conditions(folder, args.models.split(","), args.fetch)
        for wname, items in workloads.items():
            for c in conditions:
                peak, served = _measure(c, folder, items, gpu, len(rows))
                settings = _settings(c)
                spec = ConditionSpec(name=c.label, method=c.method, draft_path=c.draft)
                resident = predict_rss(
                    spec, c.target, ctx_size=settings.ctx_size, slots=settings.slots, gpu_layers=None, items=items,
                    max_tokens=None, served=served, settings=settings, in_flight=1,
                )  # fmt: skip
                files = [open_gguf(c.target), open_gguf(c.draft) if c.draft else None]
                total = estimate(files[0], files[1], settings, rules).total_bytes
                anchor = ANCHOR_OVERHEAD + sum(
                    estimate(f, None, settings, rules).kv_bytes + model_facts(f, rules).weights
                    for f in files
                    if f is not None
                )
                rows.append((c.model, wname, c.label, peak, resident, total, anchor))
                err = (resident - peak) / peak * 100 if resident else float("nan")
                print(f"  {c.model} / {wname} / {c.label}: {peak / MIB:.1f} MiB measured, {err:+.1f}%", flush=True)
    gpu.close()
    load1 = os.getloadavg()[0]

    def err(pred: int | None, meas: int) -> float:
        return float("nan") if pred is None else (pred - meas) / meas * 100

    print(f"\n{'model':14} {'workload':9} {'condition':16} {'measured':>8} {'resident':>14} {'total':>9}")
    for model, wname, label, meas, res, tot, _ in rows:
        cell = f"{(res or 0) / MIB:7.1f} {err(res, meas):+5.1f}%"
        print(f"{model:14} {wname:9} {label:16} {meas / MIB:8.1f} {cell:>14} {tot / MIB:9.0f}")
    print("(MiB; resident: error against the measured peak; total: what --budget compares)")
    print(f"\nworst errors of the resident prediction per family (target: within {BUDGET_MARGIN:.0%}):")
    for model in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == model]
        errs = [err(r[4], r[3]) for r in mine]
        lo = min(range(len(mine)), key=lambda i: errs[i])
        hi = max(range(len(mine)), key=lambda i: errs[i])
        print(
            f"  {model:14} {len(mine):3} conditions  worst under {errs[lo]:+5.1f}% ({mine[lo][1]} / {mine[lo][2]})"
            f"  worst over {errs[hi]:+5.1f}% ({mine[hi][1]} / {mine[hi][2]})"
        )
    for name, k in (("resident", 4), ("anchor", 6)):
        errs = [abs(err(r[k], r[3])) for r in rows]
        if errs:
            print(f"all models {name:9} max |error| {max(errs):6.1f}%")
    short = [f"{r[0]} / {r[1]} / {r[2]}" for r in rows if r[4] is None or r[4] * (1 + BUDGET_MARGIN) < r[3]]
    print(f"resident + {BUDGET_MARGIN:.0%} below the measured peak: " + (", ".join(short) if short else "none"))
    under = [f"{r[0]} / {r[1]} / {r[2]}" for r in rows if r[5] < r[3]]
    print("total below the measured peak (a budget would pass it): " + (", ".join(under) if under else "none"))
    print(
        "reference: peak RSS of the bundled server's process tree measured in this run; "
        f"load {load0:.1f} -> {load1:.1f}"
    )


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_memory`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "memory"))
