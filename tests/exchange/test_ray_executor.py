"""Runs dispatched to Ray nodes, without a cluster: the node's task, the rows it streams, the driver's copy.

The node side (`ray_node.run_task`) is what Ray ships to a worker; it runs here once on the real
llama.cpp server, its messages kept (`streamed`), and every test replays them into a driver
registry of its own: the run lands under the driver's run id with its node, a node that died
half-way leaves an aborted run with its rows, a message that is not specreg's ends the run, a
run with doctored summaries is refused. The guard that cleans up after a killed task is tested
on a real killed process. What needs Ray itself is in tests/exchange/test_ray_executor_cluster.py
(slow): a real two-node cluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _audit_world import specreg
from _bench_helpers import admit, db_rows, workload
from _registry_helpers import model
from _shared import built_once

from specreg.benchmark.store.runstore import RunStore
from specreg.exchange.bundle import export_bundle, import_bundles
from specreg.exchange.portable import artifact_records, pair_records
from specreg.exchange.ray_node import TaskOutcome, make_task, run_task
from specreg.exchange.run_stream import RunMirror, StreamError
from specreg.registry.db import now
from specreg.registry.store import Registry
from specreg.schemas.bench import NodeInfo, RunInfo
from specreg.schemas.bench_settings import BenchSettings
from specreg.text import whole_sentences

ITEMS = [
    {"id": "rep", "stratum": "repetitive", "max_tokens": 12, "prompt": "key: value\nname: a\nkey: value\nname:"},
    {"id": "chat", "stratum": "chat", "max_tokens": 12, "prompt": "Hello, how are"},
]
NODE = NodeInfo(node_id="b" * 56, host="node-b", address="10.0.0.2", resources={"hostB": 1.0})
PLACED = {"op": "placed", "node": NODE.model_dump_json(), "specreg_version": "0.1.0"}


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


def _task(reg: Registry, pair_id: int, opts: BenchSettings) -> tuple[RunInfo, str]:
    """The driver's side of sending a task: the run it will be recorded as, and the task."""
    pair = reg.get_pair(pair_id)
    shas = [pair.target_sha256, *([pair.draft_sha256] if pair.draft_sha256 else [])]
    paths = {s: reg.get_artifact(s).paths for s in shas}
    record = next(pair_records(reg.conn, [pair_id]))
    info = RunInfo(
        run_id="20260101-000000-abcdef",
        pair_id=pair_id,
        status="failed",
        method=pair.method,
        target_sha256=pair.target_sha256,
        draft_sha256=pair.draft_sha256,
        started_at=now(),
    )
    task = make_task(info.run_id, record, list(artifact_records(reg.conn, shas)), paths, opts)
    return info, task.model_dump_json()


def _build(folder: Path) -> None:
    """The driver registry (a pair), and the messages one real node task sent for it."""
    with Registry(folder / "driver.db", show_progress=False) as reg:
        pid = admit(reg, model(folder, "t.gguf"), model(folder, "d.gguf", name="tiny-draft"))
        info, task = _task(reg, pid, _opts(folder))
    sent: list[dict[str, Any]] = []
    scratch = folder / "tmp"
    scratch.mkdir()
    previous, tempfile.tempdir = tempfile.tempdir, str(scratch)  # where the node makes its folder
    try:
        res = TaskOutcome.model_validate_json(run_task(task, sent.append, NODE))
    finally:
        tempfile.tempdir = previous
    assert res.ok, res.reason
    (folder / "info.json").write_text(info.model_dump_json())
    (folder / "sent.json").write_text(
        json.dumps([{**m, "data": m["data"].hex()} if m["op"] == "log" else m for m in sent])
    )


@pytest.fixture(scope="module")
def streamed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_once(tmp_path_factory, "ray-streamed", _build)


def _replay(streamed: Path, tmp: Path) -> tuple[Path, RunInfo, list[dict[str, Any]]]:
    """A copy of the driver registry, the run it sent, and the node's messages (placed first)."""
    db = tmp / "driver.db"
    db.write_bytes((streamed / "driver.db").read_bytes())
    info = RunInfo.model_validate_json((streamed / "info.json").read_text())
    sent = [
        {**m, "data": bytes.fromhex(m["data"])} if m["op"] == "log" else m
        for m in json.loads((streamed / "sent.json").read_text())
    ]
    return db, info, [PLACED, *sent]


