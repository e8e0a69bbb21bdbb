"""`bench admitted --executor ray`: one Ray task per admitted pair (x hardware class), results as bundles.

Ray schedules, retries nothing on its own (max_retries=0: a run that died half-way is a failed
run, not a silent re-measurement) and carries the bundle back. The driver imports each bundle
in one transaction (nothing half-imported). A node that fails the task (its model's SHA-256
differs, a file is missing), a worker or node that dies, a task lost: each becomes a failed
run in this registry with the reason and the node, and the other tasks go on.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specreg.benchmark.run.runner import new_run_id
from specreg.benchmark.store.runstore import RunStore, now
from specreg.errors import NotAdmitted, SpecregError, UsageError
from specreg.exchange.bundle import import_bundles
from specreg.exchange.portable import artifact_records, pair_records
from specreg.exchange.ray_node import TaskOutcome, make_task, run_task
from specreg.schemas.bench import RunInfo
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.registry import PairRecord

if TYPE_CHECKING:
    from specreg.registry.store import Registry

INSTALL_HINT = "pip install 'specreg[ray]'"
CONNECT_TIMEOUT_S = 120.0  # `--ray-timeout`: joining a cluster, or starting one here on a loaded machine
TIMEOUT_HINT = "check --ray-address (or RAY_ADDRESS), or give it longer with --ray-timeout SECONDS"


def need_ray() -> Any:
    """The ray module, or one clear line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise SpecregError("--executor ray needs Ray, which is not installed", hint=INSTALL_HINT) from None
    return ray


def parse_resources(values: list[str] | None) -> list[dict[str, float]]:
    """`--resources '{"GPU": 1}'` (repeatable: one hardware class each) as resource dicts."""
    out: list[dict[str, float]] = []
    for raw in values or []:
        try:
            spec = json.loads(raw)
        except ValueError as exc:
            raise UsageError(f"--resources {raw!r} is not JSON ({exc})") from None
        if not isinstance(spec, dict) or not all(
            isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
            for k, v in spec.items()
        ):
            raise UsageError(f'--resources {raw!r}: give an object of resource names and amounts, e.g. {{"GPU": 1}}')
        out.append({k: float(v) for k, v in spec.items()})
    return out or [{}]


@dataclass
class RayOutcome:
    """Runs imported from the nodes, and failed runs recorded here (with their reasons)."""

    imported: list[str] = field(default_factory=list)
    failed: list[RunInfo] = field(default_factory=list)


def _host_port(address: str) -> tuple[str, int] | None:
    """`host:port` or `ray://host:port` (IPv6 in brackets) as a TCP endpoint; None for `auto`/`local`."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def connect(ray: Any, address: str | None, timeout_s: float, init: dict[str, Any] | None = None) -> None:
    """Join the cluster at `address` (or start one here) within `timeout_s`, or one line saying
    where and how long. ray.init itself has no bound: with nothing at the address it retries for
    minutes, and a local start on a loaded machine fails with Ray's own node timeout."""
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    where = f"Ray cluster at {address}" if address else "a local Ray cluster (started here)"
    started = time.monotonic()
    endpoint = _host_port(address) if address else None
    if endpoint is not None:  # a cheap check first: nothing listening is known in milliseconds
        try:
            socket.create_connection(endpoint, timeout=timeout_s).close()
        except OSError as exc:
            reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__).lower()
            raise SpecregError(f"{where} did not answer within {timeout_s:g} s ({reason})", hint=TIMEOUT_HINT) from None
    failure: list[BaseException] = []
    # errors only: Ray's Python-side chatter would bury the one line this ends with (its C++ side
    # still prints a warning per failed attempt, every 5 s, whatever RAY_BACKEND_LOG_LEVEL says)
    options = {"address": address, "ignore_reinit_error": True, "include_dashboard": False, "logging_level": "ERROR"}

    def start() -> None:
        try:
            ray.init(**{**options, **(init or {})})
        except BaseException as exc:  # reported by the caller, as one line
            failure.append(exc)

    worker = threading.Thread(target=start, name="specreg-ray-init", daemon=True)
    worker.start()
    worker.join(max(0.0, timeout_s - (time.monotonic() - started)))
    if worker.is_alive():  # still trying: give up on it (a daemon thread; the command exits)
        raise SpecregError(f"{where} did not answer within {timeout_s:g} s", hint=TIMEOUT_HINT)
    if failure:
        _shutdown(ray)  # processes a failed local start left behind
        elapsed = time.monotonic() - started
        what = "could not be joined" if address else "did not start"  # e.g. a Ray version mismatch, a node timeout
        why = _first_line(failure[0])
        raise SpecregError(
            f"{where} {what} (after {elapsed:.0f} s of --ray-timeout {timeout_s:g} s): {why}", hint=TIMEOUT_HINT
        )


def _shutdown(ray: Any) -> None:
    with contextlib.suppress(Exception):  # best effort: the error being reported is the start's
        ray.shutdown()


