"""`bench admitted --executor ray`: one Ray task per admitted pair (x hardware class), rows as they are measured.

Ray schedules and retries nothing on its own (max_retries=0: a run that died half-way is an
aborted run, not a silent re-measurement). Each task streams its run's writes back through a
queue actor on the driver's node (exchange/run_stream.py), and the driver writes each one here in
its own transaction, under the run id it printed when it sent the task: a node that dies leaves
its run `aborted` with every row it finished, naming the node. A task runs at most its run's
`--budget` (or `--run-timeout`) plus one server start; past that the driver ends it. Every run
records the node it ran on (manifest and run_origins).

Without an address, the command starts a Ray cluster of its own on this machine, from the main
thread (Ray's head processes die with the thread that started them), in a folder of its own, and
stops it and removes that folder when it ends, however it ends. Ray's own output stays out of the
terminal: workers' output is not forwarded and Ray's loggers here log errors only; Ray's processes
log to its session folder on each node. A failure reaches the user as the run's reason, in whole
sentences.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specreg.benchmark.run.runner import new_run_id
from specreg.errors import NotAdmitted, SpecregError, UsageError
from specreg.exchange.portable import artifact_records, pair_records
from specreg.exchange.ray_node import TaskOutcome, make_task, run_task
from specreg.exchange.run_stream import Message, RunMirror, StreamError
from specreg.registry.db import now
from specreg.schemas.bench import NodeInfo, RunInfo, RunStatus
from specreg.text import whole_sentences

if TYPE_CHECKING:
    from specreg.registry.store import Registry
    from specreg.schemas.bench_settings import BenchSettings
    from specreg.schemas.registry import PairRecord

INSTALL_HINT = "pip install 'specreg[ray]'"
CONNECT_TIMEOUT_S = 120.0  # `--ray-timeout`: joining a cluster, or starting one here on a loaded machine
TIMEOUT_HINT = "check --ray-address (or RAY_ADDRESS), or give it longer with --ray-timeout SECONDS"
POLL_S = 0.2  # how often the driver drains the queue and looks at its tasks
PLACE_CHECK_S = 5.0  # how often it asks whether a task still waiting has a node that can run it
GUARD_WAIT_S = 15.0  # after a local cluster stops: its tasks' guards stop their servers (task_guard.py)
RAY_EXIT_WAIT_S = 5.0  # after a local cluster stops: its processes end, or are killed


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
    """The runs the tasks made (any status: complete, incomplete, aborted), and the tasks that
    made none (recorded here as failed runs, with their reasons)."""

    runs: list[str] = field(default_factory=list)
    failed: list[RunInfo] = field(default_factory=list)


# -- the cluster -------------------------------------------------------------------------------


def _host_port(address: str) -> tuple[str, int] | None:
    """`host:port` or `ray://host:port` (IPv6 in brackets) as a TCP endpoint; None for `auto`/`local`."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _why(exc: BaseException) -> str:
    return whole_sentences(str(exc)) or type(exc).__name__


_RAY_INIT = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}


@contextlib.contextmanager
def cluster(
    ray: Any, address: str | None, timeout_s: float, init: dict[str, Any] | None = None
) -> Iterator[LocalCluster | None]:
    """Joined to the cluster at `address` (or RAY_ADDRESS), or to one started here for the
    command (yielded: what it left is removed when the block ends, however it ends); one
    SpecregError naming where and why when neither works."""
    if ray.is_initialized():  # a caller (a test) set Ray up: use it as it is
        yield None
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    local = None
    if address:
        _join(ray, address, timeout_s, init)
    else:
        local = LocalCluster(ray, timeout_s, init)  # a start that failed has cleaned up after itself
    try:
        yield local
    finally:
        _shutdown(ray)
        if local is not None:
            local.remove()


