"""The registry's SQLite file: connection, write transaction, row helpers and error mapping.

Callers get a plain `sqlite3.Connection`: from `Database.conn` for reads and from
`transaction()` / `Registry.write()` for writes. Our writes need `ON CONFLICT` upserts,
`json_each` filters and savepoints, which are SQL in any API, and the migrations are applied
here too, in sqlite-utils' record format (registry/migrations.py): importing sqlite-utils pulls
in numpy and click, more than a whole `specreg check pair` needs.

Also here, because every stage stores timestamps: the package's one `now()` (timezone-aware UTC).
"""

from __future__ import annotations

import errno
import itertools
import os
import resource
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from specreg.errors import RegistryError, SpecregError
from specreg.registry.migrations import migrations

if TYPE_CHECKING:
    from pydantic import TypeAdapter

BUSY_TIMEOUT_S = 60.0
# Rows per validation call of `records_in_batches`: one call for thousands of rows first parses
# megabytes into one JSON tree (measured slower than a call per row); 64 rows at a time is faster
# than either.
JSON_BATCH = 64
# names of nested transactions' savepoints: unique within the process, so within any connection's
# nesting (a counter, not random names: nothing to seed or import for a name nobody reads)
_SAVEPOINTS = itertools.count(1)
T = TypeVar("T")


def now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def iso(dt: datetime | None) -> str | None:
    """A stored timestamp: ISO 8601 with microseconds, sortable as text."""
    return dt.isoformat(timespec="microseconds") if dt else None


