"""A fleet merged from bundles: 20 hosts, 10,000 artifacts, 5,000 pairs, 20 hardware classes, 1M request rows.

1. Fills a source registry with bench_registry's shape (10k artifacts, 5k pairs, 1,000 runs x
   1,000 request rows), times the list and audit commands on it (reference A: one hardware
   class), then gives each run one of 20 hardware classes (host h = run number mod 20) and
   times them again (reference B: the same rows, 20 classes, no bundles).
2. Exports one bundle per host (its 50 runs = 50,000 request rows, their pairs and artifacts).
3. A central registry that has the model files and has checked the pairs (artifacts, paths,
   pairs and verdicts; no runs) imports the 20 bundles one by one: time per bundle in this
   process, and `specreg import` of one bundle in a fresh process (interpreter start included).
   Reference: the same bundle's request rows inserted by a bare sqlite3 executemany into an
   empty table of the same shape (the floor).
4. Times `runs`, `pairs`, `audit --all` on the merged registry in fresh processes. The first
   audit of the source registry is timed on its own: it builds and keeps every run's digest
   (an import keeps them as the runs arrive, so the merged registry starts with them).

Targets: runs, pairs < 2 s; audit --all <= 3 s (a budget); import of a 50k-row bundle < 5 s.

`--against REF` builds the wheel of git ref REF (e.g. the commit before a change) and this
tree's wheel, each into a venv of its own (benchmarks/_wheels.py), and times `runs`, `pairs` and
`audit --all` of both on the merged registry, alternately: the cost or gain of a change is one
ratio per command, measured in one run (REF must read this tree's registry schema).

    python benchmarks/bench_fleet.py [--scale 1.0] [--keep DIR] [--runs 3] [--against REF]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _wheels import REPO, ref_tree, short, wheel_venv
from bench_registry import _time, fill

from specreg.exchange.bundle import export_bundle, import_bundles
from specreg.exchange.bundle_format import open_bundle
from specreg.registry.migrations import migrations
from specreg.registry.store import Registry

HOSTS = 20
COMMANDS = (["runs"], ["pairs"], ["audit", "--all"])
TARGET_S = {"runs": 2.0, "pairs": 2.0, "audit --all": 3.0}  # audit --all of the full fleet: the budget


def _hardware(h: int) -> dict:
    """Host h's hardware block: 15 GPU boxes and 5 CPU-only ones, all different."""
    if h < 15:
        gpu = {"present": True, "devices": [{"index": 0, "name": f"bench GPU {h:02d}"}], "peak_vram_by_pid": {}}
        return {"cpu_model": "bench CPU", "logical_cores": 32, "gpu": gpu, "placement": "gpu (-ngl all)"}
    return {
        "cpu_model": f"bench CPU {h:02d}",
        "logical_cores": 2 * h,
        "gpu": {"present": False, "reason": "no NVIDIA GPU"},
        "placement": "cpu",
    }


def spread_over_hosts(db: Path) -> dict[int, list[str]]:
    """Give run r host r % 20: its hardware block and (as an imported run would carry) its origin."""
    conn = sqlite3.connect(db)
    hosts: dict[int, list[str]] = {h: [] for h in range(HOSTS)}
    with conn:
        for i, (rid,) in enumerate(conn.execute("SELECT run_id FROM bench_runs ORDER BY run_id").fetchall()):
            h = i % HOSTS
            hosts[h].append(rid)
            hw = _hardware(h)
            conn.execute(
                "UPDATE bench_runs SET manifest_json = json_set(manifest_json, '$.hardware.cpu_model', ?, "
                "'$.hardware.logical_cores', ?, '$.hardware.gpu', json(?), '$.hardware.placement', ?) "
                "WHERE run_id = ?",
                (hw["cpu_model"], hw["logical_cores"], json.dumps(hw["gpu"]), hw["placement"], rid),
            )
            conn.execute(
                "INSERT INTO run_origins (run_id, host, specreg_version, run_digest, bundle_digest, imported_at) "
                "VALUES (?, ?, '0.1.0', ?, ?, '')",
                (rid, f"host-{h:02d}", "0" * 64, "0" * 64),
            )
    conn.close()
    return hosts


def central_from(source: Path, dest: Path) -> None:
    """A registry with the model files registered and the pairs checked (as on a machine that has
    the files: an imported verdict is evidence about its host, never this machine's admission, so
    without its own verdicts the central registry would have no admitted pair to audit), no runs."""
    Registry(dest, show_progress=False).close()
    conn = sqlite3.connect(dest)
    with conn:
        conn.execute("ATTACH DATABASE ? AS src", (str(source),))
        for table in ("artifacts", "artifact_paths", "pairs", "verdicts"):
            conn.execute(f"INSERT INTO {table} SELECT * FROM src.{table}")
    conn.execute("DETACH DATABASE src")
    conn.close()


