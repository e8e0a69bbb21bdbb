"""A run measured on another machine, written to this registry row by row as it is measured.

The node's runner writes through `StreamingStore`: each write lands in the node's scratch
registry (the runner reads its own rows back) and is sent on as one message. The driver hands
each message to the run's `RunMirror`, which writes it here with the same RunStore call, in its
own transaction, as a local run would: when the node dies, every row it finished is here already,
and the run is ended `aborted` with them. Messages carry records as JSON text and are read back
with the schemas' own validation: what a node sends is evidence about that node, not trusted
code, so the driver keeps only what reads as the records specreg writes, and when the run
finishes it checks the run's summaries against its rows as an import does (exchange/rederive.py).
Nothing here knows Ray: `send` is any callable; exchange/ray_executor.py wires it to a queue.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from specreg.benchmark.store.digest import keep_digests
from specreg.benchmark.store.runstore import RunStore
from specreg.errors import SpecregError, first_error
from specreg.exchange.bundle_runs import MAX_LOG_BYTES, local_digest
from specreg.exchange.origins import record_origin, set_run_digest
from specreg.exchange.rederive import check_summaries, derived_summaries
from specreg.registry.db import now
from specreg.schemas.bench import ConditionRun, ConditionSummary, NodeInfo, PromptInfo, RunInfo, RunManifest, RunStatus
from specreg.schemas.request_row import RequestRow

if TYPE_CHECKING:
    from specreg.registry.store import Registry

Message = dict[str, Any]
Send = Callable[[Message], None]


class StreamError(SpecregError):
    """A message from a node that this registry cannot keep (another shape, out of order)."""


class StreamingStore(RunStore):
    """The node's run store: every write kept here and sent to the driver, in the runner's order.

    The run's server logs go last, just before the run's end (the driver has the log tails in
    the condition rows before that)."""

    def __init__(self, reg: Registry, send: Send, node: NodeInfo, workload: str | None = None) -> None:
        super().__init__(reg)
        self.send, self.node = send, node
        self.workload = workload  # a workload file as the driver named it (the node reads a copy)
        self._logs: dict[int, str] = {}  # condition idx -> its latest server log

    def create_run(
        self, info: RunInfo, manifest: RunManifest, target_licence: dict[str, Any], draft_licence: dict[str, Any] | None
    ) -> None:
        update: dict[str, Any] = {"node": self.node}  # where it ran travels with the run
        if self.workload is not None:  # the same bytes (workload_sha256) under the name the user gave
            update["request"] = manifest.request.model_copy(update={"workload": self.workload})
            if manifest.settings is not None:
                update["settings"] = manifest.settings.model_copy(update={"workload": self.workload})
        manifest = manifest.model_copy(update=update)
        super().create_run(info, manifest, target_licence, draft_licence)
        self.send(
            {
                "op": "create_run",
                "info": info.model_dump_json(),
                "manifest": manifest.model_dump_json(),
                "target_licence": json.dumps(target_licence),
                "draft_licence": json.dumps(draft_licence),
            }
        )

    def add_prompts(self, run_id: str, prompts: list[PromptInfo]) -> None:
        super().add_prompts(run_id, prompts)
        self.send({"op": "add_prompts", "prompts": [p.model_dump_json() for p in prompts]})

    def save_condition(self, run_id: str, c: ConditionRun, server_started: float | None = None) -> None:
        super().save_condition(run_id, c, server_started)
        if c.log_path:
            self._logs[c.idx] = c.log_path
        self.send({"op": "save_condition", "condition": c.model_dump_json()})

    def add_request(self, run_id: str, row: RequestRow) -> int:
        row_id = super().add_request(run_id, row)
        self.send({"op": "add_request", "row_id": row_id, "row": row.model_dump_json()})
        return row_id

    def update_request_output(self, row_id: int, row: RequestRow) -> None:
        super().update_request_output(row_id, row)
        self.send({"op": "update_request_output", "row_id": row_id, "row": row.model_dump_json()})

    def set_summaries(self, run_id: str, target: str, draft: str | None, summaries: list[ConditionSummary]) -> None:
        super().set_summaries(run_id, target, draft, summaries)
        self.send({"op": "set_summaries", "summaries": [s.model_dump_json() for s in summaries]})

    def finish(self, run_id: str, status: RunStatus, reason: str | None) -> None:
        super().finish(run_id, status, reason)
        for idx, path in sorted(self._logs.items()):
            data = _log_tail(path)
            if data is not None:
                self.send({"op": "log", "idx": idx, "data": data})
        self.send({"op": "finish", "status": status, "reason": reason})


def _log_tail(path: str) -> bytes | None:
    """A server log's last MAX_LOG_BYTES (what a bundle carries of it); None when it is gone."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - MAX_LOG_BYTES))
            return f.read(MAX_LOG_BYTES)
    except OSError:
        return None