def test_the_node_leaves_no_folder_and_sends_its_run_in_the_runners_order(streamed: Path) -> None:
    assert list((streamed / "tmp").iterdir()) == []  # the task's scratch folder went with it
    ops = [m["op"] for m in json.loads((streamed / "sent.json").read_text())]
    assert ops[0] == "create_run" and ops[-1] == "finish" and ops[-3:-1] == ["log", "log"]
    assert ops.count("add_request") == 2 * len(ITEMS) and "set_summaries" in ops


def test_a_streamed_run_lands_under_the_drivers_id_and_names_its_node(streamed: Path, tmp_path: Path) -> None:
    db, info, msgs = _replay(streamed, tmp_path)
    with Registry(db, show_progress=False) as reg:
        mirror = RunMirror(reg, info, {"hostB": 1.0})
        for m in msgs:
            mirror.apply(m)
        run = RunStore(reg).load(info.run_id)
    assert run.info.status == "complete" and run.info.pair_id == info.pair_id
    assert run.info.runner_pid == os.getpid() and run.info.run_dir == str(db.parent / "runs" / info.run_id)
    assert run.info.node == NODE and run.manifest is not None and run.manifest.node == NODE
    assert run.manifest.draft.pair_id == info.pair_id
    wl = str(streamed / "wl.jsonl")  # the workload as the driver named it, not the node's copy of it
    assert run.manifest.request.workload == wl and run.manifest.settings and run.manifest.settings.workload == wl
    assert len(run.requests) == 2 * len(ITEMS) and run.summaries
    for c in run.conditions:  # the node's pids and paths are not kept; its logs are, here
        assert c.server_pid is None and c.log_path and Path(c.log_path).read_bytes().strip()
    origin = db_rows(db, "SELECT * FROM run_origins WHERE run_id = ?", (info.run_id,))[0]
    assert (origin["host"], origin["node_id"], origin["node_address"]) == ("node-b", NODE.node_id, "10.0.0.2")
    assert json.loads(origin["resources_json"]) == {"hostB": 1.0} and origin["bundle_digest"] is None
    assert origin["run_digest"] and len(origin["run_digest"]) == 64
    code, out, _ = specreg("runs", db=db)
    assert code == 0 and "node-b (ray bbbbbb)" in out
    code, out, _ = specreg("runs", "show", info.run_id, db=db)
    assert code == 0 and f"ran on Ray node {'b' * 12} on node-b (10.0.0.2), placed with" in " ".join(out.split())
    code, out, _ = specreg("runs", "show", info.run_id, "--json", db=db)
    assert json.loads(out)["info"]["node"]["node_id"] == NODE.node_id
    code, _, err = specreg("runs", "show", info.run_id, "--report", str(db.parent / "run.md"), db=db)
    assert code == 0, err
    assert f"Evidence: measured on Ray node {'b' * 12} on node-b" in (db.parent / "run.md").read_text()


def test_the_audit_names_the_node_a_streamed_run_was_measured_on(streamed: Path, tmp_path: Path) -> None:
    from specreg.audit.trust import EvidenceTrust
    from specreg.schemas.audit import Policy, TrustPolicy

    db, info, msgs = _replay(streamed, tmp_path)
    with Registry(db, show_progress=False) as reg:
        mirror = RunMirror(reg, info, {"hostB": 1.0})
        for m in msgs:
            mirror.apply(m)
        trust = EvidenceTrust(reg, Policy(trust=TrustPolicy(require_signed_evidence=True)), "builtin")
        where = f'Ray node {"b" * 12} on node-b (10.0.0.2), placed with {{"hostB": 1.0}}'
        assert trust.describe(info.run_id) == f"unsigned; measured on {where}, streamed from Ray"
        assert trust.refusal(info.run_id) == (
            f"run {info.run_id} (streamed from Ray, {where}): refused as evidence: not signed by any [trust] signer"
        )


def test_a_node_that_dies_midway_leaves_an_aborted_run_with_every_row_it_sent(streamed: Path, tmp_path: Path) -> None:
    db, info, msgs = _replay(streamed, tmp_path)
    first = next(i for i, m in enumerate(msgs) if m["op"] == "add_request")
    with Registry(db, show_progress=False) as reg:
        mirror = RunMirror(reg, info, {"hostB": 1.0})
        for m in msgs[: first + 1]:
            mirror.apply(m)
        mirror.close("aborted", f"on {mirror.where()}: NodeDiedError: the node died; finished rows kept")
        run = RunStore(reg).load(info.run_id)
    assert run.info.status == "aborted" and "node-b" in (run.info.status_reason or "")
    assert len(run.requests) == 1 and run.summaries  # the row it sent, and summaries drawn from it
    assert {c.status for c in run.conditions} <= {"aborted", "ok", "failed"}
    assert any(c.status == "aborted" for c in run.conditions)
    assert db_rows(db, "SELECT node_id FROM run_origins")[0]["node_id"] == NODE.node_id


