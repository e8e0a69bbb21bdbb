"""`bench admitted --executor ray` as users run it, on real Ray (slow: every cluster start costs seconds).

A two-node cluster on this machine, started by the test (`ray start --head --num-cpus=1` and a
second node offering the custom resource `hostB`), each of its processes marked so that only
they are stopped at the end: placement by `--resources`, a run on it matching a local run of the
same pair, a task past its deadline ended by the driver, the second node killed after its first
round (every finished row kept, the node named, nothing left behind). Then the command with no
address, which starts a cluster of its own: a clean run, and one interrupted with SIGINT or
SIGTERM; after each, no Ray process, server or folder it made is left, and no Ray log line reached
the terminal.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from _bench_helpers import NOISE, admit, db_rows, workload
from _registry_helpers import model

from specreg.exchange.task_guard import TASK_VAR
from specreg.registry.store import Registry
from specreg.servers.launcher import marked

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'specreg[ray]'")

MARK = "SPECREG_TEST_RAY_CLUSTER"  # every process a cluster of this test starts carries it
ITEMS = [
    {"id": "rep", "stratum": "repetitive", "max_tokens": 12, "prompt": "key: value\nname: a\nkey: value\nname:"},
    {"id": "chat", "stratum": "chat", "max_tokens": 12, "prompt": "Hello, how are"},
]
BENCH = ["--methods", "none,draft-simple", "--ctx-size", "256", "--threads", "1", "--start-timeout", "60"]
# lines Ray's own logging writes (C++ "[2026-..] (raylet) x.cc:12:", Python "2026-.. INFO x.py:1 --")
RAY_NOISE = ("(raylet)", ".cc:", " -- ", "WARNING", "INFO", "ERROR", "*** ", "pid=")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ours(mark: str) -> list[psutil.Process]:
    return marked(mark, MARK)


def _stop(mark: str) -> None:
    """Every process the test started under `mark`, and only those: TERM, then KILL (Ray's
    agents ignore TERM), until none is left."""
    for _ in range(3):
        procs = _ours(mark)
        if not procs:
            return
        for p in procs:
            with_suppress(p.terminate)
        _, alive = psutil.wait_procs(procs, timeout=5)
        for p in alive:
            with_suppress(p.kill)
        psutil.wait_procs(alive, timeout=5)


def with_suppress(fn: Any) -> None:
    with contextlib.suppress(psutil.Error):
        fn()


class World:
    """Folders, environment and the two admitted tiny pairs the scenarios share."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home, self.tmp = root / "home", root / "tmp"  # Ray's token; the nodes' TMPDIR (their task folders)
        self.home.mkdir()
        self.tmp.mkdir()
        self.mark = uuid.uuid4().hex
        self.env = {
            **os.environ,
            "HOME": str(self.home),
            "TMPDIR": str(self.tmp),
            MARK: self.mark,
            "COLUMNS": "200",
            # on a loaded 2-core machine Ray's agents start slowly: start workers on demand
            "RAY_enable_worker_prestart": "0",
            "RAY_prestart_worker_first_driver": "0",
            "RAY_worker_maximum_startup_concurrency": "1",
            "RAY_agent_register_timeout_ms": "180000",
        }
        self.env.pop("RAY_ADDRESS", None)
        wl = workload(root, ITEMS)
        self.db = root / "driver.db"
        target = model(root, "t.gguf")
        with Registry(self.db, show_progress=False) as reg:
            self.same = admit(reg, target, model(root, "same.gguf", name="same"))
            self.noisy = admit(reg, target, model(root, "noisy.gguf", name="noisy", noise=NOISE))
        self.bench = ["--workload", str(wl), *BENCH]

    def specreg(self, *args: str, db: Path | None = None, mark: str | None = None) -> subprocess.Popen[str]:
        """The console script; `mark`: the processes it starts carry this mark, not the cluster's."""
        cmd = [sys.executable, "-m", "specreg", "--db", str(db or self.db), *args]
        env = {**self.env, MARK: mark or self.mark}
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(
        self, *args: str, timeout: float = 600, db: Path | None = None, mark: str | None = None
    ) -> tuple[int, str, str, float]:
        started = time.monotonic()
        proc = self.specreg(*args, db=db, mark=mark)
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, time.monotonic() - started


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    # short: Ray's socket paths must fit in 107 bytes
    root = Path(tempfile.mkdtemp(prefix="sr-rc-", dir="/tmp"))
    try:
        yield World(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


class Cluster:
    """A head (one CPU) and a second node offering `hostB`, on this machine, each node's
    processes under a mark of its own. A node that misses Ray's startup window (its agents are
    slow on a loaded machine) is stopped and started again."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.marks = {"head": f"{world.mark}-head", "b": f"{world.mark}-b"}
        ray_bin = str(Path(sys.executable).parent / "ray")
        common = ["--num-cpus=1", "--disable-usage-stats"]
        for attempt in range(3):
            self.port = _free_port()
            self.address = f"127.0.0.1:{self.port}"
            self.temp = world.root / f"ray{attempt}"  # the head's folder (its sessions, sockets, logs)
            head = [ray_bin, "start", "--head", f"--port={self.port}", f"--temp-dir={self.temp}"]
            if self._start("head", [*head, "--include-dashboard=false", *common], last=attempt == 2):
                break
        node_b = [ray_bin, "start", f"--address={self.address}", "--resources", json.dumps({"hostB": 1}), *common]
        for attempt in range(3):
            if self._start("b", node_b, last=attempt == 2):
                break

    def _start(self, node: str, argv: list[str], *, last: bool) -> bool:
        env = {**self.world.env, MARK: self.marks[node]}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            return True
        _stop(self.marks[node])
        assert not last, done.stdout + done.stderr
        return False

    def processes(self) -> list[psutil.Process]:
        return [p for mark in self.marks.values() for p in _ours(mark)]

    def raylet_b(self) -> psutil.Process:
        found = [p for p in _ours(self.marks["b"]) if p.name() == "raylet"]
        assert len(found) == 1, found
        return found[0]

    def node_id_b(self) -> str:
        arg = next(a for a in self.raylet_b().cmdline() if a.startswith("--node_id="))
        return arg.split("=", 1)[1]


@pytest.fixture(scope="module")
def cluster(world: World) -> Iterator[Cluster]:
    try:
        yield Cluster(world)
    finally:  # a cluster that failed to start is stopped too
        for mark in (f"{world.mark}-head", f"{world.mark}-b"):
            _stop(mark)


def _rows(db: Path, run_id: str) -> int:
    conn = sqlite3.connect(str(db))
    try:
        return int(conn.execute("SELECT count(*) FROM bench_requests WHERE run_id = ?", (run_id,)).fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


def _sent(err: str) -> list[str]:
    """The run ids the driver printed when it sent its tasks."""
    return [line.split(" run ", 1)[1].split()[0] for line in err.splitlines() if " sent (" in line]


def _no_ray_noise(err: str) -> None:
    noise = [line for line in err.splitlines() if any(n in line for n in RAY_NOISE)]
    assert noise == [], err


def _nothing_left(world: World, run_ids: list[str]) -> None:
    """No task folder in the nodes' TMPDIR, no process of these runs (servers, guards)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (
        list(world.tmp.glob("specreg-task-*")) or any(marked(r, TASK_VAR) for r in run_ids)
    ):
        time.sleep(0.2)
    assert list(world.tmp.glob("specreg-task-*")) == []
    assert [p.pid for r in run_ids for p in marked(r, TASK_VAR)] == []