class RunMirror:
    """The driver's copy of one run measured on a node, under the run id the driver chose.

    What is local to the node is replaced by the driver's own (as a bundle import does): the pair
    id, the run folder, the runner's pid (this process: if it dies, `runs` marks the run aborted),
    the servers' pids and log paths. The node's row ids map to this registry's."""

    def __init__(self, reg: Registry, info: RunInfo, resources: dict[str, float]) -> None:
        self.reg, self.store = reg, RunStore(reg)
        self.info = info  # the run id and pair the driver sent; what a failure is recorded as
        self.resources = resources
        self.run_dir = reg.path.parent / "runs" / info.run_id
        self.node: NodeInfo | None = None
        self.node_version: str | None = None
        self.created = self.closed = False
        self._rows: dict[int, int] = {}  # node row id -> row id here
        self._conds: dict[int, ConditionRun] = {}
        self._logs: dict[int, str] = {}  # condition idx -> the log kept here

    @property
    def run_id(self) -> str:
        return self.info.run_id

    def where(self) -> str:
        """The node in words, for failure reasons and notes."""
        return self.node.line() if self.node is not None else "a Ray node that did not report itself"

    def apply(self, msg: Message) -> None:
        """Write one message from the node; StreamError when it is not one specreg sends."""
        op = msg.get("op")
        handler = _HANDLERS.get(op) if isinstance(op, str) else None
        if handler is None:
            raise StreamError(f"run {self.run_id}: the node sent an unknown message ({str(op)[:40]!r})")
        if self.closed:
            return  # ended here already (past its deadline, interrupted): the rest is not kept
        if op not in ("placed", "create_run") and not self.created:
            raise StreamError(f"run {self.run_id}: the node sent {op} before the run's manifest")
        try:
            handler(self, msg)
        except (ValidationError, ValueError, TypeError, KeyError) as exc:
            raise StreamError(
                f"run {self.run_id}: the node sent a {op} record that does not read as specreg's ({first_error(exc)})"
            ) from None

    # -- the messages --------------------------------------------------------------------------

    def _placed(self, msg: Message) -> None:
        self.node = NodeInfo.model_validate_json(msg["node"])
        self.node_version = str(msg["specreg_version"])

    def _create_run(self, msg: Message) -> None:
        if self.created:
            raise ValueError("a second run in one task")
        node_info = RunInfo.model_validate_json(msg["info"])
        manifest = RunManifest.model_validate_json(msg["manifest"])
        target_licence = json.loads(msg["target_licence"])
        draft_licence = json.loads(msg["draft_licence"])
        if not isinstance(target_licence, dict) or not isinstance(draft_licence, dict | None):
            raise ValueError("a licence record is not an object")
        if (node_info.target_sha256, node_info.draft_sha256) != (self.info.target_sha256, self.info.draft_sha256):
            raise ValueError("its models are not the pair's the driver sent")
        if self.node is not None:
            manifest.node = self.node
        manifest.draft.pair_id = self.info.pair_id
        self.run_dir.mkdir(parents=True, exist_ok=True)
        info = node_info.model_copy(
            update={
                "run_id": self.run_id,
                "pair_id": self.info.pair_id,
                "status": "running",
                "runner_pid": os.getpid(),
                "run_dir": str(self.run_dir),
            }
        )
        self.store.create_run(info, manifest, target_licence, draft_licence)
        self.created = True
        with self.reg.write() as conn:
            self._origin(conn)

    def _add_prompts(self, msg: Message) -> None:
        self.store.add_prompts(self.run_id, [PromptInfo.model_validate_json(p) for p in msg["prompts"]])

    def _save_condition(self, msg: Message) -> None:
        c = ConditionRun.model_validate_json(msg["condition"])
        c = c.model_copy(update={"server_pid": None, "log_path": self._logs.get(c.idx)})
        self._conds[c.idx] = c
        self.store.save_condition(self.run_id, c)

    def _add_request(self, msg: Message) -> None:
        node_id = int(msg["row_id"])
        self._rows[node_id] = self.store.add_request(self.run_id, RequestRow.model_validate_json(msg["row"]))

    def _update_request_output(self, msg: Message) -> None:
        self.store.update_request_output(self._rows[int(msg["row_id"])], RequestRow.model_validate_json(msg["row"]))

    def _set_summaries(self, msg: Message) -> None:
        summaries = [ConditionSummary.model_validate_json(s) for s in msg["summaries"]]
        self.store.set_summaries(self.run_id, self.info.target_sha256, self.info.draft_sha256, summaries)

    def _log(self, msg: Message) -> None:
        idx, data = int(msg["idx"]), msg["data"]
        if not isinstance(data, bytes) or idx not in self._conds:
            raise ValueError("a server log of no condition")
        path = self.run_dir / f"node-{idx:02d}.log"
        path.write_bytes(data[-MAX_LOG_BYTES:])
        self._logs[idx] = str(path)
        c = self._conds[idx].model_copy(update={"log_path": str(path)})
        self._conds[idx] = c
        self.store.save_condition(self.run_id, c)

    def _finish(self, msg: Message) -> None:
        status, reason = msg["status"], msg["reason"]
        if status not in ("complete", "incomplete", "cancelled", "aborted", "failed"):
            raise ValueError(f"a run status {str(status)[:20]!r}")
        why = check_summaries(self.store.load(self.run_id))
        if why is not None:  # derived numbers are derived here, as an import derives them
            status, reason = "failed", f"its summaries are not what its request rows give ({why})"
        self._end(status, None if reason is None else str(reason))

    # -- ends the driver decides -----------------------------------------------------------------

    def close(self, status: RunStatus, reason: str) -> None:
        """End a run the node did not end (its node died, it passed its deadline, Ctrl-C): the rows
        that arrived are kept, its conditions still going are ended with it, and its summaries
        are drawn from those rows as the runner draws them. A run that never started is recorded
        as failed, with the node it was on."""
        if self.closed:
            return
        if not self.created:
            self.fail(reason)
            return
        ended = "cancelled" if status == "cancelled" else "aborted"
        for c in self._conds.values():
            if c.status in ("pending", "running"):
                self.store.save_condition(self.run_id, c.model_copy(update={"status": ended, "finished_at": now()}))
        run = self.store.load(self.run_id)
        self.store.set_summaries(self.run_id, self.info.target_sha256, self.info.draft_sha256, derived_summaries(run))
        self._end(status, reason)

    def fail(self, reason: str) -> None:
        """A task that made no run (the node refused the model, the worker died before it began)."""
        if self.closed:
            return
        self.info.status_reason = reason
        self.store.record_failed(self.info)
        self.closed = True
        with self.reg.write() as conn:
            self._origin(conn, local_digest(conn, self.run_id))

    def _end(self, status: RunStatus, reason: str | None) -> None:
        self.store.finish(self.run_id, status, reason)
        self.closed = True
        keep_digests(self.reg, [self.run_id])
        with self.reg.write() as conn:
            digest = local_digest(conn, self.run_id)
            if digest is not None:
                set_run_digest(conn, self.run_id, digest)

    def _origin(self, conn: Any, digest: str | None = None) -> None:
        """Where the run ran, once the node has said (the row waits for the run's own)."""
        if self.node is not None:
            node = self.node.model_copy(update={"resources": self.resources})  # as the driver asked
            record_origin(conn, self.run_id, node.host, self.node_version or "unknown", run_digest=digest, node=node)


_HANDLERS: dict[str, Callable[[RunMirror, Message], None]] = {
    "placed": RunMirror._placed,
    "create_run": RunMirror._create_run,
    "add_prompts": RunMirror._add_prompts,
    "save_condition": RunMirror._save_condition,
    "add_request": RunMirror._add_request,
    "update_request_output": RunMirror._update_request_output,
    "set_summaries": RunMirror._set_summaries,
    "log": RunMirror._log,
    "finish": RunMirror._finish,
}
