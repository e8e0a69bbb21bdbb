"""The same conditions measured by specreg's client and by a bare streaming client, interleaved.

Does specreg's client measure what another client would? For each condition one bundled
llama.cpp server is started (the demo's tiny models, or with --real the SmolLM2 pair: F32
target, Q4_1 draft); every prompt of the workload is then sent --rounds times by each client in
turn, the order of the two alternating from round to round, so both see the same server, the
same prompts and the same load. The reference is the bare client of this script: stdlib
`http.client`, one streamed `/completion` per request with the same body specreg sends, every
SSE event decoded for its text and `tokens_predicted`, timed on `time.perf_counter`:
- TTFT: request sent to the first event holding generated text;
- TPOT: (last token's arrival - TTFT) / tokens that arrived after that first event;
- E2E: request sent to the end of the stream.
specreg's client reports the same three (benchmark/client.py, docs/bench.md). Printed per
condition and client: the medians over requests; then per condition the speed-up over the
baseline from each client's medians (E2E and TPOT), and how far the two clients differ per
request (specreg - bare, median and the largest).

Usage: python benchmarks/bench_crossclient.py [--rounds 4] [--max-tokens 64] [--real]
Run it on a quiet machine: the point is two clients agreeing, not the machine's neighbours.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from specreg.benchmark.run.client import LlamaClient
from specreg.schemas.bench import WorkloadItem
from specreg.servers.launcher import bundled_command, launch

CLIENTS = ("specreg", "bare")


@dataclass
class Timed:
    """One request as a client clocked it."""

    ttft_ms: float
    tpot_ms: float | None
    e2e_ms: float
    tokens: int


@dataclass
class Condition:
    name: str
    flags: list[str]
    timed: dict[str, list[Timed]] = field(default_factory=lambda: {c: [] for c in CLIENTS})


def bare_request(port: int, item: WorkloadItem, max_tokens: int, seed: int) -> Timed:
    """The reference: one streamed /completion, the body specreg's client sends for a prompt."""
    body = json.dumps(
        {
            "prompt": item.prompt,
            "n_predict": max_tokens,
            "temperature": 0.0,
            "seed": seed,
            "stream": True,
            "cache_prompt": False,
        }
    )
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/completion", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    first: float | None = None
    last = t0
    seen = after_first = 0
    for raw in resp:
        if not raw.startswith(b"data:"):
            continue
        now = time.perf_counter()
        ev = json.loads(raw[5:])
        n = int(ev.get("tokens_predicted", seen))
        if n > seen:
            if first is None and ev.get("content"):
                first = now
            elif first is not None:
                after_first += n - seen
                last = now
            seen = n
        if ev.get("stop"):
            break
    end = time.perf_counter()
    conn.close()
    if first is None:
        raise SystemExit(f"bare client: no text from the server for {item.id}")
    tpot = (last - first) * 1000.0 / after_first if after_first else None
    return Timed((first - t0) * 1000.0, tpot, (end - t0) * 1000.0, seen)


def specreg_request(client: LlamaClient, item: WorkloadItem, max_tokens: int, seed: int) -> Timed:
    done = client.complete(item, max_tokens=max_tokens, seed=seed)
    if not done.ok or done.ttft_ms is None or done.total_ms is None:
        raise SystemExit(f"specreg client: {item.id} failed: {done.error}")
    return Timed(done.ttft_ms, done.tpot_ms, done.total_ms, done.output_tokens or 0)


def measure(cond: Condition, target: Path, items: list[WorkloadItem], args: argparse.Namespace, log: Path) -> None:
    argv = ["-m", str(target), *cond.flags, "-c", str(args.ctx), "-np", "1", "--seed", "42", "--metrics"]
    server = launch(bundled_command(), argv, log, start_timeout_s=300)
    try:
        with LlamaClient(server.base_url) as client:
            for it in items[:2]:  # warm-up, not counted
                specreg_request(client, it, 8, 42)
                bare_request(server.port, it, 8, 42)
            for r in range(args.rounds):
                for it in items:
                    order = CLIENTS if r % 2 == 0 else CLIENTS[::-1]
                    for who in order:
                        if who == "specreg":
                            cond.timed[who].append(specreg_request(client, it, args.max_tokens, 42))
                        else:
                            cond.timed[who].append(bare_request(server.port, it, args.max_tokens, 42))
    finally:
        server.stop()


