"""Split GGUFs: every shard named by `split.count` is hashed, pinned and verified with the first.

A split model is registered by its first shard (`<prefix>-00001-of-0000N.gguf`): that is the
file llama.cpp is given, and it finds the others by name (src/llama.cpp `llama_split_path`,
`-%05d-of-%05d.gguf`, checking each one's `split.no`). The artifact is keyed by the first
shard's SHA-256, so the others must be pinned beside it: otherwise swapping shard 2 changes
the model behind an unchanged key. Owns the table `artifact_shards`: per shard file (by path)
its number, the SHA-256 pinned for that number, and the stat cache that spares re-hashing it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from specreg.errors import ArtifactNotFound, SpecregError
from specreg.registry import snapshot
from specreg.registry.db import Database
from specreg.registry.hashing import StatKey, is_racy
from specreg.schemas.gguf import GGUFSummary

HashFd = Callable[[str, int], "tuple[str, StatKey, int]"]


@dataclass(frozen=True)
class Shard:
    """One shard after the first, as read now: number (0-based split.no), file, SHA-256, stat."""

    no: int
    path: str
    sha256: str
    key: StatKey
    hashed_at_ns: int


def shard_paths(first: str, count: int) -> list[str]:
    """The paths of shards 2..count, named from the first one exactly as llama.cpp does."""
    postfix = f"-{1:05d}-of-{count:05d}.gguf"
    if len(first) <= len(postfix) or not first.endswith(postfix):
        raise ArtifactNotFound(
            f"{first}: a split GGUF ({count} shards) must be named <name>{postfix}",
            hint="llama.cpp finds the other shards by that name; rename the files as gguf-split wrote them",
        )
    prefix = first[: -len(postfix)]
    return [f"{prefix}-{i + 1:05d}-of-{count:05d}.gguf" for i in range(1, count)]


class ShardStore:
    """Read, pin and verify the shards of split artifacts."""

    def __init__(self, db: Database, hash_fd: HashFd) -> None:
        self.db = db
        self.hash_fd = hash_fd

    def pinned(self, sha256: str) -> dict[int, str]:
        """shard number -> the SHA-256 pinned for it (empty: not a split artifact)."""
        rows = self.db.rows(
            "SELECT DISTINCT shard_no, sha256 FROM artifact_shards WHERE artifact_sha256 = ?", (sha256,)
        )
        return {r["shard_no"]: r["sha256"] for r in rows}

    def split(self, shas: list[str]) -> set[str]:
        """Which of these artifacts have pinned shards (one query, for verifying many at once)."""
        rows = self.db.rows(
            "SELECT DISTINCT artifact_sha256 FROM artifact_shards WHERE artifact_sha256 IN "
            "(SELECT value FROM json_each(?))",
            (json.dumps(shas),),
        )
        return {r["artifact_sha256"] for r in rows}

    def _cached(self, path: str, key: StatKey) -> tuple[str, int] | None:
        row = self.db.one(
            "SELECT sha256, hashed_at_ns FROM artifact_shards WHERE path = ? AND device = ? AND inode = ? "
            "AND size = ? AND mtime_ns = ? AND ctime_ns = ?",
            (path, key.device, key.inode, key.size, key.mtime_ns, key.ctime_ns),
        )
        if row is None or is_racy(key, row["hashed_at_ns"]):
            return None
        return row["sha256"], row["hashed_at_ns"]

    def read(self, first: str, summary: GGUFSummary, *, rehash: bool = False) -> list[Shard]:
        """Shards 2..N of the split whose first shard is `first` (parsed and hashed, or vouched for
        by the stat cache); a missing, foreign or misnumbered shard is an error naming it."""
        count = summary.split_count or 1
        if count < 2:
            return []
        if summary.split_no:
            raise ArtifactNotFound(
                f"{first} is shard {summary.split_no + 1} of {count}; a split model is registered by its first shard",
                hint="give the file named ...-00001-of-... (llama.cpp loads the others from it)",
            )
        return self._read(first, count, rehash)

    def _read(self, first: str, count: int, rehash: bool) -> list[Shard]:
        from specreg.gguf.summary import summarize

        out = []
        for no, path in enumerate(shard_paths(first, count), start=1):
            try:
                snap = snapshot.take(path, cached=None if rehash else self._cached, hash_fd=self.hash_fd)
            except ArtifactNotFound as exc:
                raise ArtifactNotFound(
                    f"{first}: shard {no + 1} of {count} is not readable ({exc.message})",
                    hint="every shard named by split.count must be present next to the first",
                ) from None
            s = summarize(snap.file)
            if s.split_no != no or s.split_count != count:
                raise SpecregError(f"{path}: split.no is {s.split_no} of {s.split_count}, expected {no} of {count}")
            out.append(Shard(no, path, snap.sha256, snap.key, snap.hashed_at_ns))
        return out

    def pin(self, conn: sqlite3.Connection, sha256: str, shards: list[Shard]) -> None:
        """Record the shards of artifact `sha256` (inside the caller's transaction). The SHA-256 of
        each shard number is fixed by the first registration: other bytes are refused."""
        pinned = self.pinned(sha256)
        for s in shards:
            if s.no in pinned and pinned[s.no] != s.sha256:
                raise SpecregError(
                    f"{s.path}: shard {s.no + 1} has sha256 {s.sha256[:12]}, but this model was registered "
                    f"with shard sha256 {pinned[s.no][:12]}; nothing recorded",
                    hint="the shard was replaced; restore it, or register the changed model under new names",
                )
            self._upsert(conn, sha256, s)

    def _upsert(self, conn: sqlite3.Connection, sha256: str, s: Shard) -> None:
        k = s.key
        conn.execute(
            "INSERT INTO artifact_shards (artifact_sha256, shard_no, sha256, size, path, device, inode, mtime_ns, "
            "ctime_ns, hashed_at_ns) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (path) DO UPDATE SET "
            "artifact_sha256 = excluded.artifact_sha256, shard_no = excluded.shard_no, sha256 = excluded.sha256, "
            "size = excluded.size, device = excluded.device, inode = excluded.inode, mtime_ns = excluded.mtime_ns, "
            "ctime_ns = excluded.ctime_ns, hashed_at_ns = excluded.hashed_at_ns",
            (sha256, s.no, s.sha256, k.size, s.path, k.device, k.inode, k.mtime_ns, k.ctime_ns, s.hashed_at_ns),
        )

    def verify(self, sha256: str, first: str, *, rehash: bool, split: bool = True) -> tuple[str | None, list[Shard]]:
        """(problem, shards read) for the shards next to `first`: each must hold its pinned bytes.
        `split=False`: the caller knows (from `split`) that nothing is pinned for this artifact."""
        pinned = self.pinned(sha256) if split else {}
        if not pinned:
            return None, []
        try:
            shards = self._read(first, max(pinned) + 1, rehash)
        except SpecregError as exc:
            return exc.message, []
        bad = [
            f"{s.path}: shard {s.no + 1} sha256 is now {s.sha256}, pinned {pinned.get(s.no)}"
            for s in shards
            if pinned.get(s.no) != s.sha256
        ]
        return ("; ".join(bad) or None), shards


def is_split(summary: GGUFSummary) -> bool:
    return (summary.split_count or 1) > 1
