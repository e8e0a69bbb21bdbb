"""Proving that registered paths still hold the registered bytes; stat-cache hits cost no hashing."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from specreg.errors import ArtifactNotFound, RegistryError, SpecregError
from specreg.registry import hashing
from specreg.registry.artifacts import IN_SHAS, ArtifactStore
from specreg.registry.db import now_iso
from specreg.registry.shards import Shard


class Pinned(Protocol):
    """What verifying an artifact reads of its record: the bytes' SHA-256 and size."""

    @property
    def sha256(self) -> str: ...

    @property
    def size(self) -> int: ...


Refreshed = tuple[str, hashing.StatKey, int]  # (path, stat it was hashed at, when)


class Integrity:
    """Verifies artifacts' paths and refreshes the stat cache of `artifact_paths` (the store's table)."""

    def __init__(self, artifacts: ArtifactStore) -> None:
        self.artifacts = artifacts
        self.db = artifacts.db
        self._fresh_shards: list[tuple[str, Shard]] = []  # verified shards whose stat cache to store

    def _check_path(
        self, rec: Pinned, row: sqlite3.Row, rehash: bool, split: bool = True
    ) -> tuple[str | None, Refreshed | None]:
        """(problem, None) or (None, refreshed stat to store, or None on a stat-cache hit); a split
        model's other shards (next to this path) must hold their pinned bytes too (`split=False`:
        the caller knows it has none)."""
        problem, size = self._stat_first(rec, row, rehash)
        refreshed = None
        if size is not None:
            try:
                hashed: hashing.Hashed | OSError | SpecregError = self.artifacts.hash(Path(row["path"]))
            except (OSError, SpecregError) as exc:
                hashed = exc
            problem, refreshed = self._compare(rec, row["path"], hashed)
        return self._shards_too(rec, row["path"], problem, refreshed, rehash, split)

    def _shards_too(
        self,
        rec: Pinned,
        path: str,
        problem: str | None,
        refreshed: Refreshed | None,
        rehash: bool,
        split: bool,
    ) -> tuple[str | None, Refreshed | None]:
        if problem is None:
            shard_problem, shards = self.artifacts.shards.verify(rec.sha256, path, rehash=rehash, split=split)
            if shard_problem:
                return shard_problem, None
            self._fresh_shards.extend((rec.sha256, s) for s in shards)
        return problem, refreshed

    @staticmethod
    def _stat_first(rec: Pinned, row: sqlite3.Row, rehash: bool) -> tuple[str | None, int | None]:
        """(problem, None); (None, None) when the stat cache vouches for the path; (None, size)
        when its bytes must be hashed."""
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
        return None, key.size

    @staticmethod
    def _compare(
        rec: Pinned, path: str, hashed: hashing.Hashed | OSError | SpecregError
    ) -> tuple[str | None, Refreshed | None]:
        """The outcome for a path whose bytes were hashed (or could not be: why)."""
        if isinstance(hashed, (OSError, SpecregError)):
            return f"{path}: cannot hash ({hashed})", None
        sha, hkey, at = hashed
        if sha != rec.sha256:
            return f"{path}: sha256 is now {sha}, registered {rec.sha256}", None
        return None, (path, hkey, at)

    def _refresh(self, fresh: list[Refreshed]) -> None:
        """Store re-verified stats; a read-only or busy registry only loses the cache update."""
        shards, self._fresh_shards = self._fresh_shards, []
        if not fresh and not shards:
            return
        try:
            with self.db.keeping() as conn:  # a cache: never queue behind another writer for it
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

    def verify(self, recs: Iterable[Pinned], *, rehash: bool = False) -> dict[str, tuple[bool, str | None]]:
        """Do all registered paths of each artifact still hold its bytes? (sha256 -> (ok, problem)):
        one query for all their paths, their files hashed together (large ones in parallel; a
        split model's other shards after, one by one) and one write for all refreshed stats."""
        by_sha = {r.sha256: r for r in recs}
        found: dict[str, list[sqlite3.Row]] = {sha: [] for sha in by_sha}
        for row in self.db.rows(
            f"SELECT * FROM artifact_paths WHERE {IN_SHAS} ORDER BY id", (json.dumps(sorted(by_sha)),)
        ):
            found[row["sha256"]].append(row)
        fresh: list[Refreshed] = []
        split = self.artifacts.shards.split(sorted(by_sha)) if by_sha else set()  # not one query per artifact
        # Every path's stat first, then every hash the stats call for at once (large files on
        # several cores: hash_many), then the outcomes in order; SQLite only on this thread.
        todo = [(rec, row) for sha, rec in by_sha.items() for row in found[sha]]
        stats = [self._stat_first(rec, row, rehash) for rec, row in todo]
        wanted = [i for i, (_, size) in enumerate(stats) if size is not None]
        hashes = self.artifacts.hash_many([todo[i][1]["path"] for i in wanted], [stats[i][1] or 0 for i in wanted])
        hashed = dict(zip(wanted, hashes, strict=True))
        problems: dict[str, list[str]] = {sha: [] for sha in by_sha}
        for i, (rec, row) in enumerate(todo):
            problem, refreshed = stats[i][0], None
            if i in hashed:
                problem, refreshed = self._compare(rec, row["path"], hashed[i])
            problem, refreshed = self._shards_too(rec, row["path"], problem, refreshed, rehash, rec.sha256 in split)
            if problem:
                problems[rec.sha256].append(problem)
            elif refreshed:
                fresh.append(refreshed)
        self._refresh(fresh)
        return {
            sha: (not bad, "; ".join(bad) or None)
            if found[sha]
            else (False, f"artifact {sha[:12]} has no registered path")
            for sha, bad in problems.items()
        }

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