def test_a_task_that_made_no_run_is_a_failed_run_naming_its_node(streamed: Path, tmp_path: Path) -> None:
    db, info, _ = _replay(streamed, tmp_path)
    with Registry(db, show_progress=False) as reg:
        mirror = RunMirror(reg, info, {})
        mirror.apply(PLACED)
        mirror.close("aborted", f"on {mirror.where()}: model d.gguf has another sha256")
    code, out, _ = specreg("runs", db=db)
    assert code == 0 and "failed" in out and "node-b (ray bbbbbb)" in out and "local" not in out


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda m: {**m, "op": "drop_table"}, "unknown message"),
        (lambda m: {**m, "row": '{"condition_idx": "x"}'} if m["op"] == "add_request" else m, "does not read"),
        (
            lambda m: (
                {**m, "info": m["info"].replace('"target_sha256":"', '"target_sha256":"f')}
                if m["op"] == "create_run"
                else m
            ),
            "not the pair's",
        ),
    ],
)
def test_a_message_that_is_not_specregs_is_refused_by_name(
    streamed: Path, tmp_path: Path, change: Callable[[dict[str, Any]], dict[str, Any]], needle: str
) -> None:
    db, info, msgs = _replay(streamed, tmp_path)
    with Registry(db, show_progress=False) as reg:
        mirror = RunMirror(reg, info, {})
        with pytest.raises(StreamError, match=needle):
            for m in msgs:
                mirror.apply(change(m))


def test_doctored_summaries_fail_the_run_as_an_import_would(streamed: Path, tmp_path: Path) -> None:
    db, info, msgs = _replay(streamed, tmp_path)

    def doctor(m: dict[str, Any]) -> dict[str, Any]:
        if m["op"] != "set_summaries":
            return m
        out = []
        for text in m["summaries"]:
            s = json.loads(text)
            if s.get("n_requests"):
                s["n_requests"] += 1
            out.append(json.dumps(s))
        return {**m, "summaries": out}

    with Registry(db, show_progress=False) as reg:
        mirror = RunMirror(reg, info, {})
        for m in msgs:
            mirror.apply(doctor(m))
        run = RunStore(reg).load(info.run_id)
    assert run.info.status == "failed"
    assert "summaries are not what its request rows give" in (run.info.status_reason or "")


def test_a_streamed_run_travels_in_a_bundle_with_its_node(streamed: Path, tmp_path: Path) -> None:
    db, info, msgs = _replay(streamed, tmp_path)
    with Registry(db, show_progress=False) as reg:
        mirror = RunMirror(reg, info, {"hostB": 1.0})
        for m in msgs:
            mirror.apply(m)
        export_bundle(reg, tmp_path / "b.zip", run_ids=[info.run_id])
    other = tmp_path / "other"
    other.mkdir()
    with Registry(other / "r.db", show_progress=False) as reg:
        result = import_bundles(reg, [tmp_path / "b.zip"])
        run = RunStore(reg).load(info.run_id)
    assert result.runs == [info.run_id] and run.info.host == "node-b" and run.info.node == NODE


def test_the_node_refuses_a_model_whose_sha256_differs_before_measuring(tmp_path: Path) -> None:
    with Registry(tmp_path / "driver.db", show_progress=False) as reg:
        pid = admit(reg, model(tmp_path, "t.gguf"), model(tmp_path, "d.gguf", name="tiny-draft"))
        _, task = _task(reg, pid, _opts(tmp_path))
    model(tmp_path, "d.gguf", name="another-draft")  # the node's copy is not the registered bytes
    sent: list[dict[str, Any]] = []
    res = TaskOutcome.model_validate_json(run_task(task, sent.append, NODE))
    assert not res.ok and sent == []
    assert "d.gguf" in (res.reason or "") and "registered sha256" in (res.reason or "")


GUARDED = """
import os, subprocess, sys, time
from pathlib import Path
from specreg.exchange.task_guard import TASK_VAR, TaskGuard
folder, token = Path(sys.argv[1]), sys.argv[2]
os.chdir(sys.argv[3])  # a Ray worker sits in whatever folder its raylet started in
guard = TaskGuard(folder, token)
os.environ[TASK_VAR] = token
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print(child.pid, flush=True)
time.sleep(300)
"""


