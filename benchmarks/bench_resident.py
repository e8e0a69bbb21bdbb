"""`check pair`'s first memory line against a real server: what it holds once started and after
one request, beside what the line predicts it holds from the start and while serving.

The line a person reads first (issue 47) is "resident R; up to T if the prompt cache fills
(--cache-ram N, llama.cpp's default)": R is every buffer llama.cpp reserves, the tokenizer,
the process and the HTTP threads' work at their bound; T adds what may grow to its cap. Per model
family and method, the bundled llama.cpp server is started with `-c 4096 -np 1` (llama.cpp's
defaults otherwise), its RSS read once it is healthy, then one request is served whose prompt
fills more than a micro-batch (so the compute buffer is touched as far as a prompt touches it)
and its process tree's peak RSS taken (the benchmark's own MemorySampler: sampled RSS and the
kernel's high-water mark). After one request the prompt cache holds nothing yet (a slot is saved
when the next request takes it), so the measured peak is what R predicts. The reference is that
measured peak, in the same run.

Families: the factory's tiny llama model; a tiny gemma3 whose layers are 5 of 6 sliding-window
(an iSWA cache and context checkpoints); and, when the cache has it or --fetch is given, the real
SmolLM2-135M pair (F32 target, Q4_1 draft).

Usage: python benchmarks/bench_resident.py [--models tiny,gemma3-swa,smollm2] [--fetch]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil

from specreg.benchmark.run.client import LlamaClient
from specreg.gguf.reader import open_gguf
from specreg.schemas.bench import WorkloadItem
from specreg.schemas.memory import ServeSettings
from specreg.servers.launcher import bundled_command, launch
from specreg.servers.memory import GpuProbe, MemorySampler
from specreg.testing import ModelSpec, write_model
from specreg.testing.factory import sliding_window_spec
from specreg.testing.modelspec import CYCLER, SMALL_NOISE
from specreg.validators.memory_budget import BUDGET_MARGIN, estimate
from specreg.validators.memory_fit import resident_bytes
from specreg.validators.ruleset import load_rule_set

MIB = 1 << 20
CTX = 4096
FAMILIES = ("tiny", "gemma3-swa", "smollm2")
SENTENCE = "The quick brown fox jumps over the lazy dog while the cat watches from the warm window. "
PROMPT_TOKENS = 700  # more than a micro-batch (-ub 512), far less than a slot's context


@dataclass
class Case:
    family: str
    method: str
    target: str
    draft: str | None


def _cases(folder: Path, models: list[str], fetch: bool) -> list[Case]:
    out: list[Case] = []
    if "tiny" in models:
        t = str(write_model(folder / "tiny.gguf", ModelSpec(n_ctx=CTX)))
        d = str(write_model(folder / "tiny-draft.gguf", ModelSpec(n_ctx=CTX).but(noise=SMALL_NOISE)))
        out += [Case("tiny llama", "none", t, None), Case("tiny llama", "draft-simple", t, d)]
    if "gemma3-swa" in models:
        t = str(write_model(folder / "g3.gguf", sliding_window_spec("gemma3", base=CYCLER.but(file_type="f16"))))
        d = str(write_model(folder / "g3-draft.gguf", sliding_window_spec("gemma3", n_layer=2, base=CYCLER)))
        out += [Case("gemma3 SWA", "none", t, None), Case("gemma3 SWA", "draft-simple", t, d)]
    if "smollm2" in models:
        from specreg.testing import realmodel

        paths = {v: (realmodel.ensure_model(v) if fetch else realmodel.cached(v)) for v in ("f32", "q4_1")}
        if all(paths.values()):
            t, d = str(paths["f32"]), str(paths["q4_1"])
            out += [Case("SmolLM2-135M", "none", t, None), Case("SmolLM2-135M", "draft-simple", t, d)]
        else:
            print("SmolLM2 pair not in the cache: skipped (--fetch downloads it once)")
    return out


def _rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_info().rss
    return total


def _measure(c: Case, folder: Path, n: int, gpu: GpuProbe) -> tuple[int, int, int]:
    """(RSS once healthy, peak RSS over one long request, the request's prompt tokens)."""
    argv = ["-m", c.target, *(["-md", c.draft] if c.draft else []), "--spec-type", c.method, "-c", str(CTX)]
    server = launch(bundled_command(), argv, folder / f"{n}.log", start_timeout_s=300)
    try:
        with LlamaClient(server.base_url, timeout_s=900) as client:  # a loaded machine: slow, not broken
            started = _rss(server.pids())
            per = client.input_tokens(WorkloadItem(id="s", stratum="s", prompt=SENTENCE, max_tokens=1))
            text = SENTENCE * math.ceil(PROMPT_TOKENS / max(1, per))
            item = WorkloadItem(id="long", stratum="long", prompt=text, max_tokens=32)
            tokens = client.input_tokens(item)
            with MemorySampler(server.pids, gpu) as sampler:
                done = client.complete(item, max_tokens=32, seed=42)
                if not done.ok:
                    raise SystemExit(f"{c.family} / {c.method}: the request failed: {done.error}")
    finally:
        server.stop()
    return started, sampler.peak_rss, tokens


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", default=",".join(FAMILIES), help="comma-separated families (default: all)")
    ap.add_argument("--fetch", action="store_true", help="download the SmolLM2 pair if the cache lacks it")
    args = ap.parse_args()
    unknown = sorted(set(args.models.split(",")) - set(FAMILIES))
    if unknown:
        raise SystemExit(f"--models: unknown {', '.join(unknown)} (families: {', '.join(FAMILIES)})")
    rules = load_rule_set()
    gpu = GpuProbe()
    rows = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="specreg-resident-") as tmp:
        folder = Path(tmp)
        for n, c in enumerate(_cases(folder, args.models.split(","), args.fetch)):
            settings = ServeSettings(ctx_size=CTX, method=c.method)
            est = estimate(open_gguf(c.target), open_gguf(c.draft) if c.draft else None, settings, rules)
            started, peak, tokens = _measure(c, folder, n, gpu)
            rows.append((c, resident_bytes(est), est.total_bytes, started, peak, tokens))
            print(f"  {c.family} / {c.method}: {peak / MIB:.1f} MiB measured", flush=True)
    gpu.close()
    print(
        f"\n{'family':13} {'method':12} {'prompt':>6} {'started':>8} {'peak':>8} {'resident':>9} {'error':>7} "
        f"{'grows to':>9}"
    )
    for c, res, total, started, peak, tokens in rows:
        err = (res - peak) / peak * 100
        print(
            f"{c.family:13} {c.method:12} {tokens:6} {started / MIB:8.1f} {peak / MIB:8.1f} {res / MIB:9.1f} "
            f"{err:+6.1f}% {total / MIB:9.0f}"
        )
    print(
        "(MiB; started: RSS once healthy; peak: over one request of `prompt` tokens; resident: check pair's first "
        "line; error: resident against the peak; grows to: with the prompt cache and checkpoints at their caps)"
    )
    short = [f"{r[0].family} / {r[0].method}" for r in rows if r[1] * (1 + BUDGET_MARGIN) < r[4]]
    print(f"resident + {BUDGET_MARGIN:.0%} below the measured peak: " + (", ".join(short) if short else "none"))
    load1 = os.getloadavg()[0]
    print(f"reference: peak RSS of the bundled server measured in this run; load {load0:.1f} -> {load1:.1f}")
    return 0


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_resident`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "resident"))
