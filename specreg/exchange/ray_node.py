"""One benchmark run on another machine: the task a driver sends, and what the node does with it.

The node needs no registry of its own: it starts an empty one in a folder of the task's, enters
the driver's artifact records and the pair's verdicts, finds each model (the driver's path, else
the hub file at the pinned commit), hashes it and refuses a SHA-256 that differs from the driver's
before anything is measured. The driver's verdicts are evidence about the driver: the node checks
the pair itself from the files it found (exchange/bundle.check_here) and benchmarks it only if
its own checks admit it. Then it runs the ordinary bench, each write of the run sent to the
driver as it is made (exchange/run_stream.py). The folder and the servers go when the task ends,
or, if its process is killed, with its guard (exchange/task_guard.py).
Nothing here imports an executor: `ray_executor` ships `run_task` to Ray; any other engine could.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from specreg.errors import ArtifactChanged, ArtifactNotFound, SpecregError
from specreg.exchange.task_guard import TASK_VAR, TaskGuard

if TYPE_CHECKING:
    from specreg.exchange.run_stream import Send
    from specreg.schemas.bench import NodeInfo
    from specreg.schemas.bench_settings import BenchSettings


class RemoteTask(BaseModel):
    """Everything a node needs to benchmark one pair, as plain JSON (no paths into the driver's registry)."""

    task_id: str
    pair: dict[str, Any]  # portable pair record: identity and verdicts
    artifacts: list[dict[str, Any]]  # portable artifact records of the target and the draft
    paths: dict[str, list[str]] = Field(default_factory=dict)  # sha256 -> the driver's paths of it
    options: dict[str, Any]  # BenchSettings as JSON data
    workload_name: str | None = None  # a workload file's name, when the driver's workload is a file
    workload_text: str | None = None


class TaskOutcome(BaseModel):
    """How a task ended on its node: its run's rows went to the driver as they were measured
    (exchange/run_stream.py); this says only whether the task got through, or why not."""

    task_id: str
    host: str
    ok: bool
    reason: str | None = None


def make_task(
    task_id: str,
    pair: dict[str, Any],
    artifacts: list[dict[str, Any]],
    paths: dict[str, list[str]],
    opts: BenchSettings,
) -> RemoteTask:
    """A task for one pair; a workload file travels as its text (the node may not have it)."""
    options = opts.model_dump(mode="json")
    name = text = None
    wl = Path(str(options.get("workload", "default"))).expanduser()
    if wl.is_file():
        name, text = wl.name, wl.read_text(encoding="utf-8")
    return RemoteTask(
        task_id=task_id,
        pair=pair,
        artifacts=artifacts,
        paths=paths,
        options=options,
        workload_name=name,
        workload_text=text,
    )


def _locate(reg: Any, sha: str, record: dict[str, Any], paths: list[str]) -> None:
    """Register the model's bytes on this node: the driver's path, else the hub file at its commit;
    a SHA-256 other than the driver's is refused before any measurement."""
    for path in paths:
        if os.path.isfile(path):
            rec = reg.add_artifact(path, rehash=True)
            if rec.sha256 != sha:
                raise ArtifactChanged(path, sha, rec.sha256)
            return
    repo, revision, filename = record.get("repo"), record.get("revision"), record.get("filename")
    if repo and revision and filename:
        from specreg.sources.provenance import fetch  # the hub client only when a file must be fetched

        rec, fetched = fetch(reg, repo, filename, revision=revision)
        if rec.sha256 != sha:
            raise ArtifactChanged(str(fetched), sha, rec.sha256)
        return
    raise ArtifactNotFound(
        f"model {sha[:12]} is not at {', '.join(paths) or 'any known path'} on this node, "
        "and its record names no hub repo, commit and file to fetch it from"
    )


def run_task(task_json: str, send: Send, node: NodeInfo) -> str:
    """Run one task on this machine, sending each write of its run to `send` as it is made;
    returns a TaskOutcome as JSON (never raises a SpecregError). Its folder and servers are gone
    when it returns, and are removed by its guard if its process is killed instead."""
    task = RemoteTask.model_validate_json(task_json)
    host = socket.gethostname() or "unknown"
    folder = Path(tempfile.mkdtemp(prefix="specreg-task-"))
    token = task.task_id  # the run id: what a driver on this machine looks for (ray_executor.py)
    guard = TaskGuard(folder, token)
    previous = {k: os.environ.get(k) for k in ("SPECREG_HOME", "SPECREG_DB", TASK_VAR)}
    try:
        os.environ["SPECREG_HOME"] = str(folder)  # the scratch registry and the run's server logs
        os.environ["SPECREG_DB"] = str(folder / "registry.db")
        os.environ[TASK_VAR] = token  # every server it starts carries it: the guard finds them
        _bench(task, folder, send, node)
        return TaskOutcome(task_id=task.task_id, host=host, ok=True).model_dump_json()
    except SpecregError as exc:
        return TaskOutcome(task_id=task.task_id, host=host, ok=False, reason=exc.message).model_dump_json()
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(folder, ignore_errors=True)
        guard.release()


def _bench(task: RemoteTask, tmp: Path, send: Send, node: NodeInfo) -> None:
    from specreg import __version__
    from specreg.benchmark.run.runner import Runner
    from specreg.errors import NotAdmitted
    from specreg.exchange.bundle import ImportResult, check_here
    from specreg.exchange.portable import find_pair, merge_artifacts, merge_pairs
    from specreg.exchange.run_stream import StreamingStore
    from specreg.registry.store import Registry
    from specreg.schemas.bench_settings import BenchSettings

    options = dict(task.options)
    if task.workload_text is not None:
        wl = tmp / (task.workload_name or "workload.jsonl")
        wl.write_text(task.workload_text, encoding="utf-8")
        options["workload"] = str(wl)
    with Registry(tmp / "registry.db", show_progress=False) as reg:
        with reg.write():
            merge_artifacts(reg.conn, task.artifacts)
        for rec in task.artifacts:
            _locate(reg, rec["sha256"], rec, task.paths.get(rec["sha256"], []))
        with reg.write():  # the driver's verdicts are evidence; the node checks the pair itself
            digest = hashlib.sha256(task.model_dump_json().encode()).hexdigest()
            merged = merge_pairs(reg.conn, [task.pair], ("ray driver", __version__), digest)
        done = ImportResult()
        check_here(reg, merged.unchecked, done)
        if done.not_checked:
            raise NotAdmitted(f"the pair could not be checked on this node: {'; '.join(done.not_checked.values())}")
        pair_id = find_pair(reg.conn, task.pair)
        named = str(task.options.get("workload")) if task.workload_text is not None else None
        store = StreamingStore(reg, send, node, workload=named)
        runner = Runner(reg, BenchSettings.model_validate(options), store=store)
        runner.bench([pair_id] if pair_id is not None else [])
