"""Where a run in this registry came from, if not from this machine: table run_origins.

Two ways in: a result bundle (exchange/bundle.py: the host and specreg version that wrote it, the
run's content digest and the bundle's) and a Ray node that streamed the run's rows while it
measured (exchange/run_stream.py: the node's host, id and address and the resources the run was
placed with; no bundle, and the content digest once the run has ended). Runs measured here have
no row. This module writes the table; `runs`, the audit and exports read it.
"""

from __future__ import annotations

import json
import sqlite3

from specreg.registry.db import now_iso
from specreg.schemas.bench import NodeInfo


def record_origin(
    conn: sqlite3.Connection,
    run_id: str,
    host: str,
    specreg_version: str,
    *,
    run_digest: str | None = None,
    bundle_digest: str | None = None,
    bundle_created_at: str | None = None,
    node: NodeInfo | None = None,
) -> None:
    """One run's origin (inside the caller's transaction)."""
    conn.execute(
        "INSERT INTO run_origins (run_id, host, specreg_version, run_digest, bundle_digest, bundle_created_at, "
        "imported_at, node_id, node_address, resources_json) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (
            run_id,
            host,
            specreg_version,
            run_digest,
            bundle_digest,
            bundle_created_at,
            now_iso(),
            node.node_id if node else None,
            node.address if node else None,
            json.dumps(node.resources, sort_keys=True) if node else None,
        ),
    )


def set_run_digest(conn: sqlite3.Connection, run_id: str, digest: str) -> None:
    """A streamed run's content digest, once it has ended (what a signature of it would name)."""
    conn.execute("UPDATE run_origins SET run_digest = ? WHERE run_id = ?", (digest, run_id))
