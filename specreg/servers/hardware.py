"""Hardware classes: the manifest's hardware block reduced to one key, so that results from a fleet
(an H100, an L4, a CPU box) are listed, audited and decided side by side, never mixed.

The key names the CPU model and core count, the GPU models and the placement; it leaves out what
varies between runs on the same machine (load, free memory, clocks). It is also what a policy's
`evidence.hardware` matches.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specreg.registry.store import Registry


def hardware_class(hw: Mapping[str, Any] | None) -> str | None:
    """CPU, GPU(s) and placement in one line, from a manifest's `hardware` block (a plain dict)."""
    if not hw:
        return None
    gpu = hw.get("gpu") or {}
    gpus = ", ".join(str(d.get("name")) for d in gpu.get("devices") or []) if gpu.get("present") else "no GPU"
    return f"{hw.get('cpu_model') or 'unknown CPU'} x{hw.get('logical_cores') or '?'}; {gpus}; {hw.get('placement')}"


def run_hardware(reg: Registry, run_ids: list[str] | None = None) -> dict[str, str | None]:
    """Run id -> hardware class, read with SQLite's JSON functions (no manifest is parsed whole)."""
    sql = "SELECT run_id, json_extract(manifest_json, '$.hardware') FROM bench_runs"
    params: tuple[str, ...] = ()
    if run_ids is not None:
        sql += " WHERE run_id IN (SELECT value FROM json_each(?))"
        params = (json.dumps(run_ids),)
    return {rid: hardware_class(json.loads(hw)) if hw else None for rid, hw in reg.conn.execute(sql, params)}


def labels(classes: list[str]) -> dict[str, str]:
    """Short column names (H1, H2, ...) for hardware classes, in their sorted order."""
    return {c: f"H{i}" for i, c in enumerate(sorted(classes), start=1)}


@dataclass
class HardwareCell:
    """The newest finished run of one pair on one hardware class, and its speed-up over all prompts."""

    run_id: str
    status: str
    host: str | None
    speedup: float | None


@dataclass
class HardwareRow:
    target_sha256: str
    target_name: str | None
    draft_sha256: str | None
    draft_name: str | None
    method: str
    cells: dict[str, HardwareCell] = field(default_factory=dict)  # hardware class -> newest run


def by_hardware(reg: Registry) -> tuple[list[str], list[HardwareRow]]:
    """Every (target, draft, method) measured, with its newest run per hardware class side by side.

    The speed-up is the run's own method over the baseline across all strata (its `all` summary);
    runs that say nothing about a pair (still going, kept nothing, stopped) are left out.
    """
    from specreg.schemas.bench import SAYS_NOTHING

    sql = (
        "SELECT r.run_id, r.status, r.method, r.target_sha256, r.draft_sha256, t.name, d.name, o.host, "
        "json_extract(r.manifest_json, '$.hardware'), "
        "(SELECT json_extract(s.summary_json, '$.speedup') FROM bench_summaries s WHERE s.run_id = r.run_id "
        "AND s.stratum = 'all' AND json_valid(s.summary_json) AND json_extract(s.summary_json, '$.method') = r.method "
        "LIMIT 1) "
        "FROM bench_runs r LEFT JOIN artifacts t ON t.sha256 = r.target_sha256 "
        "LEFT JOIN artifacts d ON d.sha256 = r.draft_sha256 LEFT JOIN run_origins o ON o.run_id = r.run_id "
        f"WHERE r.status NOT IN ({', '.join(repr(s) for s in SAYS_NOTHING)}) ORDER BY r.started_at, r.run_id"
    )
    rows: dict[tuple[str, str | None, str], HardwareRow] = {}
    classes: set[str] = set()
    for rid, status, method, target, draft, tname, dname, host, hw, speedup in reg.conn.execute(sql):
        cls = hardware_class(json.loads(hw)) if hw else None
        if cls is None:
            continue
        classes.add(cls)
        row = rows.setdefault((target, draft, method), HardwareRow(target, tname, draft, dname, method))
        if not isinstance(speedup, int | float) or not math.isfinite(speedup):
            speedup = None  # a summary another shape than specreg writes gives no number, never NaN
        row.cells[cls] = HardwareCell(rid, status, host, speedup)  # ordered by time: the newest wins
    return sorted(classes), sorted(rows.values(), key=lambda r: (r.target_name or "", r.target_sha256, r.method))
