"""One benchmark run on another machine: the task a driver sends, and what the node does with it.

The node needs no registry of its own: it starts an empty one in a temporary folder, enters the
driver's artifact records and the pair's verdicts, finds each model (the driver's path, else the
hub file at the pinned commit), hashes it and refuses a SHA-256 that differs from the driver's
before anything is measured. The driver's verdicts are evidence about the driver: the node checks
the pair itself from the files it found (exchange/bundle.check_here) and benchmarks it only if
its own checks admit it. Then it runs the ordinary bench and returns the run as a bundle.
Nothing here imports an executor: `ray_executor` ships `run_task` to Ray; any other engine could.
"""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from specreg.errors import ArtifactChanged, ArtifactNotFound, SpecregError

if TYPE_CHECKING:
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
    """What a node sends back: a bundle with the run, or why there is none."""

    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    task_id: str
    host: str
    ok: bool
    bundle: bytes | None = None
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


def run_task(task_json: str) -> str:
    """Run one task on this machine; returns a TaskOutcome as JSON (never raises a SpecregError)."""
    task = RemoteTask.model_validate_json(task_json)
    host = socket.gethostname() or "unknown"
    previous = {k: os.environ.get(k) for k in ("SPECREG_HOME", "SPECREG_DB")}
    try:
        with tempfile.TemporaryDirectory(prefix="specreg-task-") as tmp:
            os.environ["SPECREG_HOME"] = tmp  # run logs go with the run into the bundle, then away
            os.environ["SPECREG_DB"] = str(Path(tmp) / "registry.db")
            data = _bench(task, Path(tmp))
        return TaskOutcome(task_id=task.task_id, host=host, ok=True, bundle=data).model_dump_json()
    except SpecregError as exc:
        return TaskOutcome(task_id=task.task_id, host=host, ok=False, reason=exc.message).model_dump_json()
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _bench(task: RemoteTask, tmp: Path) -> bytes:
    from specreg import __version__
    from specreg.benchmark.run.runner import Runner
    from specreg.errors import NotAdmitted
    from specreg.exchange.bundle import ImportResult, check_here, export_bundle
    from specreg.exchange.portable import find_pair, merge_artifacts, merge_pairs
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
        runner = Runner(reg, BenchSettings.model_validate(options))
        runs = runner.bench([pair_id] if pair_id is not None else [])
        out = tmp / "run.zip"
        export_bundle(reg, out, run_ids=[r.info.run_id for r in runs])
        return out.read_bytes()