def _median(xs: list[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return statistics.median(known) if known else None


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:8.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b <= 0 else f"{a / b:.3f}x"


def report(conds: list[Condition]) -> None:
    print(f"{'condition':14} {'client':8} {'requests':>8} {'TTFT ms':>8} {'TPOT ms':>8} {'E2E ms':>8}")
    med: dict[tuple[str, str], dict[str, float | None]] = {}
    for c in conds:
        for who in CLIENTS:
            rows = c.timed[who]
            m = {
                "ttft": _median([t.ttft_ms for t in rows]),
                "tpot": _median([t.tpot_ms for t in rows]),
                "e2e": _median([t.e2e_ms for t in rows]),
            }
            med[(c.name, who)] = m
            print(f"{c.name:14} {who:8} {len(rows):8} {_ms(m['ttft'])} {_ms(m['tpot'])} {_ms(m['e2e'])}")
    base = conds[0].name
    print(f"\nspeed-up over {base} (medians; E2E and TPOT), from each client:")
    for c in conds[1:]:
        parts = []
        for who in CLIENTS:
            b, s = med[(base, who)], med[(c.name, who)]
            parts.append(f"{who} E2E {_ratio(b['e2e'], s['e2e'])} TPOT {_ratio(b['tpot'], s['tpot'])}")
        print(f"  {c.name:14} " + "   ".join(parts))
    print("\nspecreg - bare, per request in the same round (ms; median, largest |difference|):")
    for c in conds:
        pairs = list(zip(c.timed["specreg"], c.timed["bare"], strict=True))
        for what in ("ttft_ms", "tpot_ms", "e2e_ms"):
            diffs = [
                getattr(s, what) - getattr(b, what)
                for s, b in pairs
                if getattr(s, what) is not None and getattr(b, what) is not None
            ]
            if diffs:
                worst = max(diffs, key=abs)
                print(f"  {c.name:14} {what[:-3]:5} median {statistics.median(diffs):+7.2f}   largest {worst:+8.2f}")
    same = all(s.tokens == b.tokens for c in conds for s, b in zip(c.timed["specreg"], c.timed["bare"], strict=True))
    print(f"tokens per request the same for both clients: {'yes' if same else 'NO'}")


def _tiny(folder: Path) -> tuple[Path, list[Condition], list[WorkloadItem]]:
    from specreg.demo import DRAFTS, NGRAM, TARGET, WORKLOAD
    from specreg.testing import write_model

    target = write_model(folder / "target.gguf", TARGET)
    name, spec, _, _ = DRAFTS[0]  # the draft built from the target's weights
    draft = write_model(folder / name, spec)
    ngram = [str(x) for k, v in NGRAM.items() if k.startswith("--spec-ngram-mod") for x in (k, v)]
    conds = [
        Condition("none", ["--spec-type", "none", "-t", "1"]),
        Condition("ngram-mod", ["--spec-type", "ngram-mod", *ngram, "-t", "1"]),
        Condition("draft-simple", ["--spec-type", "draft-simple", "-md", str(draft), "-t", "1"]),
    ]
    items = [WorkloadItem.model_validate_json(line) for line in WORKLOAD.splitlines() if line.strip()]
    return target, conds, items


def _real() -> tuple[Path, list[Condition], list[WorkloadItem]]:
    from specreg.benchmark.workloads import load_workload
    from specreg.testing import realmodel

    target, draft = realmodel.ensure_model("f32"), realmodel.ensure_model("q4_1")
    conds = [
        Condition("none", ["--spec-type", "none"]),
        Condition("draft-simple", ["--spec-type", "draft-simple", "-md", str(draft)]),
    ]
    items = [i for i in load_workload("repetitive").items if i.prompt is not None]
    return Path(target), conds, items


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="times each client sends each prompt")
    ap.add_argument("--max-tokens", type=int, default=64, help="new tokens per request at most")
    ap.add_argument("--ctx", type=int, default=1024, help="the servers' -c")
    ap.add_argument("--real", action="store_true", help="the SmolLM2 pair (fetched once) instead of tiny models")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="specreg-crossclient-") as tmp:
        folder = Path(tmp)
        target, conds, items = _real() if args.real else _tiny(folder)
        what = "SmolLM2-135M F32 + Q4_1" if args.real else "the demo's tiny models"
        print(f"{what}; {len(items)} prompts x {args.rounds} rounds per client, <= {args.max_tokens} tokens each")
        for c in conds:
            measure(c, target, items, args, folder / f"{c.name}.log")
    report(conds)
    print("reference: the bare http.client stream of this script, interleaved with specreg's client in the same run")
    return 0


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_crossclient`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "crossclient"))
