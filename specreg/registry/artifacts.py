"""Artifacts: GGUF files keyed by the SHA-256 of their bytes, the paths where each was seen (with
the stat cache that spares re-hashing), their licence statements and provenance.

Owns the tables `artifacts` and `artifact_paths`. Provenance facts (HF cache, model card) are
computed by the caller (`provenance.register`) and passed in: this module never looks them up.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specreg.errors import AmbiguousArtifact, ArtifactNotFound, SpecregError
from specreg.registry import hashing, licence, snapshot, statcache
from specreg.registry.db import Database, now_iso, read_only_error, records_in_batches, text
from specreg.registry.shards import Shard, ShardStore, is_split
from specreg.schemas.gguf import GGUFSummary, summary_from_json, summary_to_json
from specreg.schemas.record import adapter, stamp, to_json
from specreg.schemas.registry import ArtifactRecord, LicenceRecord, LicenceSource, Provenance

if TYPE_CHECKING:
    from specreg.gguf.walk import TwinArray
    from specreg.registry.snapshot import Snapshot

MIN_PREFIX = 6
HEX = re.compile(r"[0-9a-f]{6,64}")
# Everything a list view shows; summary_json (kilobytes per row) is read only when asked for.
LIST_COLUMNS = (
    "sha256, size, name, architecture, file_type, file_type_name, n_tokens, licence_json, "
    "repo, revision, filename, provenance_source, provenance_json, registered_at, updated_at"
)
IN_SHAS = "sha256 IN (SELECT value FROM json_each(?))"


# A list-view row as one JSON object (ArtifactRecord's fields, no summary) for
# db.records_in_batches. Paths in their order (an aggregate keeps its subquery's ORDER BY: SQLite
# does not flatten it); the stored licence and provenance spliced in as stored text, each only
# when it is JSON (else null: validation fails and the read goes row by row, where `_stored`
# takes care of it); JSON text parses alike in pydantic and in `json.loads` (the row path).
_JSON_ROW = (
    "SELECT CAST('{\"paths\":' || (SELECT json_group_array(path) FROM (SELECT path FROM artifact_paths ap "
    "WHERE ap.sha256 = a.sha256 ORDER BY ap.id)) || ',\"licence\":' || CASE WHEN typeof(licence_json) = 'text' "
    "AND json_valid(licence_json) THEN licence_json ELSE 'null' END || ',\"provenance\":{\"extra\":' || "
    "CASE WHEN ifnull(provenance_json, '') = '' THEN '{}' WHEN typeof(provenance_json) = 'text' "
    "AND json_valid(provenance_json) THEN provenance_json ELSE 'null' END || ',' || substr(json_object("
    "'repo', repo, 'revision', revision, 'filename', filename, 'source', provenance_source), 2) || ',' || "
    "substr(json_object('sha256', sha256, 'size', size, 'name', name, 'architecture', architecture, "
    "'file_type', file_type, 'file_type_name', file_type_name, 'n_tokens', n_tokens, 'summary', NULL, "
    "'registered_at', registered_at, 'updated_at', updated_at), 2) AS BLOB) FROM artifacts a "
)


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


def _stored(load: Any, raw: str, default: Any) -> Any:
    """A stored JSON field, or `default` when the record is damaged (no licence stated, no
    provenance): one bad row must not stop every listing, and nothing is allowed on it."""
    try:
        return load(raw)
    except ValueError:
        return default


def _record(
    row: sqlite3.Row, paths: list[str], with_summary: bool, summary: GGUFSummary | None = None
) -> ArtifactRecord:
    """`summary`: the one just read from the file itself (a registration), else `summary_json`."""
    if summary is not None:
        summary = replace(summary, sha256=row["sha256"])
    elif with_summary:
        summary = summary_from_json(row["summary_json"])
    return ArtifactRecord(
        sha256=row["sha256"],
        size=row["size"],
        paths=paths,
        name=text(row["name"]),
        architecture=text(row["architecture"]),
        file_type=row["file_type"],
        file_type_name=text(row["file_type_name"]),
        n_tokens=row["n_tokens"],
        summary=summary,
        licence=_stored(licence.from_stored, row["licence_json"], LicenceRecord()),
        provenance=Provenance(
            repo=text(row["repo"]),
            revision=text(row["revision"]),
            filename=text(row["filename"]),
            source=text(row["provenance_source"]),
            extra=_stored(json.loads, row["provenance_json"] or "{}", {"unreadable": "damaged provenance record"}),
        ),
        registered_at=stamp(row["registered_at"]),
        updated_at=stamp(row["updated_at"]),
    )


class ArtifactStore:
    """Registering and finding artifacts; `hash_count` counts the files this instance hashed."""

    def __init__(self, db: Database, *, show_progress: bool = True) -> None:
        self.db = db
        self.show_progress = show_progress
        self.hash_count = 0
        self.shards = ShardStore(db, lambda p, fd: self.hash(Path(p), fd))

    # -- reading ----------------------------------------------------------------------------

    def get(self, sha_or_prefix: str, summary: GGUFSummary | None = None) -> ArtifactRecord:
        """The artifact whose SHA-256 is, or starts with, `sha_or_prefix` (>= 6 hex digits);
        `summary`: its summary as the caller just read it from the file (not parsed again)."""
        want = sha_or_prefix.strip().lower()
        if not HEX.fullmatch(want):
            raise ArtifactNotFound(
                f"{sha_or_prefix!r} is not a SHA-256 or a prefix of at least {MIN_PREFIX} hex digits",
                hint="`specreg artifacts` lists the registered SHA-256s",
            )
        # A range scan on the primary key: every hex string with this prefix sorts in [p, p+'g').
        found = self.db.rows(
            f"SELECT {LIST_COLUMNS}, summary_json FROM artifacts "
            "WHERE sha256 >= ? AND sha256 < ? ORDER BY sha256 LIMIT 6",
            (want, want + "g"),
        )
        if not found:
            what = "sha256" if len(want) == 64 else "sha256 prefix"
            raise ArtifactNotFound(
                f"no registered artifact with {what} {want}",
                hint="`specreg artifacts` lists them; `specreg register FILE` adds one",
            )
        if len(found) > 1:
            shown = ", ".join(r["sha256"][:16] for r in found[:5])
            more = "+" if len(found) > 5 else ""
            raise AmbiguousArtifact(
                f"sha256 prefix {want} matches {min(len(found), 5)}{more} artifacts: {shown}",
                hint="give more hex digits",
            )
        return _record(found[0], self._paths_of(found[0]["sha256"]), with_summary=True, summary=summary)

    def _paths_of(self, sha: str) -> list[str]:
        return [r["path"] for r in self.db.rows("SELECT path FROM artifact_paths WHERE sha256 = ? ORDER BY id", (sha,))]

    def all(self, *, with_summary: bool = True) -> list[ArtifactRecord]:
        """Every artifact, oldest first; `with_summary=False` is the fast list view."""
        paths: dict[str, list[str]] = {}
        for r in self.db.rows("SELECT sha256, path FROM artifact_paths ORDER BY id"):
            paths.setdefault(r["sha256"], []).append(r["path"])
        cols = LIST_COLUMNS + (", summary_json" if with_summary else "")
        found = self.db.rows(f"SELECT {cols} FROM artifacts ORDER BY registered_at, sha256")
        return [_record(r, paths.get(r["sha256"], []), with_summary) for r in found]

    def get_many(self, shas: Iterable[str], *, with_summary: bool = False) -> dict[str, ArtifactRecord]:
        """Records of many artifacts by full SHA-256 (unknown ones are left out): one query, or two
        when a record must be read row by row."""
        wanted = json.dumps(sorted(set(shas)))
        if not with_summary:
            fast = records_in_batches(
                self.db.conn, f"{_JSON_ROW} WHERE {IN_SHAS}", (wanted,), adapter(list[ArtifactRecord])
            )
            if fast is not None:
                return {r.sha256: r for r in fast}
        return self.get_many_by_row(wanted, with_summary=with_summary)

    def get_many_by_row(self, wanted: str, *, with_summary: bool) -> dict[str, ArtifactRecord]:
        """`get_many` one row at a time (`wanted`: a JSON list of SHA-256 digests): the path that reads a
        damaged licence or provenance record as none stated."""
        paths: dict[str, list[str]] = {}
        for sha, path in self.db.conn.execute(
            f"SELECT sha256, path FROM artifact_paths WHERE {IN_SHAS} ORDER BY id", (wanted,)
        ):
            paths.setdefault(sha, []).append(path)
        cols = LIST_COLUMNS + (", summary_json" if with_summary else "")
        found = self.db.rows(f"SELECT {cols} FROM artifacts WHERE {IN_SHAS}", (wanted,))
        return {r["sha256"]: _record(r, paths.get(r["sha256"], []), with_summary) for r in found}

    def cached_sha(self, apath: str, key: hashing.StatKey) -> tuple[str, int] | None:
        """(sha256, hashed_at_ns) when the stat cache vouches for this path (statcache.py)."""
        return statcache.cached_sha(self.db, apath, key)

    def known_sha256(self, path: str | Path) -> str | None:
        """The SHA-256 of a file if the stat cache vouches for it (no hashing, no write)."""
        return statcache.known_sha256(self.db, path)

    def registered_at(self, path: str) -> dict[str, str]:
        """Registered path -> SHA-256 for this exact absolute path, or for a relative one every
        registered path that ends with it (a server's `/props` names its model as it was given)."""
        if os.path.isabs(path):
            rows = self.db.rows("SELECT path, sha256 FROM artifact_paths WHERE path = ?", (path,))
        else:
            tail = "/" + path.lstrip("./")
            rows = self.db.rows(
                "SELECT path, sha256 FROM artifact_paths WHERE substr(path, -length(?)) = ?", (tail, tail)
            )
        return {r["path"]: r["sha256"] for r in rows}

    def registered_unchanged(self, path: str | Path) -> str | None:
        """The SHA-256 when this very path is registered and unchanged since (stat cache)."""
        apath = os.path.abspath(os.fspath(path))
        sha = self.known_sha256(apath)
        row = self.db.one("SELECT sha256 FROM artifact_paths WHERE path = ?", (apath,))
        return sha if sha is not None and row is not None and row["sha256"] == sha else None

    # -- hashing and registering ------------------------------------------------------------

    def hash(self, path: Path, fd: int | None = None) -> tuple[str, hashing.StatKey, int]:
        """(sha256, the stat it was hashed at, when) with a progress bar unless told otherwise;
        `fd`: hash that open descriptor of `path` (see snapshot.py)."""
        try:
            if self.show_progress:
                sha, key = hashing.sha256_with_bar(path, fd=fd)
            else:
                sha, key = hashing.sha256_file_keyed(path, fd=fd)
        except hashing.FileChangedWhileHashing as exc:
            raise SpecregError(str(exc), hint="wait until the file is completely written") from exc
        self.hash_count += 1
        return sha, key, time.time_ns()

    def hash_many(self, paths: list[str], sizes: list[int]) -> list[hashing.Hashed | OSError]:
        """`hash` for many files (hashing.sha256_files: large ones on several cores), in order:
        each result or why it failed. One progress bar for all when they add up to 1 GiB."""
        total = sum(sizes)
        if self.show_progress and total >= hashing.PROGRESS_MIN_SIZE:
            from rich.markup import escape

            what = escape(Path(paths[0]).name) if len(paths) == 1 else f"{len(paths)} files"
            with hashing.progress_bar(f"sha256 {what}", total) as advance:
                found = hashing.sha256_files(paths, sizes, advance)
        else:
            found = hashing.sha256_files(paths, sizes)
        self.hash_count += sum(1 for r in found if not isinstance(r, OSError))
        return found

    @staticmethod
    def _parse(apath: str) -> GGUFSummary:
        from specreg.gguf.summary import summarize

        return summarize(apath)

    def snapshot(
        self, path: str | Path, *, rehash: bool = False, twins: Mapping[str, TwinArray] | None = None
    ) -> Snapshot:
        """Open the file once, parse and hash that descriptor (the stat cache may vouch for the
        hash of exactly this stat unless `rehash`): what a verdict about these bytes needs.
        `twins`: the pair's other file's arrays (snapshot.take)."""
        return snapshot.take(
            path,
            cached=None if rehash else self.cached_sha,
            hash_fd=lambda p, fd: self.hash(Path(p), fd),
            layout=lambda sha: statcache.layout_of(self.db, sha),
            twins=twins,
        )

    def _read(self, apath: str, key: hashing.StatKey) -> tuple[GGUFSummary, str, int, str]:
        """Parse, then hash the same open file: the one place a registration reads its bytes. A
        non-GGUF file fails in the parse, before a 20 GB hash."""
        from specreg.gguf.summary import summarize

        snap = snapshot.take(apath, cached=None, hash_fd=lambda p, fd: self.hash(Path(p), fd))
        if snap.key != key:
            raise SpecregError(
                f"{apath}: file changed while it was being registered", hint="wait until the file is completely written"
            )
        return (
            summarize(snap.file),
            snap.sha256,
            snap.hashed_at_ns,
            statcache.layout_json(snap.file.string_array_layout()),
        )

    def add(
        self,
        path: str | Path,
        *,
        license: str | None = None,
        provenance: Provenance | None = None,
        card: LicenceSource | None = None,
        rehash: bool = False,
        snap: Snapshot | None = None,
    ) -> ArtifactRecord:
        """Register a GGUF file (idempotent); the same bytes at a new path add that path.

        `provenance` and `card` are the caller's local facts (`provenance.local_facts`); without
        them the file is recorded with its name only. `snap`: the file as the caller already
        read it (`snapshot()`): registered under exactly that SHA-256 and stat.
        """
        apath = os.path.abspath(os.fspath(path))
        prov = provenance or Provenance(filename=os.path.basename(apath))
        news = bool(license or card or prov.repo or prov.revision or prov.extra)
        key = snap.key if snap is not None else stat_or_raise(apath)
        cached = None if rehash or snap is not None else self.cached_sha(apath, key)
        summary: GGUFSummary | None = None
        layout: str | None = None  # where the file's long string arrays lie (statcache.layout_of)
        if snap is not None:
            from specreg.gguf.summary import summarize

            if self.db.read_only and snap.hashed:
                raise read_only_error(self.db.path)
            sha, hashed_at, summary = snap.sha256, snap.hashed_at_ns, summarize(snap.file)
            layout = statcache.layout_json(snap.file.string_array_layout())
        elif cached is not None:
            sha, hashed_at = cached
            # An unchanged, already-known path with nothing new to record needs no write at all.
            row = self.db.one("SELECT sha256 FROM artifact_paths WHERE path = ?", (apath,))
            if row is not None and row["sha256"] == sha and not news:
                return self.get(sha)
        else:
            if self.db.read_only:  # don't hash 20 GB only to find we cannot record it
                raise read_only_error(self.db.path)
            summary, sha, hashed_at, layout = self._read(apath, key)
        if snap is not None and not snap.hashed and not news and summary is not None and not is_split(summary):
            # the stat cache vouched for this very path: nothing new to record, no write at all
            row = self.db.one(
                "SELECT p.sha256, a.layout_json FROM artifact_paths p JOIN artifacts a ON a.sha256 = p.sha256 "
                "WHERE p.path = ?",
                (apath,),
            )
            if row is not None and row["sha256"] == sha and row["layout_json"] == layout:
                return self.get(sha, summary=summary)
        # a split model: every shard is read (stat cache or hash) before anything is written
        shards: list[Shard] = []
        if summary is not None and is_split(summary):
            shards = self.shards.read(apath, summary, rehash=rehash)
        written: ArtifactRecord | None = None  # the row inserted here, as written
        with self.db.transaction() as conn:
            known = self.db.one("SELECT licence_json, layout_json FROM artifacts WHERE sha256 = ?", (sha,))
            stamp = now_iso()
            if known is None:
                if summary is None:  # cache pointed at a row deleted meanwhile: read it now
                    summary = self._parse(apath)
                written = self._insert(conn, sha, summary, license, prov, card, stamp, layout)
            elif layout is not None and known["layout_json"] != layout:  # registered before m009
                conn.execute("UPDATE artifacts SET layout_json = ? WHERE sha256 = ?", (layout, sha))
            elif news or prov.source == "hf_cache":
                rec = licence.from_stored(known["licence_json"])
                if license:
                    rec = licence.with_source(rec, LicenceSource(source="user", value=license))
                if card:
                    rec = licence.with_source(rec, card)
                self._update(sha, rec, prov.repo, prov.revision, prov.extra, stamp, source=prov.source or "user")
            self._upsert_path(apath, sha, key, hashed_at, stamp)
            if shards:
                self.shards.pin(conn, sha, shards)
        if written is not None:
            return replace(written, paths=self._paths_of(sha))
        return self.get(sha, summary=summary)

    def add_remote(self, sha: str, summary: GGUFSummary, provenance: Provenance) -> ArtifactRecord:
        """Record a file known only by its header and a trusted SHA-256 (a hub's LFS hash): no path.

        An artifact already registered (e.g. fetched) keeps its paths; the remote facts are added
        to its provenance."""
        if self.db.read_only:
            raise read_only_error(self.db.path)
        with self.db.transaction() as conn:
            stamp = now_iso()
            if self.db.one("SELECT 1 FROM artifacts WHERE sha256 = ?", (sha,)) is None:
                return self._insert(conn, sha, summary, None, provenance, None, stamp)
            # keep what is known (a fetched copy's provenance); add the remote facts
            self._update(sha, None, None, None, provenance.extra, stamp)
        return self.get(sha)

    def _insert(
        self,
        conn: sqlite3.Connection,
        sha: str,
        summary: GGUFSummary,
        user_license: str | None,
        prov: Provenance,
        card: LicenceSource | None,
        now: str,
        layout: str | None = None,
    ) -> ArtifactRecord:
        """Insert a new artifact's row; returns the record as written (its paths are added by
        the caller): what `get` would read back, without reading and validating it again."""
        summary = replace(summary, sha256=sha)
        sources: list[LicenceSource | None] = [licence.from_gguf(summary.license), card]
        if user_license:
            sources.append(LicenceSource(source="user", value=user_license))
        rec = licence.combine(sources)
        extra = json.dumps(prov.extra)
        conn.execute(
            "INSERT INTO artifacts (sha256, size, name, architecture, file_type, file_type_name, "
            "n_tokens, summary_json, effective_license, licence_source, licence_conflict, "
            "licence_json, repo, revision, filename, provenance_source, provenance_json, "
            "registered_at, updated_at, layout_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                sha,
                summary.file_size,
                summary.name,
                summary.architecture,
                summary.file_type,
                summary.file_type_name,
                summary.tokenizer.n_tokens,
                summary_to_json(summary),
                rec.effective,
                rec.effective_source,
                int(rec.conflict),
                to_json(rec),
                prov.repo,
                prov.revision,
                prov.filename,
                prov.source,
                extra,
                now,
                now,
                layout,
            ),
        )
        at = stamp(now)
        return ArtifactRecord(
            sha256=sha,
            size=summary.file_size,
            name=summary.name,
            architecture=summary.architecture,
            file_type=summary.file_type,
            file_type_name=summary.file_type_name,
            n_tokens=summary.tokenizer.n_tokens,
            summary=summary,
            licence=rec,
            provenance=replace(prov, extra=json.loads(extra)),  # as read back: JSON's types
            registered_at=at,
            updated_at=at,
        )

    def _update(
        self,
        sha: str,
        rec: LicenceRecord | None,
        repo: str | None,
        revision: str | None,
        extra: dict[str, Any] | None,
        stamp: str,
        source: str = "user",
    ) -> None:
        row = self.db.one("SELECT provenance_json FROM artifacts WHERE sha256 = ?", (sha,))
        if row is None:
            raise ArtifactNotFound(f"no registered artifact with sha256 {sha}")
        sets: dict[str, Any] = {"updated_at": stamp}
        if rec is not None:
            sets |= {
                "effective_license": rec.effective,
                "licence_source": rec.effective_source,
                "licence_conflict": int(rec.conflict),
                "licence_json": to_json(rec),
            }
        if repo or revision:
            sets |= {"provenance_source": source}
            if repo:
                sets["repo"] = repo
            if revision:
                sets["revision"] = revision
        if extra:
            sets["provenance_json"] = json.dumps({**json.loads(row["provenance_json"]), **extra})
        cols = ", ".join(f"{c} = ?" for c in sets)
        self.db.conn.execute(f"UPDATE artifacts SET {cols} WHERE sha256 = ?", (*sets.values(), sha))

    def _upsert_path(self, apath: str, sha: str, key: hashing.StatKey, hashed_at: int, stamp: str) -> None:
        self.db.conn.execute(
            "INSERT INTO artifact_paths (sha256, path, device, inode, size, mtime_ns, ctime_ns, hashed_at_ns, "
            "first_seen_at, last_verified_at) VALUES (?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (path) DO UPDATE SET sha256 = excluded.sha256, device = excluded.device, "
            "inode = excluded.inode, size = excluded.size, mtime_ns = excluded.mtime_ns, "
            "ctime_ns = excluded.ctime_ns, hashed_at_ns = excluded.hashed_at_ns, "
            "last_verified_at = excluded.last_verified_at",
            (sha, apath, key.device, key.inode, key.size, key.mtime_ns, key.ctime_ns, hashed_at, stamp, stamp),
        )

    def add_licence_source(self, sha256: str, source: LicenceSource) -> ArtifactRecord:
        """Add (or replace) one licence statement, e.g. the model card's, and recompute."""
        with self.db.transaction():
            row = self.db.one("SELECT licence_json FROM artifacts WHERE sha256 = ?", (sha256,))
            if row is None:
                raise ArtifactNotFound(f"no registered artifact with sha256 {sha256}")
            rec = licence.with_source(licence.from_stored(row["licence_json"]), source)
            self._update(sha256, rec, None, None, None, now_iso())
        return self.get(sha256)
