"""What the registry knows about a file by its stat alone: no hashing, no models, no writes.

The stat cache vouches for a path's SHA-256 while the file's (device, inode, size, mtime, ctime)
are those it was hashed at and the hash was not racy (hashing.is_racy). `ArtifactStore` and
the read-only `specreg inspect` both ask here; this module needs only sqlite3, so an inspect of
a registered file does not import the registry's pydantic records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from specreg.gguf.walk import KnownArray
from specreg.registry import hashing
from specreg.registry.db import Database


def cached_sha(db: Database, apath: str, key: hashing.StatKey) -> tuple[str, int] | None:
    """(sha256, hashed_at_ns) when this path - or a hard/sym link to the same inode - has
    this exact stat and the stat is not racy; None means the bytes must be hashed."""
    found = db.rows(
        "SELECT p.sha256, p.hashed_at_ns, p.path = ? AS same FROM artifact_paths p "
        "JOIN artifacts a ON a.sha256 = p.sha256 "
        "WHERE (p.path = ? OR (p.device = ? AND p.inode = ?)) "
        "AND p.device = ? AND p.inode = ? AND p.size = ? AND p.mtime_ns = ? AND p.ctime_ns = ? "
        "ORDER BY same DESC",
        (apath, apath, key.device, key.inode, key.device, key.inode, key.size, key.mtime_ns, key.ctime_ns),
    )
    for row in found:
        if not hashing.is_racy(key, row["hashed_at_ns"]):
            return row["sha256"], row["hashed_at_ns"]
    return None


def known_sha256(db: Database, path: str | Path) -> str | None:
    """The SHA-256 of a file if the stat cache vouches for it."""
    apath = os.path.abspath(os.fspath(path))
    try:
        key = hashing.StatKey.of(os.stat(apath))
    except OSError:
        return None
    hit = cached_sha(db, apath, key)
    return hit[0] if hit else None


def licence_of(db: Database, sha256: str) -> tuple[str | None, bool] | None:
    """(effective licence, whether its sources conflict) of a registered artifact; None if unknown."""
    row = db.one("SELECT effective_license, licence_conflict FROM artifacts WHERE sha256 = ?", (sha256,))
    return None if row is None else (row["effective_license"], bool(row["licence_conflict"]))


def layout_of(db: Database, sha256: str) -> dict[int, KnownArray] | None:
    """The long string arrays of a registered artifact (GGUFFile.string_array_layout), for a
    re-read to jump over; None when unknown or not as written (the reader verifies each jump).
    A layout written before the heap was kept (three numbers an array) says None for it."""
    row = db.one("SELECT layout_json FROM artifacts WHERE sha256 = ?", (sha256,))
    try:
        raw = json.loads(row["layout_json"]) if row is not None and row["layout_json"] else None
        if not isinstance(raw, dict):
            return None
        out = {
            int(k): (int(v[0]), int(v[1]), str(v[2]), int(v[3]) if len(v) > 3 and v[3] is not None else None)
            for k, v in raw.items()
        }
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    return out


def layout_json(layout: dict[int, KnownArray]) -> str:
    return json.dumps({str(k): list(v) for k, v in layout.items()}, separators=(",", ":"))
