"""Runner overhead on loopback, and the wall time of a full tiny-model benchmark run.

1. Client overhead per request = client total ms - (server prompt_ms + predicted_ms), for
   specreg's streaming client and, as the reference measured in the same run against the same
   server, a bare `http.client` loop that only splits SSE lines. Target: median <= 3 ms.
2. `Runner.bench` on two admitted tiny pairs (identical-weights and small-noise drafts) with the
   built-in default workload: wall time, and how much of it was server start-up, server compute
   and everything else.

Usage: python benchmarks/bench_runner.py [--requests 60]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from specreg.benchmark.run.client import LlamaClient
from specreg.benchmark.workloads.jsonl import load_workload
from specreg.schemas.bench import WorkloadItem
from specreg.servers.launcher import bundled_command, launch
from specreg.testing import ModelSpec, write_model
from specreg.testing.modelspec import SMALL_NOISE


def _bare(port: int, item: WorkloadItem, max_tokens: int) -> tuple[float, dict[str, float]]:
    """The reference client: stdlib http.client, read SSE lines, json-decode the final event only."""
    body = json.dumps(
        {
            "prompt": item.prompt,
            "n_predict": max_tokens,
            "temperature": 0,
            "seed": 42,
            "stream": True,
            "cache_prompt": False,
        }
    )
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/completion", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    timings: dict[str, float] = {}
    for raw in resp:
        if raw.startswith(b"data:") and b'"stop":true' in raw:
            timings = json.loads(raw[5:])["timings"]
    conn.close()
    return (time.perf_counter() - t0) * 1000.0, timings


def overhead(folder: Path, n: int) -> None:
    target = write_model(folder / "t.gguf", ModelSpec(n_ctx=2048))  # the default workload's long inputs fit
    items = [i for i in load_workload("default").items if i.prompt is not None]
    server = launch(
        bundled_command(),
        ["-m", str(target), "-c", "2048", "-t", "1", "--metrics"],
        folder / "overhead.log",
        start_timeout_s=60,
    )
    ours: list[float] = []
    bare: list[float] = []
    try:
        with LlamaClient(server.base_url) as client:
            for k in range(3):  # warm-up, not counted
                client.complete(items[k % len(items)], max_tokens=8, seed=42)
            for k in range(n):
                item = items[k % len(items)]
                c = client.complete(item, max_tokens=32, seed=42)
                assert c.ok and c.total_ms is not None, c.error
                ours.append(c.total_ms - (c.timings["prompt_ms"] + c.timings["predicted_ms"]))
                total, t = _bare(server.port, item, 32)
                bare.append(total - (t["prompt_ms"] + t["predicted_ms"]))
    finally:
        server.stop()
    med_ours, med_bare = statistics.median(ours), statistics.median(bare)
    p95 = sorted(ours)[int(0.95 * (len(ours) - 1))]
    print(f"client overhead per request ({n} requests, 32 tokens, loopback):")
    print(f"  specreg client   median {med_ours:6.2f} ms   p95 {p95:6.2f} ms   (target: median <= 3 ms)")
    print(f"  bare http.client median {med_bare:6.2f} ms   (reference, same server, same run)")
    print(f"  ratio specreg / bare: {med_ours / med_bare:.2f}x" if med_bare > 0 else "  ratio: n/a")


def full_run(folder: Path) -> None:
    from specreg.benchmark.run.runner import Runner
    from specreg.registry.store import Registry
    from specreg.schemas.bench_settings import BenchSettings
    from specreg.sources.checking import check_and_record
    from specreg.validators.ruleset import load_rule_set

    os.environ["SPECREG_HOME"] = str(folder / "home")
    rules = load_rule_set()
    target = write_model(folder / "target.gguf", ModelSpec())
    drafts = [
        write_model(folder / "same.gguf", ModelSpec(name="tiny-draft")),
        write_model(folder / "noisy.gguf", ModelSpec(name="tiny-noisy", noise=SMALL_NOISE)),
    ]
    with Registry(folder / "r.db", show_progress=False) as reg:
        ids = [check_and_record(reg, target, d, "draft-simple", rule_set=rules).pair_id for d in drafts]
        t0 = time.perf_counter()
        runs = Runner(reg, BenchSettings(workload="default", repeat=1, threads=1, ctx_size=512)).bench(ids)
        wall = time.perf_counter() - t0
    n_req = sum(len(r.requests) for r in runs)
    n_cond = sum(len(r.conditions) for r in runs)
    compute = sum((q.prompt_ms or 0) + (q.predicted_ms or 0) for r in runs for q in r.requests) / 1000
    client = sum(q.total_ms or 0 for r in runs for q in r.requests) / 1000
    print(f"full tiny-model run: {len(runs)} pairs, {n_cond} conditions (fresh server each), {n_req} requests")
    print(
        f"  wall {wall:.2f} s = measured requests {client:.2f} s (server compute {compute:.2f} s) "
        f"+ server start/stop, warm-up, tokenize, /metrics, writes {wall - client:.2f} s"
    )
    for r in runs:
        for c in r.conditions:
            acc = c.counters.acceptance if c.counters else None
            print(
                f"  {r.info.run_id} {c.spec.name:13s} {c.status:7s} acceptance "
                f"{'n/a' if acc is None else f'{acc:.2f}'}  {c.failure or ''}"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=60)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="specreg-bench-runner-") as tmp:
        overhead(Path(tmp), args.requests)
        full_run(Path(tmp))
    return 0


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_runner`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "runner"))