def _pairs(reg: Registry, pair_ids: list[int] | None) -> list[PairRecord]:
    if not pair_ids:
        pairs = reg.pairs(admitted=True)
        if not pairs:
            raise NotAdmitted(
                "no admitted pairs in the registry", hint="admit one with `specreg check pair TARGET DRAFT`"
            )
        return pairs
    out = []
    for pid in pair_ids:
        pair = reg.get_pair(pid)
        if not pair.admitted:
            raise NotAdmitted(f"pair {pid} ({pair.method}) was rejected, not benchmarked")
        out.append(pair)
    return out


def _options(ray: Any, spec: dict[str, float]) -> dict[str, Any]:
    opts: dict[str, Any] = {"max_retries": 0, "num_cpus": spec.get("CPU", 1.0)}
    if "GPU" in spec:
        opts["num_gpus"] = spec["GPU"]
    rest = {k: v for k, v in spec.items() if k not in ("CPU", "GPU")}
    if rest:
        opts["resources"] = rest
    return opts


def bench_on_ray(
    reg: Registry,
    opts: BenchSettings,
    pair_ids: list[int] | None,
    *,
    address: str | None = None,
    resources: list[dict[str, float]] | None = None,
    note: Callable[[str], None] = lambda _text: None,
    init: dict[str, Any] | None = None,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> RayOutcome:
    """Send one task per pair and resource spec, wait for all, import each result or record its failure.

    Nothing is stored before the cluster answers, so the registry is as it was when the cluster
    cannot be reached.

    Args:
        reg: the registry the pairs come from and the results go to.
        opts: the benchmark's settings, as `bench admitted` would run them on one machine.
        pair_ids: the pairs to run (None: every admitted pair).
        address: the Ray cluster (None: `RAY_ADDRESS`, else a local cluster started here).
        resources: one Ray resource spec per hardware class (`--resources`); each pair runs
            once per spec.
        note: called with a line of progress for people.
        init: more `ray.init` options.
        connect_timeout_s: how long joining the cluster may take.

    Raises:
        SpecregError: when Ray is not installed, or the cluster does not start or answer
            within `connect_timeout_s`.
    """
    ray = need_ray()
    pairs = _pairs(reg, pair_ids)
    connect(ray, address, connect_timeout_s, init)
    remote = ray.remote(run_task)
    store, outcome = RunStore(reg), RayOutcome()
    pending: list[tuple[Any, PairRecord, dict[str, float], RunInfo]] = []
    for pair in pairs:
        shas = [pair.target_sha256, *([pair.draft_sha256] if pair.draft_sha256 else [])]
        paths = {s: reg.get_artifact(s).paths for s in shas}
        record = next(pair_records(reg.conn, [pair.id]))
        arts = list(artifact_records(reg.conn, shas))
        for spec in resources or [{}]:
            info = RunInfo(
                run_id=new_run_id(),
                pair_id=pair.id,
                status="failed",
                method=pair.method,
                target_sha256=pair.target_sha256,
                draft_sha256=pair.draft_sha256,
                started_at=now(),
            )
            task = make_task(info.run_id, record, arts, paths, opts)
            ref = remote.options(**_options(ray, spec)).remote(task.model_dump_json())
            pending.append((ref, pair, spec, info))
            note(f"pair {pair.id}: task {info.run_id} sent ({json.dumps(spec) if spec else 'default resources'})")
    for ref, pair, _spec, info in pending:
        reason = _collect(ray, ref, reg, opts, outcome)
        if reason is not None:
            info.status_reason = reason
            store.record_failed(info)
            outcome.failed.append(info)
            note(f"pair {pair.id}: run {info.run_id} failed: {reason}")
    return outcome


def _collect(ray: Any, ref: Any, reg: Registry, opts: BenchSettings, outcome: RayOutcome) -> str | None:
    """Wait for one task and import its bundle; the failure's reason, or None when it landed."""
    try:
        text = ray.get(ref, timeout=opts.run_timeout_s + opts.start_timeout_s)
    except ray.exceptions.GetTimeoutError:
        ray.cancel(ref, force=True)
        return f"task lost: no answer within {opts.run_timeout_s + opts.start_timeout_s:g}s"
    except ray.exceptions.RayError as exc:  # worker or node died, task cancelled, object lost
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"node failure ({type(exc).__name__}): {first[:300]}"
    res = TaskOutcome.model_validate_json(text)
    if not res.ok or res.bundle is None:
        return f"on {res.host}: {res.reason or 'no result'}"
    with tempfile.TemporaryDirectory(prefix="specreg-ray-") as tmp:
        path = Path(tmp) / f"{res.task_id}.zip"
        path.write_bytes(res.bundle)
        try:
            result = import_bundles(reg, [path])
        except SpecregError as exc:
            return f"bundle from {res.host} refused: {exc.message}"
    outcome.imported += result.runs
    return None
