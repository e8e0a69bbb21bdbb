"""Benchmark runs in the registry file: each row written in its own short BEGIN IMMEDIATE.

A crash, Ctrl-C or SIGKILL therefore loses at most the request in flight. `reap_orphans`
finds runs left 'running' by a specreg that no longer exists, marks them aborted, stops
their servers (matched by pid *and* process start time, so a reused pid is never killed) and
lists them in `reaped`, whose summaries benchmark/run/resume.py then draws from their rows
(`reap`), so an aborted run says where it stood and `bench continue` measures on from it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specreg.errors import RunNotFound, RunUnreadable, first_error
from specreg.registry.db import iso, now, rows
from specreg.schemas.bench import (
    BenchRun,
    ConditionRun,
    ConditionSpec,
    ConditionSummary,
    Expect,
    MemoryObservation,
    NodeInfo,
    PromptInfo,
    RoundLoad,
    RunInfo,
    RunManifest,
    RunStatus,
    SpecCounters,
    WarmupRecord,
)
from specreg.schemas.request_row import RequestRow
from specreg.schemas.triage import Triage
from specreg.servers.hardware import hardware_class

if TYPE_CHECKING:
    from specreg.registry.store import Registry

_REQ_COLS = [
    "condition_idx",
    "condition",
    "prompt_id",
    "stratum",
    "repeat",
    "started_at",
    "ok",
    "error",
    "timed_out",
    "ttft_ms",
    "total_ms",
    "tpot_ms",
    "output_tokens",
    "finish_reason",
    "prompt_ms",
    "predicted_ms",
    "draft_n",
    "draft_n_accepted",
    "cache_n",
    "output_text",
    "output_sha256",
    "matches_baseline",
    "first_diff",
    "diff_unit",
    "expect_ok",
    "expect_detail",
    "prompt_n",
    "ids_source",
    "stream_ids_n",
    "server_tpot_ms",
    "first_diff_char",
    "diff_context",
    "seed",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
]
# what a replay of the ids (benchmark/run/execute.py) changes on a stored row
_OUTPUT_COLS = ["ids_source", "matches_baseline", "first_diff", "diff_unit", "first_diff_char", "diff_context"]

LATEST = "latest"  # `runs show latest`, `export --run latest`: the run started last


def _dump(model: Any) -> str | None:
    return None if model is None else model.model_dump_json()


def process_started(pid: int) -> float | None:
    """A live process's start time (pid reuse guard); None when it is gone or a zombie."""
    import psutil  # ~15 ms, and readers of runs (the audit) never need it

    try:
        p = psutil.Process(pid)
        return None if p.status() == psutil.STATUS_ZOMBIE else p.create_time()
    except psutil.Error:
        return None


def same_process(pid: int | None, started: float | None) -> bool:
    if not pid or started is None:
        return False
    actual = process_started(pid)
    return actual is not None and abs(actual - started) < 1.0