def _records(db: Path, run_id: str) -> dict[str, Any]:
    """What a run measured, as `runs show --json` gives it, less what differs by machine and time."""
    with Registry(db, show_progress=False) as reg:
        from specreg.benchmark.store.runstore import RunStore

        run = RunStore(reg).load(run_id)
    keep = ("condition", "prompt_id", "repeat", "ok", "output_text", "output_ids", "output_tokens", "matches_baseline")
    return {
        "conditions": [(c.spec.name, c.status, len(c.argv)) for c in run.conditions],
        "prompts": [p.model_dump() for p in run.prompts],
        "requests": sorted(tuple(getattr(r, k) for k in keep) for r in run.requests),
        "summaries": [(s.condition, s.stratum, s.n_requests, s.n_ok) for s in run.summaries],
        "settings": run.manifest.settings.model_dump() if run.manifest and run.manifest.settings else None,
    }


def test_placed_by_resources_and_the_same_as_a_local_run(world: World, cluster: Cluster) -> None:
    code, _out, err, _ = world.run(
        "bench", "admitted", "--executor", "ray", "--ray-address", cluster.address,
        "--resources", '{"hostB": 1}', "--pair", str(world.same), "--repeat", "1", *world.bench,
    )  # fmt: skip
    assert code == 0, err
    _no_ray_noise(err)
    [run_id] = _sent(err)
    shown = json.loads(world.run("runs", "show", run_id, "--json")[1])
    node = shown["info"]["node"]
    assert node["node_id"] == cluster.node_id_b() and node["resources"] == {"hostB": 1.0}
    assert shown["manifest"]["node"] == node and shown["info"]["status"] == "complete"
    local_db = world.root / "local.db"
    shutil.copy(world.db, local_db)
    code, _, err, _ = world.run(
        "bench", "admitted", "--pair", str(world.same), "--repeat", "1", *world.bench, db=local_db
    )
    assert code == 0, err
    [local_id] = [r["run_id"] for r in db_rows(local_db, "SELECT run_id FROM bench_runs") if r["run_id"] != run_id]
    assert _records(world.db, run_id) == _records(local_db, local_id)  # greedy: the same tokens, wherever
    _nothing_left(world, [run_id])


