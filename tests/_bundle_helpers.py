"""Helpers for the bundle tests: registry dumps, and bundles rewritten as another host would write them."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import zipfile
from collections.abc import Callable
from pathlib import Path

from specreg.exchange.bundle_format import HEADER, RUN_PARTS, BundleHeader, Member, run_digest, run_member


def dump(db: Path) -> list[str]:
    """Every row of every table (SQL text): two equal dumps mean nothing changed."""
    conn = sqlite3.connect(db)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def write_members(path: Path, data: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, blob in data.items():
            zf.writestr(name, blob)
    return path


def rewrite(
    src: Path,
    dst: Path,
    edit: Callable[[dict[str, bytes], dict], None],
    *,
    reseal: bool = True,
) -> Path:
    """Copy a bundle, let `edit` change its members and header (a dict), and - with `reseal` - recompute
    every member hash, run digest and the manifest digest, as a specreg on another host would have."""
    data = members(src)
    header = json.loads(data.pop(HEADER))
    edit(data, header)
    if reseal:
        header["members"] = [
            Member(name=n, size=len(b), sha256=hashlib.sha256(b).hexdigest()).model_dump() for n, b in data.items()
        ]
        for run in header["runs"]:
            parts = {p: data.get(run_member(run["run_id"], p), b"") for p in RUN_PARTS}
            run["digest"] = run_digest(parts)
        header["digest"] = BundleHeader.model_validate(header).body_digest()
    data[HEADER] = json.dumps(header).encode()
    return write_members(dst, data)


def rename_run(data: dict[str, bytes], header: dict, old: str, new: str) -> None:
    """Give a run a new id everywhere (members, rows, header), as if measured again elsewhere."""
    for name in [n for n in data if n.startswith(f"runs/{old}/")]:
        blob = data.pop(name)
        if name.endswith((".json", ".jsonl")):
            lines = []
            for line in blob.splitlines():
                rec = json.loads(line)
                rec["run_id"] = new
                lines.append(json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
            blob = b"".join(ln + b"\n" for ln in lines)
        data[name.replace(f"runs/{old}/", f"runs/{new}/")] = blob
    for run in header["runs"]:
        if run["run_id"] == old:
            run["run_id"] = new
            run["logs"] = {k: v.replace(f"runs/{old}/", f"runs/{new}/") for k, v in run["logs"].items()}


def edit_run(data: dict[str, bytes], run_id: str, change: Callable[[dict], None]) -> None:
    """Change the run.json record of a run (e.g. its manifest's hardware block)."""
    name = run_member(run_id, "run.json")
    rec = json.loads(data[name])
    change(rec)
    data[name] = json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def slowed(bundle: Path, dst: Path, run_id: str, condition: str, factor: float, work: Path) -> Path:
    """The bundle with one condition's requests `factor` times slower and its summaries drawn again
    from those rows with specreg's own code: what a slower box measures and writes (an import
    draws the summaries again and refuses any that its rows do not give)."""
    from specreg.benchmark.store.condition_summary import StatSettings, stat_settings, summarize
    from specreg.benchmark.store.runstore import RunStore
    from specreg.exchange.bundle import export_bundle, import_bundles
    from specreg.registry.store import Registry

    work.mkdir(parents=True, exist_ok=True)
    with Registry(work / "slowed.db", show_progress=False) as reg:
        import_bundles(reg, [bundle])
        with reg.write():
            reg.conn.execute(
                "UPDATE bench_requests SET total_ms = total_ms * ? WHERE run_id = ? AND condition = ?",
                (factor, run_id, condition),
            )
        store = RunStore(reg)
        run = store.load(run_id)
        m = run.manifest
        stats = stat_settings(m.settings, m.runtime.spec_defaults) if m is not None and m.settings else StatSettings()
        store.set_summaries(
            run_id, run.info.target_sha256, run.info.draft_sha256, summarize(run.conditions, run.requests, stats)
        )
        export_bundle(reg, dst, run_ids=[run_id])
    return dst


def db_rows(db: Path, sql: str) -> list[tuple]:
    """The rows a query returns from a registry file, read by a connection of its own."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()
