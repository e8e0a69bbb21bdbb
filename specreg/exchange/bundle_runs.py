"""A benchmark run as bundle members, both ways: the bench_* rows as canonical JSON lines, and back.

What is local to one machine stays out (row ids, the runner's and servers' pids, the run folder,
log paths, the local pair id: a run names its pair by identity), so a run exported, imported
elsewhere and exported again gives the same bytes, and the same digest. That digest is how
`import` tells a run it already has from a different run that reuses the id.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specreg.errors import BundleError
from specreg.exchange.bundle_format import RUN_PARTS, jsonl, run_digest, run_member
from specreg.exchange.portable import RowMaker, canonical, columns, find_pair, pair_identity, to_record

# part -> (table, local-only columns, order)
TABLES: dict[str, tuple[str, frozenset[str], str]] = {
    "run.json": ("bench_runs", frozenset({"pair_id", "runner_pid", "runner_started", "run_dir"}), "run_id"),
    "conditions.jsonl": ("bench_conditions", frozenset({"server_pid", "server_started", "log_path"}), "idx"),
    "prompts.jsonl": ("bench_prompts", frozenset(), "rowid"),
    "requests.jsonl": ("bench_requests", frozenset({"id"}), "id"),
    "summaries.jsonl": ("bench_summaries", frozenset(), "rowid"),
}
MAX_LOG_BYTES = 32 << 20  # a log larger than this travels as its last 32 MiB


def run_parts(conn: sqlite3.Connection, run_id: str) -> dict[str, bytes]:
    """The run's five record members (the input of its digest)."""
    out: dict[str, bytes] = {}
    for part, (table, skip, order) in TABLES.items():
        cols = columns(conn, table)
        rows = conn.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE run_id = ? ORDER BY {order}", (run_id,))
        if part == "run.json":
            row = rows.fetchone()
            if row is None:
                raise BundleError(f"no benchmark run {run_id!r}")
            rec = to_record(cols, row, skip)
            pair = pair_identity(conn, row[cols.index("pair_id")])
            if pair is not None:
                rec["pair"] = pair
            out[part] = canonical(rec) + b"\n"
        else:
            out[part] = jsonl(to_record(cols, r, skip) for r in rows)
    return out


def local_digest(conn: sqlite3.Connection, run_id: str) -> str | None:
    """The digest of a run this registry holds, or None when it has no run with this id."""
    if conn.execute("SELECT 1 FROM bench_runs WHERE run_id = ?", (run_id,)).fetchone() is None:
        return None
    return run_digest(run_parts(conn, run_id))


def run_logs(conn: sqlite3.Connection, run_id: str) -> dict[str, bytes]:
    """Condition idx -> server log bytes, for the logs still on disk."""
    out: dict[str, bytes] = {}
    for idx, path in conn.execute(
        "SELECT idx, log_path FROM bench_conditions WHERE run_id = ? AND log_path IS NOT NULL ORDER BY idx", (run_id,)
    ):
        try:
            with open(path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - MAX_LOG_BYTES))
                out[str(idx)] = f.read(MAX_LOG_BYTES)
        except OSError:
            continue  # a deleted log is absent from the bundle, not an error
    return out


def _check_run_id(records: list[dict[str, Any]], run_id: str, part: str) -> None:
    for rec in records:
        if rec.get("run_id") != run_id:
            raise BundleError(f"bundle run {run_id}: a row of {part} belongs to run {str(rec.get('run_id'))[:80]!r}")


def insert_run(
    conn: sqlite3.Connection,
    run_id: str,
    parts: Mapping[str, list[dict[str, Any]]],
    log_paths: Mapping[str, Path],
    run_dir: Path | None,
) -> int:
    """Insert one run's rows (inside the caller's transaction); returns the number of request rows."""
    run = dict(parts["run.json"][0])
    _check_run_id([run], run_id, "run.json")
    if run.get("status") == "running":  # this registry would take it for a crashed run of its own
        raise BundleError(f"bundle run {run_id} is still running; export it when it has finished")
    ident = run.pop("pair", None)
    pair_id = None
    if ident is not None:
        pair_id = find_pair(conn, ident)
        if pair_id is None:
            raise BundleError(f"bundle run {run_id} names a pair that is neither in the bundle nor in this registry")
    for role in ("target_sha256", "draft_sha256"):
        sha = run.get(role)
        if sha is not None and conn.execute("SELECT 1 FROM artifacts WHERE sha256 = ?", (sha,)).fetchone() is None:
            raise BundleError(f"bundle run {run_id}: its {role[:-7]} {str(sha)[:12]} is not in the bundle")
    run |= {"pair_id": pair_id, "run_dir": str(run_dir) if run_dir else None}
    n_requests = 0
    for part, (table, _, _) in TABLES.items():
        records = [run] if part == "run.json" else list(parts[part])
        _check_run_id(records, run_id, part)
        cols = [c for c in columns(conn, table) if c != "id"]
        make = RowMaker(table, cols)
        if part == "conditions.jsonl":
            records = [
                r | {"log_path": str(log_paths[str(r.get("idx"))])} if str(r.get("idx")) in log_paths else r
                for r in records
            ]
        rows = [make(r) for r in records]
        conn.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({','.join('?' * len(cols))})", rows)
        if part == "requests.jsonl":
            n_requests = len(rows)
    return n_requests


__all__ = ["RUN_PARTS", "insert_run", "local_digest", "run_logs", "run_member", "run_parts"]