def test_a_task_past_its_deadline_is_ended_by_the_driver(world: World, cluster: Cluster) -> None:
    """The worker is frozen (SIGSTOP) once its first server is up: the run cannot end itself."""
    proc = world.specreg(
        "bench", "admitted", "--executor", "ray", "--ray-address", cluster.address, "--pair", str(world.same),
        "--repeat", "3", "--run-timeout", "20", "--start-timeout", "15", *world.bench[:-2],
    )  # fmt: skip
    started, run_id = time.monotonic(), None
    while run_id is None and time.monotonic() - started < 240 and proc.poll() is None:
        landed = set(_runs(world.db))  # the run is in the driver's registry, not only begun on the node
        run_id = next((r for p in cluster.processes() if (r := _task_of(p)) in landed), None)
        time.sleep(0.1)
    assert run_id is not None, proc.communicate()[1]  # a server of the run is up: it is measuring
    [worker] = [p for p in cluster.processes() if _named(p, "ray::node_task")]
    worker.suspend()
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    with Registry(world.db, show_progress=False) as reg:
        status, reason = reg.conn.execute(
            "SELECT status, status_reason FROM bench_runs WHERE run_id = ?", (run_id,)
        ).fetchone()
    assert status == "aborted" and "ended by the driver" in reason and "35 s" in reason
    _no_ray_noise(err)
    _nothing_left(world, [str(run_id)])


def _named(p: psutil.Process, name: str) -> bool:
    try:
        return p.name() == name
    except psutil.Error:
        return False


def _task_of(p: psutil.Process) -> str | None:
    """The run a bundled server serves (not the runner's `--version` probe, which comes first)."""
    try:
        argv = p.cmdline()
        return p.environ().get(TASK_VAR) if "bundled_server" in " ".join(argv) and "--version" not in argv else None
    except psutil.Error:
        return None


def _runs(db: Path) -> list[str]:
    return [r["run_id"] for r in db_rows(db, "SELECT run_id FROM bench_runs")]


def test_a_node_killed_after_its_first_round_leaves_every_finished_row(world: World, cluster: Cluster) -> None:
    before = set(_runs(world.db))
    proc = world.specreg(
        "bench", "admitted", "--executor", "ray", "--ray-address", cluster.address, "--resources", '{"hostB": 1}',
        "--pair", str(world.noisy), "--repeat", "4", *world.bench,
    )  # fmt: skip
    node_b = cluster.node_id_b()
    run_id = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:  # the first round: both conditions, every prompt
        ids = [r for r in _runs(world.db) if r not in before]
        run_id = ids[0] if ids else None
        if run_id and _rows(world.db, run_id) >= 2 * len(ITEMS):
            break
        time.sleep(0.2)
    assert run_id and proc.poll() is None, proc.communicate()[1]
    cluster.raylet_b().kill()
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    rows = db_rows(world.db, "SELECT status, status_reason FROM bench_runs WHERE run_id = ?", (run_id,))
    assert rows[0]["status"] == "aborted", rows[0]["status_reason"]
    reason = rows[0]["status_reason"]
    assert f"Ray node {node_b[:12]}" in reason and reason.endswith("finished rows kept")
    assert _rows(world.db, run_id) >= 2 * len(ITEMS)
    assert db_rows(world.db, "SELECT node_id FROM run_origins WHERE run_id = ?", (run_id,))[0]["node_id"] == node_b
    _no_ray_noise(err)
    _nothing_left(world, [run_id])


def _ray_folders() -> set[str]:
    return {str(p) for p in Path("/tmp").glob("specreg-ray-*")}


def test_without_an_address_ray_starts_here_and_leaves_nothing(world: World) -> None:
    before, mark = _ray_folders(), uuid.uuid4().hex
    had_token = (world.home / ".ray" / "auth_token").exists()
    code, out, err, wall = world.run(
        "bench", "admitted", "--executor", "ray", "--ray-timeout", "300", "--pair", str(world.same), "--repeat", "1",
        *world.bench, mark=mark,
    )  # fmt: skip
    assert code == 0, err
    print(f"the command without an address: {wall:.1f} s")
    assert "complete" in out
    _no_ray_noise(err)
    assert _ours(mark) == []  # gcs, raylet, workers, agents, servers, guards
    assert _ray_folders() == before
    assert (world.home / ".ray" / "auth_token").exists() == had_token
    _nothing_left(world, _sent(err))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_every_server_and_ray_process_it_started(world: World, sig: signal.Signals) -> None:
    """Ctrl-C, and SIGTERM as cli.main turns it into one (Ray's start sets a handler of its own)."""
    before, mark = _ray_folders(), uuid.uuid4().hex
    db = world.root / "sigint.db"
    shutil.copy(world.db, db)
    earlier = set(_runs(db))
    proc = world.specreg(
        "bench", "admitted", "--executor", "ray", "--ray-timeout", "300", "--pair", str(world.noisy),
        "--repeat", "20", *world.bench, db=db, mark=mark,
    )  # fmt: skip
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        ids = [r for r in _runs(db) if r not in earlier]
        if ids and _rows(db, ids[0]) >= 1:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1]
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    [run] = [
        r for r in db_rows(db, "SELECT run_id, status, status_reason FROM bench_runs") if r["run_id"] not in earlier
    ]
    assert run["status"] == "cancelled" and _rows(db, run["run_id"]) >= 1
    _nothing_left(world, [run["run_id"]])
    assert _ours(mark) == []  # gcs, raylet, workers, agents
    assert _ray_folders() == before