def text(value: Any) -> Any:
    """A TEXT column as str where another tool wrote a BLOB (records are dataclasses: they keep
    what they are given, where pydantic read such bytes as text)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def now_iso() -> str:
    """`now()` as a stored timestamp."""
    return now().isoformat(timespec="microseconds")


def records_in_batches(
    conn: sqlite3.Connection, sql: str, params: tuple[Any, ...], adapter: TypeAdapter[list[T]]
) -> list[T] | None:
    """The records of a query whose one column is each row as a JSON object (bytes), validated
    a batch at a time: one model per row built in Rust instead of in a Python loop. None when
    any row does not validate or SQLite cannot write it as JSON (a damaged or foreign record):
    the caller then reads the rows one by one, the way that reports such a row for itself."""
    try:
        found = conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "JSON" not in str(exc):  # not "JSON cannot hold BLOB values" (a foreign row): as ever
            raise
        return None
    out: list[T] = []
    for i in range(0, len(found), JSON_BATCH):
        try:
            out += adapter.validate_json(b"[" + b",".join(r[0] for r in found[i : i + JSON_BATCH]) + b"]")
        except ValueError:  # pydantic's ValidationError
            return None
    return out


def rows(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
    """Every row of a query, addressable by column name."""
    cur = conn.execute(sql, params)
    cur.row_factory = sqlite3.Row
    return cur.fetchall()


def one(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Row | None:
    """The first row of a query (by column name), or None."""
    cur = conn.execute(sql, params)
    cur.row_factory = sqlite3.Row
    row: sqlite3.Row | None = cur.fetchone()
    return row


# -- error mapping ---------------------------------------------------------------------------


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
            "nothing was written, earlier records are kept",
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


# -- the connection --------------------------------------------------------------------------


class Database:
    """One registry file: opened read-write (WAL, busy timeout, migrations applied) or, when the
    file or its folder cannot be written, read-only. `memory=True` is an empty registry that
    lives only in this process (a read-only command on a registry that does not exist yet).

    Every write goes through `transaction()`, which holds `BEGIN IMMEDIATE` for the whole
    logical write: the write lock is taken before the first read, so a read-then-write can never
    fail half-way with "database is locked" (a deferred transaction that later upgrades to a
    writer gets SQLITE_BUSY with no retry). The busy timeout makes waiting writers queue up.
    """

    def __init__(self, path: Path, *, busy_timeout_s: float = BUSY_TIMEOUT_S, memory: bool = False) -> None:
        self.path = path
        self.read_only = False  # opened read-only because the file or its folder is not writable
        if memory:
            self.conn = self._connect(":memory:", busy_timeout_s)
            self._migrate()
            return
        try:
            self.conn = self._open_read_write(busy_timeout_s)
        except RegistryError:
            # Reading a registry on a read-only disk (or an immutable file) should still work.
            if not (self.path.is_file() and not writable(self.path)):
                raise
            self.conn = self._open_read_only(busy_timeout_s)
            self.read_only = True

    @staticmethod
    def _connect(target: str, busy_timeout_s: float, uri: bool = False) -> sqlite3.Connection:
        return sqlite3.connect(target, uri=uri, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)

    def _migrate(self) -> None:
        self._refuse_newer(self.conn)
        if migrations.pending_names(self.conn):
            with self.transaction() as conn:
                migrations.apply(conn)

    def _open_read_write(self, busy_timeout_s: float) -> sqlite3.Connection:
        try:
            conn = self._connect(str(self.path), busy_timeout_s)
        except (OSError, sqlite3.Error) as exc:
            raise registry_error(self.path, exc) from exc
        self.conn = conn
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            self._use_wal(conn, busy_timeout_s)
            # FULL: a committed record survives power loss, not only a crash of the process.
            conn.execute("PRAGMA synchronous = FULL")
            self._migrate()
        except sqlite3.Error as exc:
            conn.close()
            raise registry_error(self.path, exc) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _refuse_newer(self, conn: sqlite3.Connection) -> None:
        """A registry migrated by a newer specreg has tables or meanings this one does not know:
        writing to it could corrupt them, and reading it could mislead. Refuse it, naming why."""
        unknown = migrations.unknown_names(conn)
        if unknown:
            raise RegistryError(
                f"registry {self.path} was written by a newer specreg (schema {', '.join(unknown[:3])}); "
                "nothing was read or written",
                hint="upgrade specreg, or use another --db / SPECREG_DB registry",
            )

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
                conn = self._connect(attempt, busy_timeout_s, uri=True)
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.Error as exc:
                last = exc
                continue
            try:
                self._refuse_newer(conn)
            except RegistryError:
                conn.close()
                raise
            if migrations.pending_names(conn):
                conn.close()
                raise read_only_error(self.path, "and its schema needs an upgrade that cannot be written")
            return conn
        raise registry_error(self.path, last or RuntimeError("cannot open"))

    def close(self) -> None:
        self.conn.close()

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return rows(self.conn, sql, params)

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        return one(self.conn, sql, params)

    @contextmanager
    def keeping(self, wait_s: float = 0.1) -> Iterator[sqlite3.Connection]:
        """A write of something only remembered (a cache): a transaction that waits at most `wait_s`
        for another writer's lock instead of the busy timeout, since a reader must never queue
        behind an import for it. Raises RegistryError like `transaction()` when it cannot write."""
        (before,) = self.conn.execute("PRAGMA busy_timeout").fetchone()
        self.conn.execute(f"PRAGMA busy_timeout = {int(wait_s * 1000)}")
        try:
            with self.transaction() as conn:
                yield conn
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {int(before)}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any error.

        Nested use becomes a savepoint of the outer transaction. sqlite3 / OS errors leave as
        RegistryError (one line for the CLI); a failed write leaves no partial record.
        """
        conn = self.conn
        if self.read_only:
            raise read_only_error(self.path)
        if conn.in_transaction:
            savepoint = f"specreg_{next(_SAVEPOINTS)}"
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
                with suppress(sqlite3.Error):  # the failure we report is the original one
                    conn.execute("ROLLBACK")
            if isinstance(exc, (sqlite3.Error, OSError)) and not isinstance(exc, SpecregError):
                raise registry_error(self.path, exc) from exc
            raise
