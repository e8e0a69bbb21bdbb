"""Finding registered artifacts (by SHA-256 prefix or path) and proving their bytes unchanged."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from specreg.errors import AmbiguousArtifact, ArtifactNotFound, RegistryError, SpecregError
from specreg.registry import hashing
from specreg.registry._base import RegistryBase, no_gc, now_iso
from specreg.schemas.gguf import GGUFSummary
from specreg.schemas.registry import ArtifactRecord, LicenceRecord, Provenance

MIN_PREFIX = 6
_HEX = re.compile(r"[0-9a-f]{6,64}")
# Everything a list view shows; summary_json (kilobytes per row) is read only when asked for.
LIST_COLUMNS = (
    "sha256, size, name, architecture, file_type, file_type_name, n_tokens, licence_json, "
    "repo, revision, filename, provenance_source, provenance_json, registered_at, updated_at"
)


_IN_SHAS = "sha256 IN (SELECT value FROM json_each(?))"


def stat_or_raise(apath: str) -> hashing.StatKey:
    """StatKey of a regular file, or ArtifactNotFound saying what is wrong with the path."""
    try:
        st = os.stat(apath)
    except FileNotFoundError:
        raise ArtifactNotFound(f"{apath}: no such file") from None
    except OSError as exc:
        raise ArtifactNotFound(f"{apath}: cannot read ({exc.strerror})") from None
    if not os.path.isfile(apath):
        raise ArtifactNotFound(f"{apath}: not a regular file")
    return hashing.StatKey.of(st)


def _record(row: sqlite3.Row, paths: list[str], with_summary: bool) -> ArtifactRecord:
    summary = GGUFSummary.model_validate_json(row["summary_json"]) if with_summary else None
    return ArtifactRecord(
        sha256=row["sha256"],
        size=row["size"],
        paths=paths,
        name=row["name"],
        architecture=row["architecture"],
        file_type=row["file_type"],
        file_type_name=row["file_type_name"],
        n_tokens=row["n_tokens"],
        summary=summary,
        licence=LicenceRecord.model_validate_json(row["licence_json"]),
        provenance=Provenance(
            repo=row["repo"],
            revision=row["revision"],
            filename=row["filename"],
            source=row["provenance_source"],
            extra=json.loads(row["provenance_json"] or "{}"),
        ),
        registered_at=row["registered_at"],
        updated_at=row["updated_at"],
    )


class ArtifactReads(RegistryBase):
    """The read side of artifacts, and integrity checks that refresh the stat cache."""

    def get_artifact(self, sha_or_prefix: str) -> ArtifactRecord:
        """The artifact whose SHA-256 is, or starts with, `sha_or_prefix` (>= 6 hex digits)."""
        want = sha_or_prefix.strip().lower()
        if not _HEX.fullmatch(want):
            raise ArtifactNotFound(
                f"{sha_or_prefix!r} is not a SHA-256 or a prefix of at least {MIN_PREFIX} hex digits",
                hint="`specreg artifacts` lists the registered SHA-256s",
            )
        # A range scan on the primary key: every hex string with this prefix sorts in [p, p+'g').
        rows = self._all(
            f"SELECT {LIST_COLUMNS}, summary_json FROM artifacts "
            "WHERE sha256 >= ? AND sha256 < ? ORDER BY sha256 LIMIT 6",
            (want, want + "g"),
        )
        if not rows:
            what = "sha256" if len(want) == 64 else "sha256 prefix"
            raise ArtifactNotFound(
                f"no registered artifact with {what} {want}",
                hint="`specreg artifacts` lists them; `specreg register FILE` adds one",
            )
        if len(rows) > 1:
            shown = ", ".join(r["sha256"][:16] for r in rows[:5])
            more = "+" if len(rows) > 5 else ""
            raise AmbiguousArtifact(
                f"sha256 prefix {want} matches {min(len(rows), 5)}{more} artifacts: {shown}",
                hint="give more hex digits",
            )
        return _record(rows[0], self._paths_of(rows[0]["sha256"]), with_summary=True)

    def _cached_sha(self, apath: str, key: hashing.StatKey) -> tuple[str, int] | None:
        """(sha256, hashed_at_ns) when this path - or a hard/sym link to the same inode - has
        this exact stat and the stat is not racy; None means the bytes must be hashed."""
        rows = self._all(
            "SELECT p.sha256, p.hashed_at_ns, p.path = ? AS same FROM artifact_paths p "
            "JOIN artifacts a ON a.sha256 = p.sha256 "
            "WHERE (p.path = ? OR (p.device = ? AND p.inode = ?)) "
            "AND p.device = ? AND p.inode = ? AND p.size = ? AND p.mtime_ns = ? "
            "ORDER BY same DESC",
            (apath, apath, key.device, key.inode, key.device, key.inode, key.size, key.mtime_ns),
        )
        for row in rows:
            if not hashing.is_racy(key, row["hashed_at_ns"]):
                return row["sha256"], row["hashed_at_ns"]
        return None

    def known_sha256(self, path: str | Path) -> str | None:
        """The SHA-256 of a file if the stat cache vouches for it (no hashing, no write)."""
        apath = os.path.abspath(os.fspath(path))
        try:
            key = hashing.StatKey.of(os.stat(apath))
        except OSError:
            return None
        hit = self._cached_sha(apath, key)
        return hit[0] if hit else None

    def _paths_of(self, sha: str) -> list[str]:
        return [r["path"] for r in self._all("SELECT path FROM artifact_paths WHERE sha256 = ? ORDER BY id", (sha,))]

    def artifacts(self, *, with_summary: bool = True) -> list[ArtifactRecord]:
        """Every artifact, oldest first; `with_summary=False` is the fast list view."""
        paths: dict[str, list[str]] = {}
        for r in self._all("SELECT sha256, path FROM artifact_paths ORDER BY id"):
            paths.setdefault(r["sha256"], []).append(r["path"])
        cols = LIST_COLUMNS + (", summary_json" if with_summary else "")
        rows = self._all(f"SELECT {cols} FROM artifacts ORDER BY registered_at, sha256")
        with no_gc():
            return [_record(r, paths.get(r["sha256"], []), with_summary) for r in rows]

    def get_artifacts(self, shas: Iterable[str], *, with_summary: bool = False) -> dict[str, ArtifactRecord]:
        """Records of many artifacts by full SHA-256 in two queries (sha256 -> record; unknown
        SHA-256s are left out). `with_summary=False`, the default, skips the GGUF summaries."""
        wanted = json.dumps(sorted(set(shas)))
        paths: dict[str, list[str]] = {}
        for sha, path in self.conn.execute(
            f"SELECT sha256, path FROM artifact_paths WHERE {_IN_SHAS} ORDER BY id", (wanted,)
        ):
            paths.setdefault(sha, []).append(path)
        cols = LIST_COLUMNS + (", summary_json" if with_summary else "")
        rows = self._all(f"SELECT {cols} FROM artifacts WHERE {_IN_SHAS}", (wanted,))
        with no_gc():
            return {r["sha256"]: _record(r, paths.get(r["sha256"], []), with_summary) for r in rows}

    def resolve(self, path_or_prefix: str) -> ArtifactRecord:
        """An existing file is registered (or found by its stat); otherwise a SHA-256 prefix."""
        if os.path.exists(path_or_prefix):
            return self.add_artifact(path_or_prefix)
        if _HEX.fullmatch(path_or_prefix.strip().lower()):
            return self.get_artifact(path_or_prefix)
        raise ArtifactNotFound(
            f"{path_or_prefix}: no such file, and not a SHA-256 prefix of {MIN_PREFIX}+ hex digits",
            hint="give a GGUF path, or a SHA-256 (prefix) from `specreg artifacts`",
        )

    def _check_path(
        self, rec: ArtifactRecord, row: sqlite3.Row, rehash: bool
    ) -> tuple[str | None, tuple[str, hashing.StatKey, int] | None]:
        """(problem, None) or (None, refreshed stat to store, or None on a stat-cache hit)."""
        path = row["path"]
        try:
            key = hashing.StatKey.of(os.stat(path))
        except FileNotFoundError:
            return f"{path}: missing", None
        except OSError as exc:
            return f"{path}: cannot read ({exc.strerror})", None
        stored = hashing.StatKey(row["device"], row["inode"], row["size"], row["mtime_ns"])
        if not rehash and key == stored and not hashing.is_racy(key, row["hashed_at_ns"]):
            return None, None
        if key.size != rec.size:
            return f"{path}: size is now {key.size} bytes, registered {rec.size}", None
        try:
            sha, hkey, at = self._hash(Path(path))
        except (OSError, SpecregError) as exc:
            return f"{path}: cannot hash ({exc})", None
        if sha != rec.sha256:
            return f"{path}: sha256 is now {sha}, registered {rec.sha256}", None
        return None, (path, hkey, at)

    def _refresh(self, fresh: list[tuple[str, hashing.StatKey, int]]) -> None:
        """Store re-verified stats; a read-only registry only loses the cache update."""
        if not fresh:
            return
        try:
            with self._transaction() as db:
                stamp = now_iso()
                for path, key, at in fresh:
                    db.execute(
                        "UPDATE artifact_paths SET device = ?, inode = ?, size = ?, mtime_ns = ?, "
                        "hashed_at_ns = ?, last_verified_at = ? WHERE path = ?",
                        (key.device, key.inode, key.size, key.mtime_ns, at, stamp, path),
                    )
        except RegistryError:
            pass

    def verify_artifact(self, rec: ArtifactRecord, *, rehash: bool = False) -> tuple[bool, str | None]:
        """Do all registered paths still hold these bytes? Stat-cache hits cost no hashing."""
        return self.verify_artifacts([rec], rehash=rehash)[rec.sha256]

    def verify_artifacts(
        self, recs: Iterable[ArtifactRecord], *, rehash: bool = False
    ) -> dict[str, tuple[bool, str | None]]:
        """`verify_artifact` for many artifacts (sha256 -> (ok, problem)): one query for all their
        paths and one write for all refreshed stats, instead of one of each per artifact."""
        recs = {r.sha256: r for r in recs}
        rows: dict[str, list[sqlite3.Row]] = {sha: [] for sha in recs}
        for row in self._all(f"SELECT * FROM artifact_paths WHERE {_IN_SHAS} ORDER BY id", (json.dumps(sorted(recs)),)):
            rows[row["sha256"]].append(row)
        out: dict[str, tuple[bool, str | None]] = {}
        fresh: list[tuple[str, hashing.StatKey, int]] = []
        for sha, rec in recs.items():
            if not rows[sha]:
                out[sha] = (False, f"artifact {sha[:12]} has no registered path")
                continue
            problems: list[str] = []
            for row in rows[sha]:
                problem, refreshed = self._check_path(rec, row, rehash)
                if problem:
                    problems.append(problem)
                elif refreshed:
                    fresh.append(refreshed)
            out[sha] = (not problems), ("; ".join(problems) if problems else None)
        self._refresh(fresh)
        return out

    def locate(self, sha_or_prefix: str) -> Path:
        """A path that holds the artifact's bytes now (verified), most recently verified first."""
        rec = self.get_artifact(sha_or_prefix)
        rows = self._all(
            "SELECT * FROM artifact_paths WHERE sha256 = ? ORDER BY last_verified_at DESC",
            (rec.sha256,),
        )
        problems = []
        for row in rows:
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
