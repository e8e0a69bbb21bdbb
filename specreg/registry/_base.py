"""What the registry's parts share: the connection, the write transaction and row helpers."""

from __future__ import annotations

import errno
import gc
import os
import resource
import sqlite3
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specreg.errors import RegistryError, SpecregError
from specreg.registry import hashing
from specreg.schemas.registry import ArtifactRecord

if TYPE_CHECKING:
    from sqlite_utils import Database


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic GC while a list view builds 10^4-10^5 small models: none are cycles, but
    the allocations trigger repeated full collections (measured: half the CPU of `pairs()`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def now_iso() -> str:
    """UTC timestamp with microseconds, sortable as text."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def writable(path: Path) -> bool:
    """Can we write the registry file (if it exists) and create its -wal/-shm next to it?
    access(2) also says no for read-only filesystems and immutable files, even to root."""
    if path.exists() and not os.access(path, os.W_OK):
        return False
    return os.access(path.parent, os.W_OK)


def _space_problem(path: Path, minimum: int = 1 << 20) -> str | None:
    """Why a write may have failed for lack of room: SQLite reports ENOSPC/EFBIG on a WAL or
    journal write as a plain "disk I/O error", so look at the disk and the size limit."""
    try:
        st = os.statvfs(path.parent)
        if st.f_bavail * st.f_frsize < minimum:
            return "the disk is full"
    except OSError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        return f"file size limit (ulimit -f) of {soft} bytes"
    return None


def read_only_error(path: Path, detail: str = "") -> RegistryError:
    """The registry file or its folder cannot be written."""
    why = f" ({detail})" if detail else ""
    return RegistryError(
        f"registry {path} is read-only{why}; nothing was written",
        hint="use --db PATH or SPECREG_DB to choose a writable registry file",
    )


def registry_error(path: Path, exc: BaseException) -> RegistryError:
    """One clear message (and hint) for a database failure, naming the registry file."""
    text = str(exc)
    low = text.lower()
    code = getattr(exc, "errno", None)
    if "readonly" in low or "read-only" in low or code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return read_only_error(path, text)
    full = "disk is full" in low or code in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
    room = _space_problem(path) if (full or "disk i/o" in low) else None
    if full or room:
        return RegistryError(
            f"registry {path}: no space left to write ({'; '.join(filter(None, (text, room)))}); "
            "nothing was written, "
            "earlier records are kept",
            hint="free disk space (or raise the file size limit) and run the command again",
        )
    if "locked" in low or "busy" in low:
        return RegistryError(
            f"registry {path} is locked by another writer ({text})",
            hint="another specreg process holds the write lock; try again when it finishes",
        )
    if "unable to open" in low:
        if not writable(path):
            return read_only_error(path, text)
        return RegistryError(
            f"registry {path} cannot be opened ({text})",
            hint="check that the file and its folder exist and are readable and writable",
        )
    if "disk i/o" in low:
        return RegistryError(f"registry {path}: disk I/O error ({text})", hint="check the disk")
    return RegistryError(f"registry {path}: {text}")


class RegistryBase:
    """Base of the Registry mixins; `Registry.__init__` sets `path`, `conn` and the counters.

    Reads and the registry's own writes use the plain `sqlite3` connection (`conn`); `db`, the
    same connection as a `sqlite_utils.Database`, is built on first use: importing sqlite_utils
    costs ~0.2 s (it imports numpy), a third of a `specreg check pair`.
    """

    path: Path
    conn: sqlite3.Connection
    _db: Database | None = None
    show_progress: bool = True
    read_only: bool = False  # opened read-only because the file or its folder is not writable
    hash_count: int = 0  # files hashed by this instance (tests and benchmarks read it)

    @property
    def db(self) -> Database:
        """The connection as a sqlite_utils Database (what `write()` yields)."""
        if self._db is None:
            from sqlite_utils import Database

            self._db = Database(self.conn)
        return self._db

    def add_artifact(self, path: str | Path, **options: Any) -> ArtifactRecord:  # implemented by Registry
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:  # implemented by Registry
        raise NotImplementedError

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        cur = self.conn.execute(sql, params)
        cur.row_factory = sqlite3.Row
        row: sqlite3.Row | None = cur.fetchone()
        return row

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        cur = self.conn.execute(sql, params)
        cur.row_factory = sqlite3.Row
        return cur.fetchall()

    def _hash(self, path: Path) -> tuple[str, hashing.StatKey, int]:
        try:
            if self.show_progress:
                sha, key = hashing.sha256_with_bar(path)
            else:
                sha, key = hashing.sha256_file_keyed(path)
        except hashing.FileChangedWhileHashing as exc:
            raise SpecregError(str(exc), hint="wait until the file is completely written") from exc
        self.hash_count += 1
        return sha, key, time.time_ns()