def test_a_killed_task_leaves_no_folder_and_no_process(tmp_path: Path) -> None:
    """The guard (task_guard.py): the task's process is SIGKILLed, as a node's death or the
    driver's cancel kills it; its folder and the server it started go anyway."""
    from specreg.exchange.task_guard import TASK_VAR
    from specreg.servers.launcher import marked

    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "registry.db").write_bytes(b"x")
    elsewhere = tmp_path / "a-source-tree"  # an older specreg checkout, say: not what the guard runs
    (elsewhere / "specreg").mkdir(parents=True)
    (elsewhere / "specreg" / "__init__.py").write_text("raise ImportError('not this specreg')\n")
    token = f"test-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(GUARDED), str(folder), token, str(elsewhere)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    assert [p.pid for p in marked(token, TASK_VAR)] == [child]
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (folder.exists() or marked(token, TASK_VAR)):
        time.sleep(0.05)
    assert not folder.exists() and marked(token, TASK_VAR) == []


def test_whole_sentences_never_cut_one() -> None:
    ray_text = (
        "Task failed due to the node (where this task was running) dying. Node IP: 127.0.0.1, node ID: abc.\n\n"
        "Traceback (most recent call last):\n  File x"
    )
    assert whole_sentences(ray_text) == (
        "Task failed due to the node (where this task was running) dying. Node IP: 127.0.0.1, node ID: abc."
    )
    long = "The worker died unexpectedly while executing this task. " + "Check the logs " * 40 + "now."
    assert whole_sentences(long, 100) == "The worker died unexpectedly while executing this task."


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


class _StandInRay(types.ModuleType):
    """What specreg calls of Ray before anything is sent (a cluster is slow to start: the slow
    tests start real ones): `init` blocks like a cluster that never answers, or raises like a
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


def test_a_ray_address_that_refuses_says_refused_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray = _StandInRay(lambda **_: None)
    started = time.monotonic()
    line = _ray_fails(tmp_path, monkeypatch, ray, "--ray-address", f"127.0.0.1:{port}", "--ray-timeout", "60")
    assert line == f"error: Ray cluster at 127.0.0.1:{port} refused the connection (nothing listens there)"
    assert ray.calls == [] and time.monotonic() - started < 30  # not Ray's minutes of retries


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
    assert ray.calls[0][1]["log_to_driver"] is False  # workers' output never reaches this terminal


def test_a_local_ray_start_that_fails_is_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def node_timeout(**_: object) -> None:  # Ray's own words (ray/_private/node.py), over two lines here
        raise Exception(
            "The current node timed out during startup. This could happen because\nsome of the raylet failed"
        )

    monkeypatch.setenv("HOME", str(tmp_path))
    ray = _StandInRay(node_timeout)
    line = _ray_fails(tmp_path, monkeypatch, ray, "--ray-timeout", "30")
    assert line.startswith("error: a local Ray cluster (started here) did not start (after ")
    assert line.endswith(
        "of --ray-timeout 30 s, 3 tries): The current node timed out during startup. "
        "This could happen because some of the raylet failed"
    )
    assert [c[0] for c in ray.calls] == ["init", "shutdown"] * 3  # what each failed start left is stopped
    init = ray.calls[0][1]
    assert init["address"] == "local" and init["log_to_driver"] is False and init["logging_level"] == "ERROR"
    assert not Path(str(init["_temp_dir"])).exists()  # its own folder, removed


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


def test_a_resource_class_no_live_node_offers_is_named_with_what_they_offer() -> None:
    from specreg.exchange.ray_executor import _unplaceable

    head = {"Alive": True, "Resources": {"CPU": 1.0, "memory": 1e9, "node:10.0.0.1": 1.0}}
    node_b = {"Alive": True, "Resources": {"CPU": 1.0, "hostB": 1.0, "node:10.0.0.2": 1.0}}
    ray = types.SimpleNamespace(nodes=lambda: [head, {**node_b, "Alive": False}])  # node B has died
    assert _unplaceable(types.SimpleNamespace(nodes=lambda: [head, node_b]), {"hostB": 1.0}, "c") is None
    assert _unplaceable(ray, {}, "c") is None
    assert _unplaceable(ray, {"hostB": 1.0}, "the Ray cluster at h:1") == (
        'no node of the Ray cluster at h:1 offers {"CPU": 1.0, "hostB": 1.0} (its nodes offer CPU, memory)'
    )
