"""Runs dispatched to other machines: the node's task (normal suite) and a real local Ray cluster (slow).

The node side (`remote.run_task`) is what Ray ships to a worker; it is tested here directly on
the real llama.cpp server, SHA-256 refusal included. The slow test starts a real local Ray
cluster (two worker processes on this machine), benchmarks two tiny pairs through it, and
compares the imported rows with a local run of the same pairs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from _audit_world import specreg
from _bench_helpers import NOISE, admit, db_rows, workload
from _registry_helpers import model

from specreg.exchange.bundle import import_bundles
from specreg.exchange.bundle_format import open_bundle
from specreg.exchange.portable import artifact_records, pair_records
from specreg.exchange.ray_node import TaskOutcome, make_task, run_task
from specreg.registry.migrations import migrations
from specreg.registry.store import Registry
from specreg.schemas.bench_settings import BenchSettings

ITEMS = [
    {"id": "rep", "stratum": "repetitive", "max_tokens": 12, "prompt": "key: value\nname: a\nkey: value\nname:"},
    {"id": "chat", "stratum": "chat", "max_tokens": 12, "prompt": "Hello, how are"},
]


def _opts(folder: Path) -> BenchSettings:
    return BenchSettings(
        methods=["none", "draft-simple"],
        workload=str(workload(folder, ITEMS)),
        ctx_size=256,
        threads=1,
        repeat=1,
        start_timeout_s=60,
        request_timeout_s=60,
        run_timeout_s=240,
    )


def _task(reg: Registry, pair_id: int, opts: BenchSettings, task_id: str = "t1") -> str:
    pair = reg.get_pair(pair_id)
    shas = [pair.target_sha256, *([pair.draft_sha256] if pair.draft_sha256 else [])]
    paths = {s: reg.get_artifact(s).paths for s in shas}
    record = next(pair_records(reg.conn, [pair_id]))
    return make_task(task_id, record, list(artifact_records(reg.conn, shas)), paths, opts).model_dump_json()


def test_a_node_runs_the_task_and_returns_a_bundle(tmp_path: Path) -> None:
    db = tmp_path / "driver.db"
    with Registry(db, show_progress=False) as reg:
        pid = admit(reg, model(tmp_path, "t.gguf"), model(tmp_path, "d.gguf", name="tiny-draft"))
        task = _task(reg, pid, _opts(tmp_path))
    res = TaskOutcome.model_validate_json(run_task(task))
    assert res.ok and res.bundle, res.reason
    path = tmp_path / "node.zip"
    path.write_bytes(res.bundle)
    bundle = open_bundle(path, migrations.names())
    assert len(bundle.header.runs) == 1 and bundle.header.counts["requests"] == 2 * len(ITEMS)
    with Registry(db, show_progress=False) as reg:
        imported = import_bundles(reg, [path])
    rid = imported.runs[0]
    rows = db_rows(db, "SELECT status, pair_id FROM bench_runs WHERE run_id = ?", (rid,))
    assert rows[0]["pair_id"] == pid and rows[0]["status"] == "complete"


def test_a_node_refuses_a_model_whose_sha256_differs_before_measuring(tmp_path: Path) -> None:
    db = tmp_path / "driver.db"
    with Registry(db, show_progress=False) as reg:
        draft = model(tmp_path, "d.gguf", name="tiny-draft")
        pid = admit(reg, model(tmp_path, "t.gguf"), draft)
        task = _task(reg, pid, _opts(tmp_path))
    model(tmp_path, "d.gguf", name="another-draft")  # the node's copy is not the registered bytes
    res = TaskOutcome.model_validate_json(run_task(task))
    assert not res.ok and res.bundle is None
    assert "d.gguf" in (res.reason or "") and "registered sha256" in (res.reason or "")


def test_without_ray_executor_ray_says_how_to_install_it(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['ray'] = None; from specreg.cli import main; "
        "main(['bench', 'admitted', '--executor', 'ray'])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "needs Ray" in proc.stderr and "pip install 'specreg[ray]'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--executor", "slurm"], "choose local or ray"),
        (["--resources", '{"GPU": 1}'], "go with --executor ray"),
    ],
)
def test_executor_options_are_checked(tmp_path: Path, args: list[str], needle: str) -> None:
    code, _, err = specreg("bench", "admitted", *args, db=tmp_path / "r.db")
    assert code == 2 and needle in err


@pytest.mark.slow
def test_a_real_local_ray_cluster_runs_two_pairs_like_a_local_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'specreg[ray]'")
    monkeypatch.setenv("HOME", str(tmp_path))  # Ray keeps its cluster token under ~/.ray
    # On a loaded 2-core machine Ray's agents start slowly, and the raylet gives them 15 s: workers
    # started at the same time (prestarted, several at once) push them over it. Start workers on demand.
    monkeypatch.setenv("RAY_agent_register_timeout_ms", "180000")
    monkeypatch.setenv("RAY_enable_worker_prestart", "0")
    monkeypatch.setenv("RAY_prestart_worker_first_driver", "0")
    monkeypatch.setenv("RAY_worker_maximum_startup_concurrency", "1")
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    from specreg.benchmark.run.runner import Runner
    from specreg.exchange.ray_executor import bench_on_ray

    target = model(tmp_path, "t.gguf")
    drafts = [model(tmp_path, "same.gguf", name="same"), model(tmp_path, "noisy.gguf", name="noisy", noise=NOISE)]
    remote_db, local_db = tmp_path / "remote.db", tmp_path / "local.db"
    pairs = []
    for db in (remote_db, local_db):
        with Registry(db, show_progress=False) as reg:
            pairs = [admit(reg, target, d) for d in drafts]
    opts = _opts(tmp_path)
    bad = model(tmp_path, "bad.gguf", name="bad")
    with Registry(remote_db, show_progress=False) as reg:
        bad_pair = admit(reg, target, bad)
    model(tmp_path, "bad.gguf", name="changed")  # this pair's draft changes after the verdict
    try:
        for attempt in range(3):  # the raylet aborts when its agents miss their window: start it again
            try:
                ray.init(
                    num_cpus=2,  # two worker processes run the two pairs side by side
                    object_store_memory=100 * 2**20,
                    include_dashboard=False,
                    log_to_driver=False,
                    _temp_dir=str(ray_tmp),
                )
                break
            except Exception:
                ray.shutdown()
                if attempt == 2:
                    raise
        with Registry(remote_db, show_progress=False) as reg:
            out = bench_on_ray(reg, opts, [*pairs, bad_pair])
    finally:
        ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert len(out.imported) == 2 and len(out.failed) == 1
    assert out.failed[0].pair_id == bad_pair and "sha256" in (out.failed[0].status_reason or "")
    with Registry(local_db, show_progress=False) as reg:
        Runner(reg, opts).bench(pairs)

    def rows(db: Path) -> dict[tuple, tuple]:
        got = db_rows(
            db,
            "SELECT r.pair_id, q.condition, q.prompt_id, q.repeat, q.ok, q.output_text, q.output_tokens, "
            "q.matches_baseline FROM bench_requests q JOIN bench_runs r ON r.run_id = q.run_id",
        )
        return {tuple(g)[:4]: tuple(g)[4:] for g in got}

    remote, local = rows(remote_db), rows(local_db)
    assert remote and remote == local  # greedy decoding: the same outputs, wherever it ran
    hosts = db_rows(remote_db, "SELECT host, specreg_version FROM run_origins")
    assert len(hosts) == 2 and all(h["host"] for h in hosts)
    failed = db_rows(remote_db, "SELECT status, status_reason FROM bench_runs WHERE pair_id = ?", (bad_pair,))
    assert [f["status"] for f in failed] == ["failed"]
    assert json.loads(json.dumps(failed[0]["status_reason"]))  # the reason is kept, as text


class _StandInRay(types.ModuleType):
    """What specreg calls of Ray before anything is sent (Ray is an optional extra, not installed
    in the test environment): `init` blocks like a cluster that never answers, or raises like a
    local start that timed out; the calls are kept."""

    def __init__(self, init: Callable[..., None]) -> None:
        super().__init__("ray")
        self._init, self.calls = init, []

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs: object) -> None:
        self.calls.append(("init", kwargs))
        self._init(**kwargs)

    def shutdown(self) -> None:
        self.calls.append(("shutdown", {}))


def _admitted_registry(tmp_path: Path) -> Path:
    db = tmp_path / "r.db"
    with Registry(db, show_progress=False) as reg:
        admit(reg, model(tmp_path, "t.gguf"), model(tmp_path, "d.gguf", name="tiny-draft"))
    return db


def _ray_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ray: _StandInRay, *args: str) -> str:
    """Run `bench admitted --executor ray ARGS`: exit 2, one error line, the registry unchanged."""
    db = _admitted_registry(tmp_path)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code, out, err = specreg("bench", "admitted", "--executor", "ray", *args, db=db)
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err and out == "", err
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # nothing half-stored
    assert db_rows(db, "SELECT COUNT(*) AS n FROM bench_runs")[0]["n"] == 0
    return errors[0]


def test_a_ray_address_where_nothing_listens_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray = _StandInRay(lambda **_: None)
    line = _ray_fails(tmp_path, monkeypatch, ray, "--ray-address", f"127.0.0.1:{port}", "--ray-timeout", "2")
    assert line == f"error: Ray cluster at 127.0.0.1:{port} did not answer within 2 s (connection refused)"
    assert ray.calls == []  # refused before Ray was asked to retry for minutes


def test_a_ray_cluster_that_never_answers_is_bounded_by_ray_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    with socket.socket() as s:  # something listens (the kernel accepts), but it is not Ray
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        port = s.getsockname()[1]
        ray = _StandInRay(lambda **_: release.wait(60))
        started = time.monotonic()
        try:
            line = _ray_fails(tmp_path, monkeypatch, ray, "--ray-address", f"127.0.0.1:{port}", "--ray-timeout", "1")
        finally:
            release.set()
    assert line == f"error: Ray cluster at 127.0.0.1:{port} did not answer within 1 s"
    assert time.monotonic() - started < 30
    assert [c[0] for c in ray.calls] == ["init"] and ray.calls[0][1]["address"] == f"127.0.0.1:{port}"


def test_a_local_ray_start_that_times_out_is_one_line_and_shut_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def node_timeout(**_: object) -> None:  # Ray's own words (ray/_private/node.py), multi-line here
        raise Exception("The current node timed out during startup. This could happen because\nsome raylets failed")

    ray = _StandInRay(node_timeout)
    line = _ray_fails(tmp_path, monkeypatch, ray, "--ray-timeout", "30")
    assert line.startswith("error: a local Ray cluster (started here) did not start (after ")
    assert line.endswith("of --ray-timeout 30 s): The current node timed out during startup. This could happen because")
    assert [c[0] for c in ray.calls] == ["init", "shutdown"]  # what the failed start left is stopped


def test_a_ray_cluster_that_refuses_the_driver_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def mismatch(**_: object) -> None:
        raise RuntimeError("Version mismatch: The cluster was started with Ray 2.9.0, this is 2.60.0")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        port = s.getsockname()[1]
        line = _ray_fails(tmp_path, monkeypatch, _StandInRay(mismatch), "--ray-address", f"127.0.0.1:{port}")
    assert line.startswith(f"error: Ray cluster at 127.0.0.1:{port} could not be joined (after ")
    assert line.endswith(
        "of --ray-timeout 120 s): Version mismatch: The cluster was started with Ray 2.9.0, this is 2.60.0"
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--executor", "ray", "--ray-timeout", "0"], "--ray-timeout 0: give seconds above 0"),
        (["--executor", "ray", "--ray-timeout", "nan"], "--ray-timeout nan: give seconds above 0"),
        (["--ray-timeout", "5"], "go with --executor ray"),
    ],
)
def test_ray_timeout_is_checked(tmp_path: Path, args: list[str], needle: str) -> None:
    code, _, err = specreg("bench", "admitted", *args, db=tmp_path / "r.db")
    assert code == 2 and needle in err, err


@pytest.mark.slow
def test_real_ray_at_an_address_where_nothing_listens(tmp_path: Path) -> None:
    """With Ray installed: the console script, Ray imported for real, one line, exit 2."""
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'specreg[ray]'")
    db = _admitted_registry(tmp_path)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "specreg", "--db", str(db), "bench", "admitted", "--executor", "ray"]
    cmd += ["--ray-address", f"127.0.0.1:{port}", "--ray-timeout", "3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2, proc.stderr
    assert f"error: Ray cluster at 127.0.0.1:{port} did not answer within 3 s (connection refused)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
