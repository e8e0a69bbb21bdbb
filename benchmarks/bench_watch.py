"""`specreg watch` against its three targets, on real bundled servers started from `specreg deploy`.

1. What a scrape costs the watched server: its CPU time over a stretch of back-to-back scrapes
   (`/metrics`, `/slots`, `/props`, as every window makes them) less its CPU time over an equal
   idle stretch measured just before (the reference), per scrape, as a share of one core at the
   default 15 s interval. Target: < 1%.
2. How many windows after a restart with the near-miss draft (llama.cpp refuses it at load) the
   watch reports `not speculating`. Target: <= 2.
3. An A/A soak: a pair whose acceptance differs from prompt to prompt (a random target and a
   small-noise draft), its audited workload replayed against its deployed command for N windows
   (a window's acceptance is that of the requests that finished in it: noisy); how many are
   `drifted`. Target: 0 in 200. The
   command as printed has no `-t` (production's host chooses), so only acceptance is compared;
   a second soak gives the server the bench's `-t 1` and leaves it unpinned, as the bench ran its
   servers, so the decode rate is compared too (reported beside the target: on a shared machine
   the decode rate follows the machine's load).

Steps 1 and 2 use the tests' world (tests/_watch_world.py): the demo's target and draft,
benchmarked once. Servers are pinned to one core, as in the tests, but for the soak with the
bench's threads. Usage:
python benchmarks/bench_watch.py [--windows 200] [--interval 0.5] [--scrapes 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' world and servers

DEFAULT_INTERVAL_S = 15.0


def _world(folder: Path) -> dict[str, int]:
    """The tests' world in `folder` (registry.db, policy.toml, the models): its pair ids."""
    from _watch_world import _build

    t0 = time.monotonic()
    _build(folder)
    print(f"world: demo target and draft benchmarked in {time.monotonic() - t0:.0f} s")
    pairs: dict[str, int] = json.loads((folder / "world.json").read_text())["pairs"]
    return pairs


def _noisy_world(folder: Path) -> tuple[Path, int, list[dict[str, object]]]:
    """The A/A soak's pair: a random target and a small-noise draft (acceptance differs from
    prompt to prompt, so a window's acceptance is noisy), measured on the demo's whole workload,
    two rounds. Returns the registry, the pair and the workload."""
    from _bench_helpers import admit

    from specreg.benchmark.run.runner import Runner
    from specreg.demo import WORKLOAD
    from specreg.registry.store import Registry
    from specreg.schemas.bench_settings import BenchSettings
    from specreg.sources.provenance import register
    from specreg.testing import ModelSpec, write_model
    from specreg.testing.modelspec import SMALL_NOISE

    folder.mkdir()
    t0 = time.monotonic()
    target = write_model(folder / "target.gguf", ModelSpec(name="soak-target"))
    draft = write_model(folder / "draft.gguf", ModelSpec(name="soak-draft", noise=SMALL_NOISE))
    (folder / "workload.jsonl").write_text(WORKLOAD)
    with Registry(folder / "registry.db", show_progress=False) as reg:
        for path in (target, draft):
            register(reg, path, license="apache-2.0")
        pair = admit(reg, target, draft)
        opts = BenchSettings(
            workload=str(folder / "workload.jsonl"),
            methods=["draft-simple"],
            repeat=2,
            ctx_size=512,
            threads=1,
            start_timeout_s=60,
            request_timeout_s=60,
            run_timeout_s=300,
        )
        Runner(reg, opts).bench([pair])
    print(f"soak world: a random target and a small-noise draft benchmarked in {time.monotonic() - t0:.0f} s")
    items = [json.loads(x) for x in WORKLOAD.splitlines() if x.strip()]
    return folder / "registry.db", pair, items


def _argv(db: Path, policy: Path, pair: int, port: int, *extra: str) -> list[str]:
    from _audit_world import specreg
    from _watch_world import BINARY

    args = [str(pair), *extra, "--policy", str(policy), "--server", str(BINARY), "--port", str(port)]
    code, out, err = specreg("deploy", *args, "--json", db=db)
    if code != 0:
        raise SystemExit(f"deploy refused: {out}{err}")
    argv: list[str] = json.loads(out)["argv"]
    return argv


def scrape_cost(argv: list[str], n: int) -> float:
    import psutil
    from _watch_world import server

    from specreg.benchmark.run.client import LlamaClient
    from specreg.validators.ruleset import load_rule_set
    from specreg.watch.scrape import MAX_REPLY_BYTES, scrape

    rules = load_rule_set().server
    port = argv[argv.index("--port") + 1]
    gap = 0.25
    with server(argv) as proc, LlamaClient(f"http://127.0.0.1:{port}", max_response_bytes=MAX_REPLY_BYTES) as c:
        p = psutil.Process(proc.pid)
        time.sleep(1.0)  # past the start's own work

        def cpu() -> float:
            t = p.cpu_times()
            return t.user + t.system

        a = cpu()
        time.sleep(n * gap)
        idle = cpu() - a
        b = cpu()
        for _ in range(n):
            s = scrape(c, rules.metrics, rules.slot_speculative)
            assert s.problem is None, s.problem
            time.sleep(gap)
        busy = cpu() - b
    per = max(0.0, busy - idle) / n
    share = per / DEFAULT_INTERVAL_S
    print(f"1. scrape cost: {n} scrapes, server CPU {busy * 1000:.0f} ms; reference: idle over the same time")
    print(f"   {idle * 1000:.0f} ms -> {per * 1000:.2f} ms per scrape = {share:.4%} of one core at the default")
    print(f"   {DEFAULT_INTERVAL_S:g} s interval (target < 1%): {'met' if share < 0.01 else 'MISSED'}")
    return share