class RunStore:
    """Reads and writes the bench_* tables through a Registry's connection."""

    def __init__(self, reg: Registry) -> None:
        self.reg = reg
        self.reaped: list[str] = []  # the runs the last `reap_orphans` marked aborted

    # -- writes ---------------------------------------------------------------------------------

    def create_run(
        self, info: RunInfo, manifest: RunManifest, target_licence: dict[str, Any], draft_licence: dict[str, Any] | None
    ) -> None:
        self._insert_run(
            info,
            status=info.status,
            target_licence_json=json.dumps(target_licence),
            draft_licence_json=json.dumps(draft_licence) if draft_licence is not None else None,
            manifest_json=manifest.model_dump_json(),
            runner_pid=info.runner_pid,
            runner_started=process_started(info.runner_pid) if info.runner_pid else None,
            run_dir=info.run_dir,
        )

    def record_failed(self, info: RunInfo) -> None:
        """A run that produced nothing to keep (e.g. a remote task lost with its node): who, and why."""
        self._insert_run(info, status="failed", finished_at=iso(now()))

    def _insert_run(self, info: RunInfo, **cols: Any) -> None:
        """One bench_runs row: the identity every run has, plus the columns this kind of run fills."""
        values = {
            "run_id": info.run_id,
            "pair_id": info.pair_id,
            "status_reason": info.status_reason,
            "method": info.method,
            "target_sha256": info.target_sha256,
            "draft_sha256": info.draft_sha256,
            "started_at": iso(info.started_at),
            **cols,
        }
        with self.reg.write() as db:
            db.execute(
                f"INSERT INTO bench_runs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                tuple(values.values()),
            )

    def add_prompts(self, run_id: str, prompts: list[PromptInfo]) -> None:
        with self.reg.write() as db:
            for p in prompts:
                db.execute(
                    "INSERT OR REPLACE INTO bench_prompts (run_id, prompt_id, stratum, kind, content_sha256, "
                    "input_tokens, max_tokens, expect_json) VALUES (?,?,?,?,?,?,?,?)",
                    (run_id, p.id, p.stratum, p.kind, p.content_sha256, p.input_tokens, p.max_tokens, _dump(p.expect)),
                )

    def save_condition(self, run_id: str, c: ConditionRun, server_started: float | None = None) -> None:
        """Insert or update one condition (called at start, when the server is up, at the end)."""
        with self.reg.write() as db:
            db.execute(
                "INSERT INTO bench_conditions (run_id, idx, name, method, status, failure, failure_lines_json, "
                "spec_json, argv_json, port, server_pid, server_started, log_path, log_tail, "
                "metrics_before_json, metrics_after_json, counters_json, memory_json, warmup_json, load_json, "
                "started_at, finished_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (run_id, idx) DO UPDATE SET "
                "status = excluded.status, failure = excluded.failure, "
                "failure_lines_json = excluded.failure_lines_json, argv_json = excluded.argv_json, "
                "port = excluded.port, server_pid = excluded.server_pid, "
                "server_started = coalesce(excluded.server_started, server_started), "
                "log_path = excluded.log_path, log_tail = excluded.log_tail, "
                "metrics_before_json = excluded.metrics_before_json, "
                "metrics_after_json = excluded.metrics_after_json, counters_json = excluded.counters_json, "
                "memory_json = excluded.memory_json, warmup_json = excluded.warmup_json, "
                "load_json = excluded.load_json, started_at = excluded.started_at, "
                "finished_at = excluded.finished_at",
                (
                    run_id,
                    c.idx,
                    c.spec.name,
                    c.spec.method,
                    c.status,
                    c.failure,
                    json.dumps(c.failure_lines),
                    c.spec.model_dump_json(),
                    json.dumps(c.argv),
                    c.port,
                    c.server_pid,
                    server_started,
                    c.log_path,
                    c.log_tail,
                    json.dumps(c.metrics_before) if c.metrics_before is not None else None,
                    json.dumps(c.metrics_after) if c.metrics_after is not None else None,
                    _dump(c.counters),
                    _dump(c.memory),
                    json.dumps([w.model_dump(mode="json") for w in c.warmup]),
                    json.dumps([x.model_dump(mode="json") for x in c.load]) if c.load else None,
                    iso(c.started_at),
                    iso(c.finished_at),
                ),
            )

    def add_request(self, run_id: str, row: RequestRow) -> int:
        """Insert one request row; returns its row id (what `update_request_output` takes)."""
        values = [getattr(row, c) for c in _REQ_COLS]
        values[_REQ_COLS.index("started_at")] = iso(row.started_at)
        cols = ", ".join(["run_id", *_REQ_COLS, "output_ids_json", "arrivals_json", "triage_json"])
        marks = ",".join("?" * (len(_REQ_COLS) + 4))
        with self.reg.write() as db:
            cur = db.execute(
                f"INSERT INTO bench_requests ({cols}) VALUES ({marks})",
                (run_id, *values, _ids(row.output_ids), _arrivals(row.arrivals), _dump(row.triage)),
            )
            return int(cur.lastrowid or 0)

    def update_request_output(self, row_id: int, row: RequestRow) -> None:
        """A stored row's ids (completed by a replay), its comparison with the baseline and its
        mismatch triage."""
        sets = ", ".join(f"{c} = ?" for c in ["output_ids_json", "triage_json", *_OUTPUT_COLS])
        values = [_ids(row.output_ids), _dump(row.triage), *(getattr(row, c) for c in _OUTPUT_COLS)]
        with self.reg.write() as db:
            db.execute(f"UPDATE bench_requests SET {sets} WHERE id = ?", (*values, row_id))

    def set_summaries(self, run_id: str, target: str, draft: str | None, summaries: list[ConditionSummary]) -> None:
        with self.reg.write() as db:
            db.execute("DELETE FROM bench_summaries WHERE run_id = ?", (run_id,))
            for s in summaries:
                db.execute(
                    "INSERT INTO bench_summaries (run_id, condition, stratum, target_sha256, draft_sha256, "
                    "summary_json) VALUES (?,?,?,?,?,?)",
                    (run_id, s.condition, s.stratum, target, draft, s.model_dump_json()),
                )

    def finish(self, run_id: str, status: RunStatus, reason: str | None) -> None:
        with self.reg.write() as db:
            db.execute(
                "UPDATE bench_runs SET status = ?, status_reason = ?, finished_at = ? WHERE run_id = ?",
                (status, reason, iso(now()), run_id),
            )

    def reopen(self, run_id: str, manifest: RunManifest, runner_pid: int) -> None:
        """A stored run measured on (`bench continue`): running again under this process, its
        manifest naming the continuation; its rows stay as they are."""
        with self.reg.write() as db:
            db.execute(
                "UPDATE bench_runs SET status = 'running', status_reason = NULL, finished_at = NULL, "
                "manifest_json = ?, runner_pid = ?, runner_started = ? WHERE run_id = ?",
                (manifest.model_dump_json(), runner_pid, process_started(runner_pid), run_id),
            )

    # -- orphans --------------------------------------------------------------------------------

    def reap_orphans(self) -> list[str]:
        """Mark runs whose specreg died as aborted and stop their servers; returns what was done."""
        notes: list[str] = []
        self.reaped = []
        for run in rows(
            self.reg.conn, "SELECT run_id, runner_pid, runner_started FROM bench_runs WHERE status = 'running'"
        ):
            if same_process(run["runner_pid"], run["runner_started"]):
                continue  # another specreg is running it right now
            stopped: list[int] = []
            for c in rows(
                self.reg.conn,
                "SELECT idx, server_pid, server_started FROM bench_conditions WHERE run_id = ? "
                "AND server_pid IS NOT NULL",
                (run["run_id"],),
            ):
                if same_process(c["server_pid"], c["server_started"]):
                    from specreg.servers.launcher import stop_group  # only when an orphan is found

                    stop_group(c["server_pid"])
                    stopped.append(c["server_pid"])
            reason = f"specreg (pid {run['runner_pid']}) ended without finishing the run"
            if stopped:
                reason += f"; stopped orphaned server pid {', '.join(map(str, stopped))}"
            with self.reg.write() as db:
                db.execute(
                    "UPDATE bench_conditions SET status = 'aborted', finished_at = ? WHERE run_id = ? "
                    "AND status IN ('running', 'pending')",
                    (iso(now()), run["run_id"]),
                )
                db.execute(
                    "UPDATE bench_runs SET status = 'aborted', status_reason = ?, finished_at = ? "
                    "WHERE run_id = ? AND status = 'running'",
                    (reason, iso(now()), run["run_id"]),
                )
            notes.append(f"run {run['run_id']}: {reason}")
            self.reaped.append(run["run_id"])
        return notes

    # -- reads ----------------------------------------------------------------------------------

    def runs(self) -> list[RunInfo]:
        found = rows(
            self.reg.conn,
            f"{_RUN_SELECT} ORDER BY r.started_at, r.run_id",
        )
        return [run_info(r) for r in found]

    def resolve(self, run_id: str) -> str:
        """The full id of `run_id`: an id, a unique prefix, or `latest` (the run started last;
        ids start with a date, so no prefix is ever the word)."""
        if run_id == LATEST:
            last = rows(self.reg.conn, "SELECT run_id FROM bench_runs ORDER BY started_at DESC, run_id DESC LIMIT 1")
            if not last:
                raise RunNotFound("no benchmark runs yet", hint="specreg bench admitted")
            return str(last[0]["run_id"])
        found = rows(
            self.reg.conn,
            "SELECT run_id FROM bench_runs WHERE run_id LIKE ? ESCAPE '\\' ORDER BY run_id",
            (run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",),
        )
        if not found:
            raise RunNotFound(f"no benchmark run {run_id!r}", hint="`specreg runs` lists them")
        exact = [r["run_id"] for r in found if r["run_id"] == run_id]
        if exact:
            return exact[0]
        if len(found) > 1:
            raise RunNotFound(f"run id prefix {run_id!r} matches {len(found)} runs; give more characters")
        return str(found[0]["run_id"])

    def row_ids(self, run_id: str) -> list[int]:
        """The stored ids of a run's request rows, in the order `load` returns the rows."""
        cur = self.reg.conn.execute("SELECT id FROM bench_requests WHERE run_id = ? ORDER BY id", (run_id,))
        return [int(r[0]) for r in cur]

    def load(self, run_id: str) -> BenchRun:
        """The whole run as pydantic models (what `runs show` and reports are built from); a
        stored record that cannot be read (another shape, a NaN) raises RunUnreadable naming it."""
        rid = self.resolve(run_id)
        try:
            return self._load(rid)
        except ValueError as exc:  # pydantic's ValidationError, a damaged JSON column
            raise RunUnreadable(
                f"run {rid}: a stored record cannot be read ({first_error(exc)})",
                hint="its rows were changed after specreg wrote them; measure it again (specreg bench admitted)",
            ) from None

    def _load(self, rid: str) -> BenchRun:
        r = rows(
            self.reg.conn,
            f"{_RUN_SELECT} WHERE r.run_id = ?",
            (rid,),
        )[0]
        manifest = RunManifest.model_validate_json(r["manifest_json"]) if r["manifest_json"] else None
        prompts = [
            PromptInfo(
                id=p["prompt_id"],
                stratum=p["stratum"],
                kind=p["kind"],
                content_sha256=p["content_sha256"],
                input_tokens=p["input_tokens"],
                max_tokens=p["max_tokens"],
                expect=Expect.model_validate_json(p["expect_json"]) if p["expect_json"] else None,
            )
            for p in rows(self.reg.conn, "SELECT * FROM bench_prompts WHERE run_id = ? ORDER BY rowid", (rid,))
        ]
        conditions = [
            _condition(c)
            for c in rows(self.reg.conn, "SELECT * FROM bench_conditions WHERE run_id = ? ORDER BY idx", (rid,))
        ]
        # plain tuples made dicts once: a sqlite3.Row looks each name up among its columns (~40 a row)
        cur = self.reg.conn.execute("SELECT * FROM bench_requests WHERE run_id = ? ORDER BY id", (rid,))
        names = [d[0] for d in cur.description]
        requests = [_request(dict(zip(names, q, strict=True))) for q in cur]
        summaries = [
            ConditionSummary.model_validate_json(s["summary_json"])
            for s in rows(
                self.reg.conn, "SELECT summary_json FROM bench_summaries WHERE run_id = ? ORDER BY rowid", (rid,)
            )
        ]
        return BenchRun(
            info=run_info(r),
            manifest=manifest,
            prompts=prompts,
            conditions=conditions,
            requests=requests,
            summaries=summaries,
        )


_ORIGIN_COLS = (
    "json_extract(r.manifest_json, '$.hardware') AS hardware_json, o.host AS origin_host, "
    "o.node_id AS origin_node_id, o.node_address AS origin_node_address, o.resources_json AS origin_resources"
)
# a run with its counts and origin: what `runs` lists and `runs show` loads
_RUN_SELECT = (
    "SELECT r.*, (SELECT count(*) FROM bench_conditions c WHERE c.run_id = r.run_id) AS n_conditions, "
    f"(SELECT count(*) FROM bench_requests q WHERE q.run_id = r.run_id) AS n_requests, {_ORIGIN_COLS} "
    "FROM bench_runs r LEFT JOIN run_origins o ON o.run_id = r.run_id"
)


def run_info(r: sqlite3.Row) -> RunInfo:
    """A bench_runs row as RunInfo; columns a query did not select (counts, origin) stay unset."""
    keys = set(r.keys())

    def col(name: str) -> Any:
        return r[name] if name in keys else None

    hw = col("hardware_json")
    node = None
    if col("origin_node_id"):  # a run dispatched to a cluster node (exchange/ray_executor.py)
        node = NodeInfo(
            node_id=r["origin_node_id"],
            host=r["origin_host"],
            address=col("origin_node_address") or "",
            resources=json.loads(col("origin_resources") or "{}"),
        )
    return RunInfo(
        run_id=r["run_id"],
        pair_id=r["pair_id"],
        status=r["status"],
        status_reason=r["status_reason"],
        method=r["method"],
        target_sha256=r["target_sha256"],
        draft_sha256=r["draft_sha256"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        runner_pid=col("runner_pid"),
        run_dir=r["run_dir"],
        n_conditions=col("n_conditions") or 0,
        n_requests=col("n_requests") or 0,
        hardware=hardware_class(json.loads(hw)) if hw else None,
        host=col("origin_host"),
        node=node,
    )


def _condition(c: sqlite3.Row) -> ConditionRun:
    return ConditionRun(
        idx=c["idx"],
        spec=ConditionSpec.model_validate_json(c["spec_json"]),
        status=c["status"],
        failure=c["failure"],
        failure_lines=json.loads(c["failure_lines_json"]),
        argv=json.loads(c["argv_json"]),
        port=c["port"],
        server_pid=c["server_pid"],
        log_path=c["log_path"],
        log_tail=c["log_tail"],
        metrics_before=json.loads(c["metrics_before_json"]) if c["metrics_before_json"] else None,
        metrics_after=json.loads(c["metrics_after_json"]) if c["metrics_after_json"] else None,
        counters=SpecCounters.model_validate_json(c["counters_json"]) if c["counters_json"] else None,
        memory=MemoryObservation.model_validate_json(c["memory_json"]) if c["memory_json"] else None,
        warmup=[WarmupRecord.model_validate(w) for w in json.loads(c["warmup_json"] or "[]")],
        load=[RoundLoad.model_validate(x) for x in json.loads(c["load_json"] or "[]")],
        started_at=c["started_at"],
        finished_at=c["finished_at"],
    )


def _request(q: Mapping[str, Any]) -> RequestRow:
    data = {c: q[c] for c in _REQ_COLS}
    for b in ("ok", "timed_out"):
        data[b] = bool(data[b])
    for b in ("matches_baseline", "expect_ok"):
        data[b] = None if data[b] is None else bool(data[b])
    data["output_ids"] = json.loads(q["output_ids_json"]) if q["output_ids_json"] else None
    data["arrivals"] = json.loads(q["arrivals_json"]) if q["arrivals_json"] else None
    data["triage"] = Triage.model_validate_json(q["triage_json"]) if q["triage_json"] else None
    return RequestRow.model_validate(data)


def _ids(ids: list[int] | None) -> str | None:
    return json.dumps(ids) if ids is not None else None


def _arrivals(arrivals: list[tuple[float, int]] | None) -> str | None:
    return json.dumps([[t, k] for t, k in arrivals], separators=(",", ":")) if arrivals is not None else None