def floor_insert(bundle: Path, root: Path) -> float:
    """The same bundle's request rows into an empty bench_requests-shaped table with executemany."""
    b = open_bundle(bundle, migrations.names())
    rows = [rec for name in b._data if name.endswith("requests.jsonl") for rec in b.records(name)]
    cols = sorted({k for r in rows for k in r})
    conn = sqlite3.connect(root / "floor.db")
    conn.execute(f"CREATE TABLE q (id INTEGER PRIMARY KEY, {', '.join(cols)})")
    t0 = time.perf_counter()
    with conn:
        conn.executemany(
            f"INSERT INTO q ({', '.join(cols)}) VALUES ({','.join('?' * len(cols))})",
            [[r.get(c) for c in cols] for r in rows],
        )
    took = time.perf_counter() - t0
    conn.close()
    return took


def time_commands(db: Path, root: Path, runs: int) -> dict[str, tuple[float, float]]:
    """Command -> (median wall s, median CPU s) in fresh processes; CPU time is robust to a busy machine."""
    env = {**os.environ, "SPECREG_DB": str(db), "SPECREG_HOME": str(root), "COLUMNS": "200"}
    out = {}
    for args in COMMANDS:
        walls, cpus = [], []
        for _ in range(runs):
            wall, cpu, rc, tail = _time(args, env)
            if rc not in (0, 1):
                raise SystemExit(f"specreg {' '.join(args)} failed ({rc}): {tail}")
            walls.append(wall)
            cpus.append(cpu)
        out[" ".join(args)] = (statistics.median(walls), statistics.median(cpus))
    return out


# the audit with one of its caches switched off, for the table of what each buys (patched in the child)
WITHOUT = {
    "without kept run digests": (
        "import specreg.benchmark.store.digest_cache as d; d.get = lambda *a, **k: {}; d.put = lambda *a, **k: 0"
    ),
}


def _time_patched(patch: str, args: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """`_time` for a child that applies `patch` before running the console script's entry point
    (the same process as `specreg` but for the patch)."""
    code = f"{patch}\nfrom specreg.cli import main\nmain()"
    return _time(args, env, prefix=["-c", code])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the full size (smoke runs)")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temp dir)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per command (median shown)")
    ap.add_argument("--against", metavar="REF", help="also time git ref REF's specreg (its wheel), alternately")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="specreg-fleet-venvs-") as venvs:
        sides: dict[str, str] = {}
        if opts.against:  # built first: a ref that does not build fails before the fill
            sides["this tree"] = str(wheel_venv(REPO, Path(venvs, "now")) / "python")
            ref_bin = wheel_venv(ref_tree(opts.against, Path(venvs, "ref-source")), Path(venvs, "ref"))
            sides[short(opts.against)] = str(ref_bin / "python")
        if opts.keep is not None:
            opts.keep.mkdir(parents=True, exist_ok=True)
            run(opts, opts.keep, sides)
            return
        with tempfile.TemporaryDirectory(prefix="specreg-fleet-") as tmp:  # ~1 GB at full size: not left behind
            run(opts, Path(tmp), sides)


def against(db: Path, root: Path, runs: int, sides: dict[str, str]) -> None:
    """Each command of each side's wheel on the same registry, alternately; medians and the ratio."""
    env = {**os.environ, "SPECREG_DB": str(db), "SPECREG_HOME": str(root), "COLUMNS": "200"}
    now, ref = sides
    print(f"\nthis tree against {ref} on the merged registry (each its wheel, alternating, median of {runs}):")
    print(f"{'command':20} {'this tree wall/CPU':>19} {ref + ' wall/CPU':>19}  wall ratio  CPU ratio")
    for args in COMMANDS:
        for python in sides.values():  # warm the .pyc files and the page cache; not counted
            _time(args, env, python=python)
        walls: dict[str, list[float]] = {side: [] for side in sides}
        cpus: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(runs):
            for side, python in sides.items():
                wall, cpu, rc, tail = _time(args, env, python=python)
                if rc not in (0, 1):
                    raise SystemExit(f"{side}: specreg {' '.join(args)} failed ({rc}): {tail}")
                walls[side].append(wall)
                cpus[side].append(cpu)
        cmd = " ".join(args)
        w, c = statistics.median(walls[now]), statistics.median(cpus[now])
        rw, rc_ = statistics.median(walls[ref]), statistics.median(cpus[ref])
        target = TARGET_S[cmd]
        flag = "" if w <= target else (f"  OVER {target:.0f} s" if c > target else "  (wall over; CPU under: load)")
        print(f"specreg {cmd:12} {w:>11.2f}/{c:.2f}s {rw:>11.2f}/{rc_:.2f}s {w / rw:>10.2f}x {c / rc_:>9.2f}x{flag}")


