"""What the busy-machine probe reads: quiet, with one and with two CPU-burning neighbours.

The numbers behind `--busy-share` (specreg/benchmark/store/contention.py): three runs on tiny generated
models with the bundled llama.cpp server, back to back - no burner, then one, then two started
after the first round (each burner one `while True` process, killed when the run ends) - and
for each slot (condition, round) the CPU per wall second, in cores, of this specreg and its
server (ours) and of every other process (others), the 1-minute load and whether the default
threshold set the slot aside. First it prints the machine's background: the CPU of every
process over a few seconds, before any run.

Usage: python benchmarks/bench_contention.py [--repeat 3] [--threads N] [--dir DIR]
Run it on a machine nobody else is using: on a shared one the neighbours are the point.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from specreg.benchmark.run.context import Observer
from specreg.benchmark.run.runner import Runner
from specreg.registry.store import Registry
from specreg.schemas.bench import ConditionRun
from specreg.schemas.bench_settings import BenchSettings
from specreg.servers.load import busy_threshold
from specreg.sources.checking import check_and_record
from specreg.testing import ModelSpec, write_model
from specreg.validators.ruleset import load_rule_set

BURN = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end:\n    pass\n"
ITEMS = (
    '{"id": "rep", "stratum": "repetitive", "max_tokens": 32, "prompt": "key: value\\nname: model\\nkey:"}\n'
    '{"id": "chat", "stratum": "chat", "max_tokens": 32, "messages": [{"role": "user", "content": "hello"}]}\n'
)


class Neighbours(Observer):
    """Starts `n` burners once the first round's two slots are done."""

    def __init__(self, n: int) -> None:
        self.n, self.done = n, 0
        self.procs: list[subprocess.Popen[bytes]] = []

    def condition_done(self, cond: ConditionRun) -> None:
        self.done += 1
        if self.done == 2:
            self.procs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(self.n)]

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def background(seconds: float) -> float:
    """Cores used by the whole machine over `seconds` (nothing of ours running)."""

    def busy() -> float:
        t = psutil.cpu_times()
        total = sum(float(getattr(t, f)) for f in t._fields if f not in ("guest", "guest_nice"))
        return total - float(t.idle) - float(getattr(t, "iowait", 0.0)) - float(getattr(t, "steal", 0.0))

    b0 = busy()
    time.sleep(seconds)
    return (busy() - b0) / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dir", type=Path, default=None)
    a = ap.parse_args()
    work = a.dir or Path(tempfile.mkdtemp(prefix="bench-contention-"))
    work.mkdir(parents=True, exist_ok=True)
    target = write_model(work / "t.gguf", ModelSpec())
    draft = write_model(work / "d.gguf", ModelSpec(name="tiny-draft"))
    wl = work / "wl.jsonl"
    wl.write_text(ITEMS)
    print(f"machine before the runs: {background(5.0):.3f} cores busy (5 s)")
    for n in (0, 1, 2):
        db = work / f"r{n}.db"
        db.unlink(missing_ok=True)
        with Registry(db, show_progress=False) as reg:
            pid = check_and_record(reg, target, draft, "draft-simple", rule_set=load_rule_set()).pair_id
            opts = BenchSettings(workload=str(wl), repeat=a.repeat, ctx_size=512, threads=a.threads,
                                 methods=["draft-simple"], busy_share=0.25, busy_wait_s=0)  # fmt: skip
            obs = Neighbours(n)
            try:
                (run,) = Runner(reg, opts, obs).bench([pid])
            finally:
                obs.stop()
        print(f"\n{n} burner(s) from round 1 on:")
        head = ("condition", "round", "wall s", "ours", "others", "steal", "load1")
        print("  {:<13} {:>5} {:>7} {:>6} {:>7} {:>6} {:>6}  set aside".format(*head))
        for c in run.conditions:
            for x in c.load:
                cells = (c.spec.name, x.round, x.wall_s, x.ours_cores, x.others_cores, x.steal_cores, x.load1 or 0.0)
                row = "  {:<13} {:>5} {:>7.2f} {:>6.2f} {:>7.2f} {:>6.2f} {:>6.2f}".format(*cells)
                print(f"{row}  {'yes' if x.busy else 'no'} (threshold {busy_threshold(x.cores):g})")


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_contention`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "contention"))
