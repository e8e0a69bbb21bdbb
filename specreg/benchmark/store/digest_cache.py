"""Run digests kept in the registry (table `run_digests`, migration m012): built once per run.

A digest is a pure function of the run's stored rows and of the code that reduces them, so it
is kept next to them: an audit of many runs then validates one JSON text per run instead of
re-reading every summary and rebuilding every row (`benchmarks/bench_fleet.py` times `audit
--all` on a fleet registry with and without them). It can never be stale:
- the key includes `builder_id()`, a hash of the source of every module a digest depends on
  (and the pydantic version), so a new specreg rebuilds instead of trusting an old shape;
- triggers (m012) delete a run's digests on any write to that run's rows in bench_runs,
  bench_conditions, bench_summaries, bench_prompts or bench_requests, whoever writes them.
A damaged entry reads as a miss. Runs still `running` are never kept (they change).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sqlite3
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from specreg.schemas.audit import RunDigest

# what build_digest reads or calls: a change to any of these sources changes every key
_SOURCES = (
    "specreg.benchmark.store.digest",
    "specreg.benchmark.store.run_index",
    "specreg.benchmark.store.runstore",
    "specreg.servers.hardware",
    "specreg.benchmark.store.condition_summary",
    "specreg.benchmark.store.contention",
    "specreg.schemas.audit",
    "specreg.schemas.bench",
    "specreg.schemas.bench_settings",
)


@cache
def builder_id() -> str:
    """Hash of the digest code's sources (read, not imported) and the pydantic version."""
    import pydantic

    from specreg import __version__

    digest = hashlib.sha256(f"{__version__}|{pydantic.VERSION}".encode())
    for name in _SOURCES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec else None
        digest.update(name.encode())
        digest.update(Path(origin).read_bytes() if origin and origin.endswith(".py") else b"(no source)")
    return digest.hexdigest()[:16]


def get(conn: sqlite3.Connection, run_ids: Iterable[str], *, spread: bool) -> dict[str, RunDigest]:
    """The kept digests of these runs (run id -> digest); absent, foreign or damaged ones are left out."""
    wanted = json.dumps(sorted(set(run_ids)))
    found: dict[str, RunDigest] = {}
    try:
        cur = conn.execute(
            "SELECT run_id, digest_json FROM run_digests WHERE run_id IN (SELECT value FROM json_each(?)) "
            "AND spread = ? AND builder = ?",
            (wanted, int(spread), builder_id()),
        )
        for run_id, text in cur:
            try:
                digest = RunDigest.model_validate_json(text)
            except ValueError:  # damaged: built again
                continue
            if digest.run_id == run_id:
                found[run_id] = digest
    except sqlite3.OperationalError:  # a registry opened read-only before m012 could be written
        return {}
    return found


def put(conn: sqlite3.Connection, digests: Iterable[RunDigest], *, spread: bool) -> int:
    """Keep finished runs' digests in the caller's transaction; returns how many were written."""
    keep = []
    for d in digests:
        text = d.model_dump_json(exclude_defaults=True)  # half the text, and read back ~40% faster
        # only what reads back equal (a NaN, say, would not): the cache must never change an answer
        try:
            same = RunDigest.model_validate_json(text) == d
        except ValueError:
            same = False
        if d.status != "running" and same:
            keep.append((d.run_id, int(spread), builder_id(), text))
    conn.executemany("INSERT OR REPLACE INTO run_digests (run_id, spread, builder, digest_json) VALUES (?,?,?,?)", keep)
    return len(keep)