def run(opts: argparse.Namespace, root: Path, sides: dict[str, str]) -> None:
    source, central = root / "source.db", root / "central.db"
    for p in (source, central):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{p}{suffix}").unlink(missing_ok=True)
    t0 = time.perf_counter()
    with Registry(source, show_progress=False) as reg:
        counts = fill(reg, root, opts.scale)
        reg.conn.execute("ANALYZE")
    print(f"source: {counts} in {time.perf_counter() - t0:.1f} s")
    env = {**os.environ, "SPECREG_DB": str(source), "SPECREG_HOME": str(root), "COLUMNS": "200"}
    wall, cpu, _, _ = _time(["audit", "--all"], env)  # its rows were written directly: no digest kept yet
    digests = f"builds and keeps the {counts['runs']:,} run digests"
    print(f"first audit --all of it ({digests}): {wall:.2f} s wall, {cpu:.2f} s CPU")
    ref_a = time_commands(source, root, opts.runs)
    hosts = spread_over_hosts(source)
    ref_b = time_commands(source, root, opts.runs)

    t0 = time.perf_counter()
    bundles = []
    with Registry(source, show_progress=False) as reg:
        for h, run_ids in hosts.items():
            pairs = [pid for (pid,) in reg.conn.execute("SELECT id FROM pairs WHERE id % ? = ?", (HOSTS, h))]
            res = export_bundle(reg, root / f"host-{h:02d}.zip", run_ids=run_ids, pair_ids=pairs, runs_of_pairs=False)
            bundles.append((res.path, res.header.counts["requests"]))
    size = sum(p.stat().st_size for p, _ in bundles) / 2**20
    print(f"exported {len(bundles)} bundles ({size:.0f} MiB) in {time.perf_counter() - t0:.1f} s")

    central_from(source, central)
    one = root / "one.db"
    central_from(source, one)
    floor = floor_insert(bundles[0][0], root)
    wall, cpu, rc, tail = _time(["import", str(bundles[0][0])], {**os.environ, "SPECREG_DB": str(one)})
    if rc != 0:
        raise SystemExit(f"specreg import failed ({rc}): {tail}")
    print(
        f"specreg import of one bundle ({bundles[0][1]} request rows), fresh process: {wall:.2f} s wall, "
        f"{cpu:.2f} s CPU (target < 5 s); bare sqlite3 executemany of its rows: {floor:.2f} s; "
        f"ratio {wall / floor:.1f}x"
    )
    walls, cpus = [], []
    with Registry(central, show_progress=False) as reg:
        for path, _ in bundles:
            t0, c0 = time.perf_counter(), time.process_time()
            import_bundles(reg, [path])
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        reg.conn.execute("ANALYZE")
        n_rows = reg.conn.execute("SELECT count(*) FROM bench_requests").fetchone()[0]
        hw = reg.conn.execute("SELECT json_extract(manifest_json, '$.hardware') FROM bench_runs")
        n_classes = len({c for (c,) in hw})
    print(
        f"merged {len(bundles)} bundles in this process: per bundle median {statistics.median(walls):.2f} s wall "
        f"({statistics.median(cpus):.2f} s CPU), max {max(walls):.2f} s; {n_rows} request rows, "
        f"{n_classes} hardware classes"
    )
    merged = time_commands(central, root, opts.runs)
    print(f"\n{'command':20} {'merged wall/CPU':>16} {'ref B wall/CPU':>15} {'ref A wall/CPU':>15}  CPU merged/B  /A")
    for cmd, (wall, cpu) in merged.items():
        target = TARGET_S[cmd]
        flag = (
            "" if wall <= target else (f"  OVER {target:.0f} s" if cpu > target else "  (wall over; CPU under: load)")
        )
        (bw, bc), (aw, ac) = ref_b[cmd], ref_a[cmd]
        print(
            f"specreg {cmd:12} {wall:>7.2f}/{cpu:.2f}s {bw:>7.2f}/{bc:.2f}s {aw:>7.2f}/{ac:.2f}s "
            f"{cpu / bc:>11.2f}x {cpu / ac:.2f}x{flag}"
        )
    print("ref A: the same rows in one registry, one hardware class; ref B: same, 20 classes, no bundles")
    if sides:
        against(central, root, opts.runs, sides)
    print("\nwhat each cache buys `audit --all` on the merged registry (fresh processes, same run):")
    env = {**os.environ, "SPECREG_DB": str(central), "SPECREG_HOME": str(root), "COLUMNS": "200"}
    base_wall, base_cpu = merged["audit --all"]
    print(f"  {'with kept digests (as shipped)':34} {base_wall:.2f} s wall, {base_cpu:.2f} s CPU")
    for label, patch in WITHOUT.items():
        walls, cpus = [], []
        for _ in range(opts.runs):
            wall, cpu, rc, tail = _time_patched(patch, ["audit", "--all"], env)
            if rc not in (0, 1):
                raise SystemExit(f"audit --all {label} failed ({rc}): {tail}")
            walls.append(wall)
            cpus.append(cpu)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        print(f"  {label:34} {wall:.2f} s wall, {cpu:.2f} s CPU: {wall / base_wall:.2f}x the audit with it")


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_fleet`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "fleet"))
