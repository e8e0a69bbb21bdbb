"""The registry: one SQLite file (WAL) holding artifacts, their paths and stat cache, and verdicts.

Every write goes through `Registry.write()`, which holds `BEGIN IMMEDIATE` for the whole
logical write: the write lock is taken before the first read, so a read-then-write can never
fail half-way with "database is locked" (a deferred transaction that later upgrades to a
writer gets SQLITE_BUSY with no retry). The busy timeout makes waiting writers queue up.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from specreg.errors import ArtifactNotFound, RegistryError, SpecregError
from specreg.paths import default_db_path
from specreg.registry import hashing, licence
from specreg.registry._base import now_iso, read_only_error, registry_error, writable
from specreg.registry.artifact_reads import ArtifactReads, stat_or_raise
from specreg.registry.migrations import migrations
from specreg.registry.verdicts import VerdictStore
from specreg.schemas.gguf import GGUFSummary
from specreg.schemas.registry import ArtifactRecord, LicenceRecord, LicenceSource, Provenance

if TYPE_CHECKING:
    from sqlite_utils import Database

BUSY_TIMEOUT_S = 60.0


class Registry(ArtifactReads, VerdictStore):
    """The registry file: artifacts, paths + stat cache, pairs and verdicts (see CONTRACTS.md)."""

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        show_progress: bool = True,
    ) -> None:
        if path is None:
            env = os.environ.get("SPECREG_DB")
            path = Path(env) if env else default_db_path()
        self.path = Path(path).expanduser()
        self.show_progress = show_progress
        self.hash_count = 0
        self.read_only = False
        self._db = None
        try:
            self.conn = self._open_read_write(busy_timeout_s)
        except RegistryError:
            # Reading a registry on a read-only disk (or an immutable file) should still work.
            if not (self.path.is_file() and not writable(self.path)):
                raise
            self.conn = self._open_read_only(busy_timeout_s)
            self.read_only = True

    def _open_read_write(self, busy_timeout_s: float) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                str(self.path), timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise registry_error(self.path, exc) from exc
        self.conn = conn
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            self._use_wal(conn, busy_timeout_s)
            # FULL: a committed record survives power loss, not only a crash of the process.
            conn.execute("PRAGMA synchronous = FULL")
            if migrations.pending_names(conn):
                with self.write() as db:
                    migrations.apply(db)
        except sqlite3.Error as exc:
            conn.close()
            raise registry_error(self.path, exc) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _use_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> None:
        """Switch a new registry to WAL. Processes creating it at once race for the switch, and
        SQLite answers "database is locked" at once (no busy wait) to those that lose while the
        winner writes: they wait and look again, the winner has switched it for them."""
        deadline = time.monotonic() + busy_timeout_s
        while conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return  # whatever it answered (a file system without WAL keeps its mode, as before)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _open_read_only(self, busy_timeout_s: float) -> sqlite3.Connection:
        """mode=ro; if SQLite cannot set up WAL shared memory on this disk and no WAL holds
        committed frames, `immutable=1` (the file truly cannot change: nobody can write it)."""
        uri = f"file:{quote(str(self.path.absolute()))}?mode=ro"
        wal = Path(f"{self.path}-wal")
        attempts = [uri] + ([uri + "&immutable=1"] if not (wal.exists() and wal.stat().st_size) else [])
        last: BaseException | None = None
        for attempt in attempts:
            try:
                conn = sqlite3.connect(
                    attempt, uri=True, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
                )
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.Error as exc:
                last = exc
                continue
            if migrations.pending_names(conn):
                conn.close()
                raise read_only_error(self.path, "and its schema needs an upgrade that cannot be written")
            return conn
        raise registry_error(self.path, last or RuntimeError("cannot open"))

    # -- plumbing -----------------------------------------------------------------------------

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def write(self) -> Iterator[Database]:
        """One write transaction: BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any error.

        Nested use becomes a savepoint of the outer transaction. sqlite3 / OS errors leave as
        RegistryError (one line for the CLI); a failed write leaves no partial record.
        """
        if self.read_only:
            raise read_only_error(self.path)
        db = self.db  # the first use imports sqlite_utils (~0.2 s): before the write lock, not under it
        with self._transaction():
            yield db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """`write()` on the plain connection (the registry's own writes need no sqlite_utils)."""
        conn = self.conn
        if self.read_only:
            raise read_only_error(self.path)
        if conn.in_transaction:
            savepoint = f"specreg_{secrets.token_hex(8)}"
            conn.execute(f"SAVEPOINT {savepoint}")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # an error may already have ended the whole transaction
                    conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                    conn.execute(f"RELEASE SAVEPOINT {savepoint}")
                raise
            conn.execute(f"RELEASE SAVEPOINT {savepoint}")
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise registry_error(self.path, exc) from exc
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the failure we report is the original one
            if isinstance(exc, (sqlite3.Error, OSError)) and not isinstance(exc, SpecregError):
                raise registry_error(self.path, exc) from exc
            raise

    # -- artifacts ----------------------------------------------------------------------------

    def add_artifact(
        self,
        path: str | Path,
        *,
        license: str | None = None,
        repo: str | None = None,
        revision: str | None = None,
        rehash: bool = False,
        provenance_extra: dict[str, Any] | None = None,
    ) -> ArtifactRecord:
        """Register a GGUF file (idempotent); the same bytes at a new path add that path."""
        from specreg.gguf.summary import summarize

        apath = os.path.abspath(os.fspath(path))
        key = stat_or_raise(apath)
        cached = None if rehash else self._cached_sha(apath, key)
        summary: GGUFSummary | None = None
        if cached is not None:
            sha, hashed_at = cached
            # An unchanged, already-known path with nothing new to record needs no write at all.
            row = self._one("SELECT sha256 FROM artifact_paths WHERE path = ?", (apath,))
            if row is not None and row["sha256"] == sha and not (license or repo or revision or provenance_extra):
                return self.get_artifact(sha)
        else:
            if self.read_only:  # don't hash 20 GB only to find we cannot record it
                raise read_only_error(self.path)
            summary = summarize(apath)  # a non-GGUF file fails here, before a 20 GB hash
            sha, hashed_key, hashed_at = self._hash(Path(apath))
            if hashed_key != key:
                raise SpecregError(
                    f"{apath}: file changed while it was being registered",
                    hint="wait until the file is completely written",
                )
        # HF cache (repo, commit, filename), model card licence, hub verification; no network.
        from specreg.registry import provenance  # only when something is written (the hub code, logging)

        prov, card = provenance.local_facts(apath, repo=repo, revision=revision, extra=provenance_extra)
        with self._transaction() as db:
            known = self._one("SELECT licence_json FROM artifacts WHERE sha256 = ?", (sha,))
            stamp = now_iso()
            if known is None:
                if summary is None:  # cache pointed at a row deleted meanwhile: read it now
                    summary = summarize(apath)
                self._insert_artifact(db, sha, summary, license, prov, card, stamp)
            elif license or repo or revision or provenance_extra or card or prov.source == "hf_cache":
                rec = LicenceRecord.model_validate_json(known["licence_json"])
                if license:
                    rec = licence.with_source(rec, LicenceSource(source="user", value=license))
                if card:
                    rec = licence.with_source(rec, card)
                self._update_artifact(
                    sha, rec, prov.repo, prov.revision, prov.extra, stamp, source=prov.source or "user"
                )
            self._upsert_path(apath, sha, key, hashed_at, stamp)
        return self.get_artifact(sha)

    def _insert_artifact(
        self,
        db: sqlite3.Connection,
        sha: str,
        summary: GGUFSummary,
        user_license: str | None,
        prov: Provenance,
        card: LicenceSource | None,
        stamp: str,
    ) -> None:
        summary = summary.model_copy(update={"sha256": sha})
        sources: list[LicenceSource | None] = [licence.from_gguf(summary.license), card]
        if user_license:
            sources.append(LicenceSource(source="user", value=user_license))
        rec = licence.combine(sources)
        db.execute(
            "INSERT INTO artifacts (sha256, size, name, architecture, file_type, file_type_name, "
            "n_tokens, summary_json, effective_license, licence_source, licence_conflict, "
            "licence_json, repo, revision, filename, provenance_source, provenance_json, "
            "registered_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                sha,
                summary.file_size,
                summary.name,
                summary.architecture,
                summary.file_type,
                summary.file_type_name,
                summary.tokenizer.n_tokens,
                summary.model_dump_json(),
                rec.effective,
                rec.effective_source,
                int(rec.conflict),
                rec.model_dump_json(),
                prov.repo,
                prov.revision,
                prov.filename,
                prov.source,
                json.dumps(prov.extra),
                stamp,
                stamp,
            ),
        )

    def _update_artifact(
        self,
        sha: str,
        rec: LicenceRecord | None,
        repo: str | None,
        revision: str | None,
        extra: dict[str, Any] | None,
        stamp: str,
        source: str = "user",
    ) -> None:
        row = self._one("SELECT provenance_json FROM artifacts WHERE sha256 = ?", (sha,))
        if row is None:
            raise ArtifactNotFound(f"no registered artifact with sha256 {sha}")
        sets: dict[str, Any] = {"updated_at": stamp}
        if rec is not None:
            sets |= {
                "effective_license": rec.effective,
                "licence_source": rec.effective_source,
                "licence_conflict": int(rec.conflict),
                "licence_json": rec.model_dump_json(),
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
        self.conn.execute(f"UPDATE artifacts SET {cols} WHERE sha256 = ?", (*sets.values(), sha))

    def _upsert_path(self, apath: str, sha: str, key: hashing.StatKey, hashed_at: int, stamp: str) -> None:
        self.conn.execute(
            "INSERT INTO artifact_paths (sha256, path, device, inode, size, mtime_ns, hashed_at_ns, "
            "first_seen_at, last_verified_at) VALUES (?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (path) DO UPDATE SET sha256 = excluded.sha256, device = excluded.device, "
            "inode = excluded.inode, size = excluded.size, mtime_ns = excluded.mtime_ns, "
            "hashed_at_ns = excluded.hashed_at_ns, last_verified_at = excluded.last_verified_at",
            (sha, apath, key.device, key.inode, key.size, key.mtime_ns, hashed_at, stamp, stamp),
        )

    def add_licence_source(self, sha256: str, source: LicenceSource) -> ArtifactRecord:
        """Add (or replace) one licence statement, e.g. the model card's, and recompute."""
        with self._transaction():
            row = self._one("SELECT licence_json FROM artifacts WHERE sha256 = ?", (sha256,))
            if row is None:
                raise ArtifactNotFound(f"no registered artifact with sha256 {sha256}")
            rec = licence.with_source(LicenceRecord.model_validate_json(row["licence_json"]), source)
            self._update_artifact(sha256, rec, None, None, None, now_iso())
        return self.get_artifact(sha256)

    def set_provenance(
        self,
        sha256: str,
        *,
        repo: str | None = None,
        revision: str | None = None,
        source: str = "hub",
        extra: dict[str, Any] | None = None,
    ) -> ArtifactRecord:
        """Record where the bytes came from (the hub code calls this); `extra` is merged."""
        with self._transaction():
            self._update_artifact(sha256, None, repo, revision, extra, now_iso(), source=source)
        return self.get_artifact(sha256)
