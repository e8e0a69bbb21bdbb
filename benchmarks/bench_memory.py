"""Predicted vs measured memory, per server condition: how far the metadata estimate is from peak RSS.

For each condition the bundled llama.cpp server is started with the condition's flags, serves the
built-in default workload once (32 tokens per request), and its process tree's peak RSS is
sampled (the benchmark's own MemorySampler). Three estimates, all from GGUF metadata and the
flags, are compared with that measured peak (the reference, measured in the same run):
- specreg resident: what `bench admitted` stores per condition (`predicted_rss_bytes`);
- specreg total: what `check pair --budget` compares (every buffer llama.cpp reserves);
- fixed-overhead anchor: weights + f16 KV + 600 MB, modelinfo-cli's method.

Tiny models from specreg.testing only unless --pair TARGET DRAFT names real GGUFs (e.g. the
SmolLM2 pair once a fetcher provides it).

Usage: python benchmarks/bench_memory.py [--pair TARGET.gguf DRAFT.gguf]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from specreg.benchmark.client import LlamaClient
from specreg.benchmark.workloads import load_workload
from specreg.gguf.reader import open_gguf
from specreg.schemas.bench import ConditionSpec
from specreg.schemas.memory import ServeSettings
from specreg.servers.launcher import bundled_command, launch
from specreg.servers.memory import GpuProbe, MemorySampler
from specreg.servers.memory_predict import predict_rss
from specreg.testing import ModelSpec, write_model
from specreg.testing.factory import SMALL_NOISE
from specreg.validators.memory_budget import estimate, model_facts
from specreg.validators.ruleset import load_rule_set

MIB = 1 << 20
ANCHOR_OVERHEAD = 600 * 1000 * 1000  # modelinfo-cli: a fixed 600 MB on top of weights and KV
REQUEST_TOKENS = 32


def _conditions(folder: Path, pair: tuple[str, str] | None) -> list[tuple[str, str, str | None, str, list[str]]]:
    """(label, target, draft, method, extra flags)."""
    base = ModelSpec()
    tiny = str(write_model(folder / "tiny.gguf", base))
    tiny_d = str(write_model(folder / "tiny-draft.gguf", base.but(noise=SMALL_NOISE)))
    wide_spec = base.but(n_embd=512, n_layer=8, n_head=8, n_head_kv=2, n_ff=1536)
    wide = str(write_model(folder / "wide.gguf", wide_spec))
    wide16 = str(write_model(folder / "wide-f16.gguf", wide_spec.but(file_type="f16")))
    wide_d = str(write_model(folder / "wide-draft.gguf", wide_spec.but(n_layer=2, noise=SMALL_NOISE)))
    out: list[tuple[str, str, str | None, str, list[str]]] = [
        ("tiny -c 4096", tiny, None, "none", ["-c", "4096"]),
        ("tiny -c 16384", tiny, None, "none", ["-c", "16384"]),
        ("tiny -c 16384 -np 4", tiny, None, "none", ["-c", "16384", "-np", "4"]),
        ("tiny draft-simple", tiny, tiny_d, "draft-simple", ["-c", "4096"]),
        ("tiny ngram-simple", tiny, None, "ngram-simple", ["-c", "4096"]),
        ("tiny ngram-mod", tiny, None, "ngram-mod", ["-c", "4096"]),
        ("wide f32 -c 4096", wide, None, "none", ["-c", "4096"]),
        ("wide f16 -c 8192 q8_0 KV", wide16, None, "none", ["-c", "8192", "-ctk", "q8_0", "-ctv", "q8_0"]),
        ("wide draft-simple", wide, wide_d, "draft-simple", ["-c", "4096"]),
    ]
    if pair is not None:
        t, d = pair
        out += [
            ("pair none -c 4096", t, None, "none", ["-c", "4096"]),
            ("pair draft-simple -c 4096", t, d, "draft-simple", ["-c", "4096"]),
        ]
    return out


def _flag(flags: list[str], name: str, default: str) -> str:
    return flags[flags.index(name) + 1] if name in flags else default


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", nargs=2, metavar=("TARGET", "DRAFT"), help="also measure a real target/draft pair")
    args = ap.parse_args()
    rules = load_rule_set()
    items = [i for i in load_workload("default").items]
    gpu = GpuProbe()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for label, target, draft, method, flags in _conditions(folder, tuple(args.pair) if args.pair else None):
            argv = ["-m", target, *(["-md", draft] if draft else []), "--spec-type", method, *flags]
            server = launch(bundled_command(), argv, folder / f"{len(rows)}.log", start_timeout_s=120)
            try:
                with LlamaClient(server.base_url) as client, MemorySampler(server.pids, gpu) as sampler:
                    for it in items:
                        client.complete(it, max_tokens=REQUEST_TOKENS, seed=42)
            finally:
                server.stop()
            settings = ServeSettings(
                ctx_size=int(_flag(flags, "-c", "4096")),
                slots=int(_flag(flags, "-np", "1")),
                cache_type_k=_flag(flags, "-ctk", "f16"),
                cache_type_v=_flag(flags, "-ctv", "f16"),
                method=method,
            )
            spec = ConditionSpec(name=label, method=method, draft_path=draft)
            resident = predict_rss(
                spec, target, ctx_size=settings.ctx_size, slots=settings.slots, gpu_layers=None, items=items,
                max_tokens=REQUEST_TOKENS, cache_type_k=settings.cache_type_k, cache_type_v=settings.cache_type_v,
            )  # fmt: skip
            files = [open_gguf(target), open_gguf(draft) if draft else None]
            total = estimate(files[0], files[1], settings, rules).total_bytes
            f16 = settings.model_copy(update={"cache_type_k": "f16", "cache_type_v": "f16"})
            anchor = ANCHOR_OVERHEAD + sum(
                estimate(f, None, f16, rules).kv_bytes + model_facts(f, rules).weights for f in files if f is not None
            )
            rows.append((label, sampler.peak_rss, resident, total, anchor))
    gpu.close()

    def err(pred: int | None, meas: int) -> float:
        return float("nan") if pred is None else (pred - meas) / meas * 100

    print(f"{'condition':28} {'measured':>9} {'resident':>16} {'total':>16} {'600 MB anchor':>16}  (MiB, error %)")
    for label, meas, res, tot, anc in rows:
        cells = [f"{p / MIB:8.1f} {err(p, meas):+6.1f}%" for p in (res or 0, tot, anc)]
        print(f"{label:28} {meas / MIB:9.1f} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16}")
    for name, k in (("resident", 2), ("total", 3), ("anchor", 4)):
        errs = [abs(err(r[k], r[1])) for r in rows]
        print(f"{name:9} mean |error| {statistics.mean(errs):6.1f}%  max |error| {max(errs):6.1f}%")
    print("reference: peak RSS of the bundled server's process tree measured in this run")


if __name__ == "__main__":
    main()