def _join(ray: Any, address: str, timeout_s: float, init: dict[str, Any] | None) -> None:
    """Join the cluster at `address` within `timeout_s`, or one line saying where and why.

    ray.init has no bound of its own: with nothing at the address it retries for minutes. So the
    address is tried first (a refused connection is known in milliseconds), then Ray joins from a
    thread the command waits for at most `timeout_s` (joining starts no process here, so no
    process dies with that thread)."""
    where = f"Ray cluster at {address}"
    started = time.monotonic()
    endpoint = _host_port(address)
    if endpoint is not None:
        try:
            socket.create_connection(endpoint, timeout=timeout_s).close()
        except TimeoutError:
            raise SpecregError(f"{where} did not answer within {timeout_s:g} s", hint=TIMEOUT_HINT) from None
        except ConnectionRefusedError:
            raise SpecregError(
                f"{where} refused the connection (nothing listens there)",
                hint="start the cluster (ray start --head), or check --ray-address (or RAY_ADDRESS)",
            ) from None
        except OSError as exc:
            reason = (exc.strerror or type(exc).__name__).lower()
            raise SpecregError(f"{where} could not be reached ({reason})", hint=TIMEOUT_HINT) from None
    failure: list[BaseException] = []

    def join() -> None:
        try:
            ray.init(**{"address": address, "ignore_reinit_error": True, **_RAY_INIT, **(init or {})})
        except BaseException as exc:  # reported by the caller, as one line
            failure.append(exc)

    worker = threading.Thread(target=join, name="specreg-ray-join", daemon=True)
    worker.start()
    worker.join(max(0.0, timeout_s - (time.monotonic() - started)))
    if worker.is_alive():  # still trying: give up on it (a daemon thread; the command exits)
        raise SpecregError(f"{where} did not answer within {timeout_s:g} s", hint=TIMEOUT_HINT)
    if failure:  # e.g. a Ray version mismatch
        elapsed = time.monotonic() - started
        raise SpecregError(
            f"{where} could not be joined (after {elapsed:.0f} s of --ray-timeout {timeout_s:g} s): {_why(failure[0])}",
            hint=TIMEOUT_HINT,
        )


class LocalCluster:
    """A Ray cluster started here for one command, from the main thread (Ray starts its head
    processes to die with the thread that started them), in a temporary folder of its own.

    One CPU: the runs go one at a time, as the local executor runs them, so that no run measures
    another's load. A start that misses Ray's own startup deadline (its agents are slow on a
    loaded machine) is tried again while --ray-timeout lasts. `remove()` deletes the folder, and
    Ray's token file when this start wrote it."""

    def __init__(self, ray: Any, timeout_s: float, init: dict[str, Any] | None) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise SpecregError("--executor ray without --ray-address starts Ray: only the main thread can")
        self.folder = Path(tempfile.mkdtemp(prefix="specreg-ray-", dir="/tmp"))  # Ray's socket paths must be short
        self.token = Path.home() / ".ray" / "auth_token"
        self._had_token, self._had_dir = self.token.exists(), self.token.parent.exists()
        self.run_ids: list[str] = []  # tasks sent to it: their guards are waited for
        previous = signal.getsignal(signal.SIGTERM)
        started = time.monotonic()
        try:
            for attempt in range(1, 4):
                try:
                    where = {"address": "local", "num_cpus": 1, "_temp_dir": str(self.folder)}
                    ray.init(**{**where, **_RAY_INIT, **(init or {})})
                    break
                except KeyboardInterrupt:  # Ctrl-C while it starts: nothing of it is left either
                    _shutdown(ray)
                    self.remove()
                    raise
                except Exception as exc:
                    _shutdown(ray)
                    elapsed = time.monotonic() - started
                    if attempt == 3 or elapsed * (attempt + 1) / attempt > timeout_s:
                        self.remove()
                        raise SpecregError(
                            f"a local Ray cluster (started here) did not start (after {elapsed:.0f} s of "
                            f"--ray-timeout {timeout_s:g} s, {attempt} tries): {_why(exc)}",
                            hint="give it longer with --ray-timeout SECONDS, or start one (ray start --head) and "
                            "give its address with --ray-address",
                        ) from None
        finally:
            signal.signal(signal.SIGTERM, previous)  # Ray's own exits the process: the caller's stops like Ctrl-C

    def remove(self) -> None:
        """After the cluster stopped: wait for its own processes to end (each names the folder
        on its command line; what is left is killed) and for its tasks' guards (they stop the
        servers the tasks started), then delete what the start wrote."""
        import psutil

        from specreg.exchange.task_guard import GUARD_VAR, TASK_VAR
        from specreg.servers.launcher import kill_marked, marked

        _, alive = psutil.wait_procs(_processes_under(self.folder), timeout=RAY_EXIT_WAIT_S)
        for p in alive:  # e.g. Ray's agents, which outlive their raylet when it is killed
            with contextlib.suppress(psutil.Error):
                p.kill()
        deadline = time.monotonic() + GUARD_WAIT_S
        for rid in self.run_ids:
            while time.monotonic() < deadline and (marked(rid, GUARD_VAR) or marked(rid, TASK_VAR)):
                time.sleep(0.1)
            kill_marked(rid, TASK_VAR)
        shutil.rmtree(self.folder, ignore_errors=True)
        if not self._had_token:
            self.token.unlink(missing_ok=True)
        if not self._had_dir:
            with contextlib.suppress(OSError):  # only an empty folder: never one that holds anything else
                self.token.parent.rmdir()