def not_speculating(argv: list[str], near_miss: Path, db: Path, policy: Path, items: list[dict[str, object]]) -> int:
    from _watch_world import server, traffic

    from specreg.audit.policy import load_policy
    from specreg.registry.store import Registry
    from specreg.watch.watcher import Watcher

    port = int(argv[argv.index("--port") + 1])
    md = argv.index("-md") + 1
    near = [*argv[:md], str(near_miss), *argv[md + 1 :]]
    pol, source = load_policy(policy)
    with Registry(db, show_progress=False) as reg, traffic(port, items):
        w = Watcher(f"http://127.0.0.1:{port}", reg, pol, source, stratum="repetitive", timeout_s=10)
        with server(argv):
            w.first()
            for _ in range(2):
                time.sleep(1.0)
                before = w.window()
        took = 0
        with server(near):
            while took < 10:
                time.sleep(1.0)
                took += 1
                if w.window().state == "not speculating":
                    break
        w.close()
    print(f"2. not speculating: the audited server held ({before.state}); restarted with the near-miss draft,")
    print(f"   reported after {took} window(s) (target <= 2): {'met' if took <= 2 else 'MISSED'}")
    return took


def soak(
    argv: list[str],
    db: Path,
    policy: Path,
    items: list[dict[str, object]],
    windows: int,
    pause: float,
    *,
    bench_threads: bool,
) -> int:
    from _watch_world import server, traffic

    from specreg.audit.policy import load_policy
    from specreg.registry.store import Registry
    from specreg.watch.watcher import Watcher

    port = int(argv[argv.index("--port") + 1])
    pol, source = load_policy(policy)
    states: Counter[str] = Counter()
    ratios: list[float] = []
    decode: list[float] = []
    # as printed (pinned to a core like the tests'), or as the bench ran its servers: -t 1, not pinned
    soaked = server([*argv, "-t", "1"], pin=False) if bench_threads else server(argv)
    with Registry(db, show_progress=False) as reg, soaked, traffic(port, items) as done:
        w = Watcher(f"http://127.0.0.1:{port}", reg, pol, source, timeout_s=10)  # the whole workload
        w.first()
        t0 = time.monotonic()
        last = None
        for _ in range(windows):
            time.sleep(pause)
            last = w.window()
            states[last.state] += 1
            a = last.audited
            if last.acceptance is not None and a is not None and a.acceptance:
                ratios.append(last.acceptance / a.acceptance)
            if last.decode_tps is not None and a is not None and a.decode_tps and a.compare_decode:
                decode.append(last.decode_tps / a.decode_tps)
        w.close()
        took = time.monotonic() - t0
    assert last is not None and last.audited is not None
    how = "the command with the bench's -t 1, unpinned" if bench_threads else "the command as deploy printed it"
    print(f"3. A/A soak, {how}: {windows} windows of {pause:g} s")
    print(f"   ({took:.0f} s, {done[0]} requests of the audited workload)")
    print("   states: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
    if ratios:
        print(f"   acceptance live / audited: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}")
    if decode:
        print(f"   decode rate live / audited: median {statistics.median(decode):.3f}, min {min(decode):.3f}")
    else:
        print(f"   {last.audited.note}")
    ci = last.acceptance_ratio_ci
    print(f"   final anytime-valid acceptance ratio interval: {ci[0]:.3f}-{ci[1]:.3f}" if ci else "   no interval")
    drifted = states.get("drifted", 0)
    print(f"   drifted windows: {drifted} (target 0): {'met' if drifted == 0 else 'MISSED'}")
    return drifted


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", type=int, default=200, help="A/A soak windows")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds per soak window")
    ap.add_argument("--scrapes", type=int, default=60, help="scrapes for the cost measurement")
    args = ap.parse_args()
    os.environ.setdefault("SPECREG_BUSY_SHARE", "off")  # the world's run is not what is measured here
    from specreg.servers.launcher import free_ports

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.environ["SPECREG_HOME"] = str(folder / "home")
        pairs = _world(folder)
        db, policy = folder / "registry.db", folder / "policy.toml"
        items = [json.loads(x) for x in (folder / "workload.jsonl").read_text().splitlines() if x.strip()]
        argv = _argv(db, policy, pairs["draft-simple"], next(free_ports()), "--stratum", "repetitive")
        share = scrape_cost(argv, args.scrapes)
        took = not_speculating(argv, folder / "near-miss.gguf", db, policy, items)
        for attempt in range(1, 4):  # its speed gate is timed on a shared machine: a load spike can refuse it
            soak_db, soak_pair, soak_items = _noisy_world(folder / f"soak{attempt}")
            try:
                soak_argv = _argv(soak_db, policy, soak_pair, next(free_ports()))
                break
            except SystemExit as exc:
                print(f"soak world {attempt}: {str(exc).splitlines()[0]} ... (measured again)")
        else:
            raise SystemExit("the soak pair was refused three times")
        drifted = soak(soak_argv, soak_db, policy, soak_items, args.windows, args.interval, bench_threads=False)
        drifted_threads = soak(soak_argv, soak_db, policy, soak_items, args.windows, args.interval, bench_threads=True)
    print(f"targets: {'all met' if share < 0.01 and took <= 2 and drifted == 0 else 'MISSED'} (the A/A target on the")
    print(f"   command as printed; with the bench's threads the decode rate too: {drifted_threads} drifted)")
    return 0 if share < 0.01 and took <= 2 and drifted == 0 else 1


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_watch`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "watch"))
