"""The registry's `watch_windows` table (migration m024): its one owner.

Each window `specreg watch` makes is kept against its pair and the server's identity, so a
later `watch --once` (from cron) continues the drift test where the last one left it, and
`audit`, `runs show` and reports show what production saw beside what the bench measured.
Only checked numbers arrive here (watch/scrape.py refuses the rest, and an `unknown` window
has none).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from specreg.schemas.watch import ProductionEvidence, WatchWindow

if TYPE_CHECKING:
    from specreg.registry.store import Registry

MAX_RESUMED = 1000  # windows a new watch reads back to continue the test (a year of hourly crons is fewer)

_COLUMNS = (
    "pair_id, stratum, url, identity_key, server_json, run_id, started_at, ended_at, seconds, state, reason, "
    "restarted, mismatches, generated, generating_s, drafted, accepted, audited_acceptance, audited_decode_tps, "
    "window_json, counters_json"
)


def record(
    reg: Registry, w: WatchWindow, identity_key: str, counters: dict[str, Any] | None, *, with_server: bool
) -> None:
    """Keep one window of a matched pair (a window without a pair is not kept: nothing to hold it
    to); `with_server`: the identity too (a watch's first window of it: the others point to it)."""
    if w.pair_id is None:
        return
    a = w.audited
    row = (
        w.pair_id,
        w.stratum,
        w.url,
        identity_key,
        w.server.model_dump_json() if w.server and with_server else None,
        a.run_id if a else None,
        w.started_at.isoformat(),
        w.ended_at.isoformat(),
        max(0.0, w.seconds),
        w.state,
        w.reason,
        int(w.restarted is not None),
        len(w.mismatches),
        w.generated,
        w.generating_s,
        w.drafted,
        w.accepted,
        a.acceptance if a else None,
        a.decode_tps if a and a.compare_decode else None,
        w.model_dump_json(exclude={"server"}),
        json.dumps(counters) if counters is not None else None,
    )
    marks = ", ".join("?" * len(row))
    with reg.write() as conn:
        conn.execute(f"INSERT INTO watch_windows ({_COLUMNS}) VALUES ({marks})", row)


def resume(
    reg: Registry, pair_id: int, stratum: str | None, url: str, identity_key: str
) -> tuple[list[WatchWindow], dict[str, Any] | None]:
    """The windows of this server and identity since its last restart (oldest first) and the
    counters the newest one ended at: where a new watch continues the test."""
    rows = reg.database.rows(
        "SELECT window_json, counters_json, restarted, identity_key FROM watch_windows "
        "WHERE pair_id = ? AND stratum IS ? AND url = ? ORDER BY id DESC LIMIT ?",
        (pair_id, stratum, url, MAX_RESUMED),
    )
    kept: list[WatchWindow] = []
    last: dict[str, Any] | None = None
    for r in rows:
        if r["identity_key"] != identity_key:
            break
        if last is None and r["counters_json"]:
            last = json.loads(r["counters_json"])
        kept.append(WatchWindow.model_validate_json(r["window_json"]))
        if r["restarted"]:
            break
    kept.reverse()
    return kept, last


def _pooled(rows: list[Any], num: str, den: str) -> float | None:
    a = sum(r[num] or 0 for r in rows)
    b = sum(r[den] or 0 for r in rows)
    return a / b if b else None


def production(reg: Registry, pair_ids: Iterable[int]) -> list[ProductionEvidence]:
    """Per pair, the newest server watched for it (its newest identity): since when, how many
    windows, the newest state, and acceptance and decode rate pooled over those windows."""
    ids = sorted(set(pair_ids))
    if not ids:
        return []
    newest = reg.database.rows(
        "SELECT w.pair_id, w.stratum, w.url, w.identity_key FROM watch_windows w JOIN ("
        "SELECT pair_id, MAX(id) AS id FROM watch_windows WHERE pair_id IN (SELECT value FROM json_each(?)) "
        "GROUP BY pair_id) n ON n.id = w.id ORDER BY w.pair_id",
        (json.dumps(ids),),
    )
    out = []
    for n in newest:
        rows = reg.database.rows(
            "SELECT * FROM watch_windows WHERE pair_id = ? AND identity_key = ? AND url = ? AND stratum IS ? "
            "ORDER BY id",
            (n["pair_id"], n["identity_key"], n["url"], n["stratum"]),
        )
        last = rows[-1]
        server = json.loads(next((r["server_json"] for r in reversed(rows) if r["server_json"]), "{}"))
        label = server.get("target_path") or "?"
        if server.get("draft_path"):
            label += f", draft {server['draft_path']}"
        out.append(
            ProductionEvidence(
                pair_id=n["pair_id"],
                stratum=n["stratum"],
                url=n["url"],
                server=label,
                first_seen=datetime.fromisoformat(rows[0]["started_at"]),
                last_seen=datetime.fromisoformat(last["ended_at"]),
                windows=len(rows),
                state=last["state"],
                reason=last["reason"],
                acceptance=_pooled(rows, "accepted", "drafted"),
                audited_acceptance=last["audited_acceptance"],
                decode_tps=_pooled(rows, "generated", "generating_s"),
                audited_decode_tps=last["audited_decode_tps"],
                run_id=last["run_id"],
                restarts=sum(r["restarted"] for r in rows),
                mismatches=sum(1 for r in rows if r["mismatches"]),
            )
        )
    return out


def production_of_run(reg: Registry, run_id: str) -> list[ProductionEvidence]:
    """`production` for the pairs whose watched deploy this run is the evidence of."""
    ids = [
        r["pair_id"]
        for r in reg.database.rows("SELECT DISTINCT pair_id FROM watch_windows WHERE run_id = ?", (run_id,))
    ]
    return [p for p in production(reg, ids) if p.run_id == run_id]
