"""Proving that registered paths still hold the registered bytes; stat-cache hits cost no hashing."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from specreg.errors import ArtifactNotFound, RegistryError, SpecregError
from specreg.registry import hashing
from specreg.registry.artifacts import IN_SHAS, ArtifactStore
from specreg.registry.db import now_iso
from specreg.registry.shards import Shard
from specreg.schemas.registry import ArtifactRecord

Refreshed = tuple[str, hashing.StatKey, int]  # (path, stat it was hashed at, when)


class Integrity:
    """Verifies artifacts' paths and refreshes the stat cache of `artifact_paths` (the store's table)."""

    def __init__(self, artifacts: ArtifactStore) -> None:
        self.artifacts = artifacts
        self.db = artifacts.db
        self._fresh_shards: list[tuple[str, Shard]] = []  # verified shards whose stat cache to store

    def _check_path(
        self, rec: ArtifactRecord, row: sqlite3.Row, rehash: bool, split: bool = True
    ) -> tuple[str | None, Refreshed | None]:
        """(problem, None) or (None, refreshed stat to store, or None on a stat-cache hit); a split
        model's other shards (next to this path) must hold their pinned bytes too (`split=False`:
        the caller knows it has none)."""
        problem, refreshed = self._check_first(rec, row, rehash)
        if problem is None:
            shard_problem, shards = self.artifacts.shards.verify(rec.sha256, row["path"], rehash=rehash, split=split)
            if shard_problem:
                return shard_problem, None
            self._fresh_shards.extend((rec.sha256, s) for s in shards)
        return problem, refreshed

    def _check_first(self, rec: ArtifactRecord, row: sqlite3.Row, rehash: bool) -> tuple[str | None, Refreshed | None]:
        path = row["path"]
        try:
            key = hashing.StatKey.of(os.stat(path))
        except FileNotFoundError:
            return f"{path}: missing", None
        except OSError as exc:
            return f"{path}: cannot read ({exc.strerror})", None
        stored = hashing.StatKey(row["device"], row["inode"], row["size"], row["mtime_ns"], row["ctime_ns"])
        if not rehash and key == stored and not hashing.is_racy(key, row["hashed_at_ns"]):
            return None, None
        if key.size != rec.size:
            return f"{path}: size is now {key.size} bytes, registered {rec.size}", None
        try:
            sha, hkey, at = self.artifacts.hash(Path(path))
        except (OSError, SpecregError) as exc:
            return f"{path}: cannot hash ({exc})", None
        if sha != rec.sha256:
            return f"{path}: sha256 is now {sha}, registered {rec.sha256}", None
        return None, (path, hkey, at)

    def _refresh(self, fresh: list[Refreshed]) -> None:
        """Store re-verified stats; a read-only registry only loses the cache update."""
        shards, self._fresh_shards = self._fresh_shards, []
        if not fresh and not shards:
            return
        try:
            with self.db.transaction() as conn:
                for sha, shard in shards:
                    self.artifacts.shards.pin(conn, sha, [shard])
                stamp = now_iso()
                conn.executemany(
                    "UPDATE artifact_paths SET device = ?, inode = ?, size = ?, mtime_ns = ?, ctime_ns = ?, "
                    "hashed_at_ns = ?, last_verified_at = ? WHERE path = ?",
                    [(k.device, k.inode, k.size, k.mtime_ns, k.ctime_ns, at, stamp, path) for path, k, at in fresh],
                )
        except RegistryError:
            pass

    def verify(self, recs: Iterable[ArtifactRecord], *, rehash: bool = False) -> dict[str, tuple[bool, str | None]]:
        """Do all registered paths of each artifact still hold its bytes? (sha256 -> (ok, problem)):
        one query for all their paths and one write for all refreshed stats."""
        by_sha = {r.sha256: r for r in recs}
        found: dict[str, list[sqlite3.Row]] = {sha: [] for sha in by_sha}
        for row in self.db.rows(
            f"SELECT * FROM artifact_paths WHERE {IN_SHAS} ORDER BY id", (json.dumps(sorted(by_sha)),)
        ):
            found[row["sha256"]].append(row)
        out: dict[str, tuple[bool, str | None]] = {}
        fresh: list[Refreshed] = []
        split = self.artifacts.shards.split(sorted(by_sha)) if by_sha else set()  # not one query per artifact
        for sha, rec in by_sha.items():
            if not found[sha]:
                out[sha] = (False, f"artifact {sha[:12]} has no registered path")
                continue
            problems: list[str] = []
            for row in found[sha]:
                problem, refreshed = self._check_path(rec, row, rehash, sha in split)
                if problem:
                    problems.append(problem)
                elif refreshed:
                    fresh.append(refreshed)
            out[sha] = (not problems), ("; ".join(problems) if problems else None)
        self._refresh(fresh)
        return out

    def locate(self, sha_or_prefix: str) -> Path:
        """A path that holds the artifact's bytes now (verified), most recently verified first."""
        rec = self.artifacts.get(sha_or_prefix)
        candidates = self.db.rows(
            "SELECT * FROM artifact_paths WHERE sha256 = ? ORDER BY last_verified_at DESC", (rec.sha256,)
        )
        problems = []
        for row in candidates:
            problem, refreshed = self._check_path(rec, row, rehash=False)
            if problem is None:
                self._refresh([refreshed] if refreshed else [])
                return Path(row["path"])
            problems.append(problem)
        raise ArtifactNotFound(
            f"artifact {rec.sha256[:12]}: no registered path holds its bytes any more "
            f"({'; '.join(problems) or 'no paths'})",
            hint="register the file again at its new location",
        )
