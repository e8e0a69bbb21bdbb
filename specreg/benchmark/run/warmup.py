"""Warm-up: uncounted requests after a server starts, until latency settles (bounded).

One warm-up request does not always warm a cold server (the second can still be several times
slower than a warm one), so requests repeat until two in a row agree within the tolerance, at
most `warmup` of them; the latencies and whether they settled are recorded with the condition.
"""

from __future__ import annotations

from collections.abc import Callable

from specreg.benchmark.run.client import LlamaClient
from specreg.schemas.bench import WarmupRecord, WorkloadItem
from specreg.schemas.bench_settings import BenchSettings

WARMUP_TOKENS = 32  # enough decoding to warm the same paths as a measured request, cheap to repeat


def warm_up(
    client: LlamaClient, item: WorkloadItem, o: BenchSettings, round_no: int, remaining_s: Callable[[], float]
) -> WarmupRecord:
    """Send `item` until two latencies in a row agree within `o.warmup_tolerance` (at most `o.warmup`)."""
    rec = WarmupRecord(round=round_no, tolerance=o.warmup_tolerance)
    for _ in range(o.warmup):
        c = client.complete(
            item,
            max_tokens=min(WARMUP_TOKENS, o.max_tokens or item.max_tokens),
            seed=o.seed,
            timeout_s=min(o.request_timeout_s, max(1.0, remaining_s())),
        )
        if not c.ok or c.total_ms is None:
            break  # a dead server shows up right after
        rec.latencies_ms.append(round(c.total_ms, 3))
        rec.drafted.append(c.drafted)
        if len(rec.latencies_ms) >= 2:
            a, b = rec.latencies_ms[-2:]
            rec.steady = abs(a - b) <= o.warmup_tolerance * max(a, b)
            if rec.steady:
                break
    return rec