def _processes_under(folder: Path) -> list[Any]:
    """This user's processes whose command line names `folder`: a local cluster's own (Ray
    passes each its session folder)."""
    import psutil

    me, mark, found = os.getuid(), str(folder), []
    for p in psutil.process_iter(["uids", "cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if (
                p.info["uids"].real == me
                and p.pid != os.getpid()
                and any(mark in a for a in p.info["cmdline"])
                and p.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(p)
    return found


def _shutdown(ray: Any) -> None:
    with contextlib.suppress(Exception):  # best effort: the error being reported is another
        ray.shutdown()


# -- placement ---------------------------------------------------------------------------------


def _options(spec: dict[str, float]) -> dict[str, Any]:
    opts: dict[str, Any] = {"max_retries": 0, "num_cpus": spec.get("CPU", 1.0)}
    if "GPU" in spec:
        opts["num_gpus"] = spec["GPU"]
    rest = {k: v for k, v in spec.items() if k not in ("CPU", "GPU")}
    if rest:
        opts["resources"] = rest
    return opts


def _unplaceable(ray: Any, spec: dict[str, float], where: str) -> str | None:
    """Why no live node of the cluster can ever run a task asking for `spec` (Ray would keep it
    waiting for ever), or None when one can."""
    offers = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    need = {"CPU": spec.get("CPU", 1.0), **spec}
    if any(all(o.get(k, 0.0) >= v for k, v in need.items() if v > 0) for o in offers):
        return None
    have = sorted({k for o in offers for k in o if not k.startswith(("node:", "accelerator_type:"))})
    return f"no node of {where} offers {json.dumps(need)} (its nodes offer {', '.join(have) or 'nothing'})"


def _check_placeable(ray: Any, specs: list[dict[str, float]], where: str) -> None:
    """A resource class no node of the cluster offers is refused before anything is sent."""
    for spec in specs:
        why = _unplaceable(ray, spec, where)
        if why is not None:
            raise UsageError(f"--resources {json.dumps(spec)}: {why}")


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


# -- the node side -----------------------------------------------------------------------------


def node_task(run_id: str, task_json: str, queue: Any, resources: dict[str, float]) -> str:
    """What Ray runs on the node: say where it is, then run the task with each write sent to
    the driver's queue (`put` returns once the queue has the message: a node that dies after it
    has lost nothing it sent)."""
    import ray

    from specreg import __version__

    node = NodeInfo(
        node_id=ray.get_runtime_context().get_node_id(),
        host=socket.gethostname() or "unknown",
        address=ray.util.get_node_ip_address(),
        resources=resources,
    )

    def send(msg: Message) -> None:
        queue.put({"task": run_id, **msg})

    send({"op": "placed", "node": node.model_dump_json(), "specreg_version": __version__})
    return run_task(task_json, send, node)


# -- the driver --------------------------------------------------------------------------------


@dataclass
class _Task:
    ref: Any
    mirror: RunMirror
    started: float | None = None  # when the node said it began (time.monotonic here)
    done: bool = False


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
    """Send one task per pair and resource spec, write what each streams back, end each run.

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
    specs = resources or [{}]
    address = address or os.environ.get("RAY_ADDRESS") or None
    with cluster(ray, address, connect_timeout_s, init) as local:
        _check_placeable(ray, specs, f"the Ray cluster at {address}" if address else "the Ray cluster started here")
        from ray.util.queue import Queue
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
        queue = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})
        remote = ray.remote(node_task)
        tasks = []
        for pair in pairs:
            shas = [pair.target_sha256, *([pair.draft_sha256] if pair.draft_sha256 else [])]
            paths = {s: reg.get_artifact(s).paths for s in shas}
            record = next(pair_records(reg.conn, [pair.id]))
            arts = list(artifact_records(reg.conn, shas))
            for spec in specs:
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
                ref = remote.options(**_options(spec)).remote(info.run_id, task.model_dump_json(), queue, spec)
                tasks.append(_Task(ref, RunMirror(reg, info, spec)))
                if local is not None:
                    local.run_ids.append(info.run_id)
                asked = json.dumps(spec) if spec else "default resources"
                note(f"pair {pair.id}: run {info.run_id} sent ({asked})")
        where = f"the Ray cluster at {address}" if address else "the Ray cluster started here"
        return _follow(ray, queue, tasks, opts, note, where)


def _bound_s(opts: BenchSettings) -> float:
    """The longest a task may run once it began: its run's budget (or run deadline) and one server start."""
    return (opts.budget_s if opts.budget_s is not None else opts.run_timeout_s) + opts.start_timeout_s


def _follow(
    ray: Any, queue: Any, tasks: list[_Task], opts: BenchSettings, note: Callable[[str], None], where: str
) -> RayOutcome:
    by_id = {t.mirror.run_id: t for t in tasks}
    bound = _bound_s(opts)
    looked = time.monotonic()
    try:
        while any(not t.done for t in tasks):
            if time.monotonic() - looked > PLACE_CHECK_S:  # a task still waiting for a node that is gone
                looked = time.monotonic()
                _unplaced(ray, [t for t in tasks if not t.done and t.started is None], where, note)
            _drain(ray, queue, by_id, note)
            pending = [t for t in tasks if not t.done]
            ready, _ = ray.wait([t.ref for t in pending], num_returns=len(pending), timeout=POLL_S, fetch_local=False)
            if ready:
                _drain(ray, queue, by_id, note)  # what a task sent before it returned is in the queue by now
            for t in pending:
                if t.ref in ready:
                    _land(ray, t, note)
                elif t.started is not None and time.monotonic() - t.started > bound:
                    _cancel(ray, t.ref)  # its worker is killed; its guard stops its servers
                    t.done = True
                    t.mirror.close(
                        "aborted",
                        f"ended by the driver on {t.mirror.where()}: it ran past {bound:g} s "
                        f"({'--budget' if opts.budget_s is not None else '--run-timeout'} and one server start, "
                        "--start-timeout); finished rows kept",
                    )
                    note(f"run {t.mirror.run_id}: ended, past its {bound:g} s")
    except BaseException as exc:  # Ctrl-C, SIGTERM, or the queue lost: end every task, keep every row
        status: RunStatus = "cancelled" if isinstance(exc, KeyboardInterrupt) else "aborted"
        reason = (
            "interrupted (Ctrl-C or SIGTERM); finished rows kept"
            if status == "cancelled"
            else f"the driver stopped following it ({type(exc).__name__}: {_why(exc)}); finished rows kept"
        )
        for t in tasks:
            if not t.done:
                _cancel(ray, t.ref)
                t.mirror.close(status, reason)
        raise
    out = RayOutcome()
    for t in tasks:
        if t.mirror.created:
            out.runs.append(t.mirror.run_id)
        else:
            out.failed.append(t.mirror.info)
    return out


def _unplaced(ray: Any, waiting: list[_Task], where: str, note: Callable[[str], None]) -> None:
    """End the tasks no live node can run any more (the only node offering their resources died
    before they began): Ray would keep them waiting for ever."""
    for t in waiting:
        why = _unplaceable(ray, t.mirror.resources, where)
        if why is not None:
            _cancel(ray, t.ref)
            t.done = True
            t.mirror.close("failed", f"never began: {why} any more")
            note(f"run {t.mirror.run_id} failed: it never began: {why} any more")


def _cancel(ray: Any, ref: Any) -> None:
    """End a task: its worker is killed (Ray's force), wherever it is; a task already gone is left be."""
    with contextlib.suppress(Exception):
        ray.cancel(ref, force=True)


def _drain(ray: Any, queue: Any, by_id: dict[str, _Task], note: Callable[[str], None]) -> None:
    """Write every message the queue holds, each to its run, in the order the nodes sent them."""
    while True:
        n = queue.qsize()
        if not n:
            return
        for msg in queue.get_nowait_batch(n):
            t = by_id.get(str(msg.get("task"))) if isinstance(msg, dict) else None
            if t is None:
                continue
            try:
                t.mirror.apply(msg)
            except StreamError as exc:  # not what specreg sends: that run ends here
                _cancel(ray, t.ref)
                t.done = True
                t.mirror.close("failed", exc.message)
                note(f"run {t.mirror.run_id}: {exc.message}")
                continue
            if msg.get("op") == "placed":
                t.started = time.monotonic()
                note(f"run {t.mirror.run_id}: on {t.mirror.where()}")


def _land(ray: Any, t: _Task, note: Callable[[str], None]) -> None:
    """A task returned or died: end its run with what it said, or with why it died."""
    t.done = True
    try:
        res = TaskOutcome.model_validate_json(ray.get(t.ref))
    except ray.exceptions.RayError as exc:  # worker or node died, task cancelled, specreg missing there
        reason = f"on {t.mirror.where()}: {type(exc).__name__}: {_why(exc)}"
        if t.mirror.created:
            reason += "; finished rows kept"
        t.mirror.close("aborted", reason)
        note(f"run {t.mirror.run_id} {'aborted' if t.mirror.created else 'failed'} {reason}")
        return
    except ValueError as exc:
        t.mirror.close("failed", f"on {t.mirror.where()}: the task's outcome does not read as specreg's ({exc})")
        return
    if not res.ok:
        t.mirror.close("failed", f"on {t.mirror.where()}: {res.reason or 'no reason given'}")
        note(f"run {t.mirror.run_id} failed on {t.mirror.where()}: {res.reason}")
    elif not t.mirror.closed:
        t.mirror.close("failed", f"on {t.mirror.where()}: the task ended without ending its run")
