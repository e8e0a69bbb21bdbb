"""The registry: one SQLite file (WAL) holding artifacts, their paths and stat cache, and verdicts.

`Registry` is the one door to it: every caller outside registry/ goes through its methods, and the
parts behind it (`artifacts.ArtifactStore` with `integrity.Integrity`, `pairs.PairStore`, each
over `db.Database`, which owns the connection, transactions and error mapping) are private to it,
so what a caller may do to the file is this class's list. Every write goes through `write()`
(BEGIN IMMEDIATE, see db.py); `conn` and `database` are the plain plumbing for reads.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.errors import RegistryError
from specreg.paths import default_db_path, registry_path
from specreg.registry.artifacts import ArtifactStore
from specreg.registry.db import BUSY_TIMEOUT_S, Database, registry_error
from specreg.registry.integrity import Integrity, Pinned
from specreg.registry.machine_probes import MachineProbes
from specreg.registry.memory_fits import MemoryFits
from specreg.registry.pairs import PairStore
from specreg.registry.template_scans import TemplateScans
from specreg.schemas.checks import PairVerdict
from specreg.schemas.gguf import GGUFSummary
from specreg.schemas.registry import ArtifactRecord, LicenceSource, PairRecord, Provenance

if TYPE_CHECKING:
    from specreg.gguf.walk import TwinArray
    from specreg.registry.snapshot import Snapshot
    from specreg.schemas.machine_probe import MachineProbe, PairProbe


def _is_default(path: Path) -> bool:
    return path.absolute() == default_db_path().expanduser().absolute()


def _where(path: Path, create: bool) -> bool:
    """Check the registry's location; True when it is to be an empty registry in memory.

    A folder that does not exist is refused (a typo in `--db` must not create folders) except
    at the default location; a registry that does not exist is created only by a command that
    writes, and a command that only reads answers from an empty one at the default location.
    """
    folder = path.parent
    default = _is_default(path)
    if path.exists() and not path.is_file():  # /dev/null, a FIFO, a folder: SQLite would write beside it
        raise RegistryError(
            f"registry {path} is not a regular file",
            hint="give --db / SPECREG_DB the path of a registry file (it is created on first write)",
        )
    if not folder.is_dir():
        if not default:
            raise RegistryError(
                f"folder {folder} does not exist", hint="create it first, or choose another --db / SPECREG_DB path"
            )
        if not create:
            return True
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise registry_error(path, exc) from exc
    if create or path.exists():
        return False
    if not default:
        raise RegistryError(
            f"no registry at {path}",
            hint="check --db / SPECREG_DB; `specreg register FILE` creates a registry there",
        )
    return True


class Registry:
    """The registry file: artifacts, paths + stat cache, pairs and verdicts (see CONTRACTS.md).

    `create=False` is for commands that only read: they never create a registry file.
    """

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        show_progress: bool = True,
        create: bool = True,
    ) -> None:
        self.path = registry_path(path).expanduser()
        memory = _where(self.path, create)
        self.database = Database(self.path, busy_timeout_s=busy_timeout_s, memory=memory)
        self._artifacts = ArtifactStore(self.database, show_progress=show_progress)
        self._integrity = Integrity(self._artifacts)
        self._pairs = PairStore(self.database)
        self.template_scans = TemplateScans(self.database)
        self.memory_fits = MemoryFits(self.database)
        self._probes = MachineProbes(self.database)

    # -- plumbing -----------------------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        """The plain connection, for reads (writes go through `write()`)."""
        return self.database.conn

    @property
    def read_only(self) -> bool:
        """Opened read-only because the file or its folder is not writable."""
        return self.database.read_only

    @property
    def hash_count(self) -> int:
        """Files hashed by this instance (tests and benchmarks read it)."""
        return self._artifacts.hash_count

    def close(self) -> None:
        self.database.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (nested: a savepoint); errors leave as RegistryError, nothing half-written."""
        with self.database.transaction() as conn:
            yield conn

    @contextmanager
    def keeping(self) -> Iterator[sqlite3.Connection]:
        """A short write of a cache: gives up at once (RegistryError) when another writer holds the lock."""
        with self.database.keeping() as conn:
            yield conn

    # -- artifacts ----------------------------------------------------------------------------

    def add_artifact(
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

        Args:
            path: the file; parsed and hashed from one open descriptor.
            license: a licence the user states (`--license`), kept beside the file's own.
            provenance: where the file came from (HF cache, hub), as the caller found it
                (`sources.provenance.local_facts`); the registry never looks it up.
            card: the licence the model card states, likewise found by the caller.
            rehash: hash the bytes even when the stat cache vouches for them.
            snap: the file as already opened, parsed and hashed (`snapshot`), not read again.

        Raises:
            ArtifactNotFound: when the path is not a readable regular file.
            GGUFError: when it is not a valid GGUF file.
            RegistryError: when the registry cannot be written.
        """
        return self._artifacts.add(path, license=license, provenance=provenance, card=card, rehash=rehash, snap=snap)

    def add_remote_artifact(self, sha256: str, summary: GGUFSummary, provenance: Provenance) -> ArtifactRecord:
        """Record a remote file by its header and a trusted SHA-256, with no path (metadata only)."""
        return self._artifacts.add_remote(sha256, summary, provenance)

    def add_licence_source(self, sha256: str, source: LicenceSource) -> ArtifactRecord:
        """Add (or replace) one licence statement and recompute the effective licence."""
        return self._artifacts.add_licence_source(sha256, source)

    def get_artifact(self, sha_or_prefix: str) -> ArtifactRecord:
        """The artifact whose SHA-256 is, or starts with, `sha_or_prefix` (>= 6 hex digits)."""
        return self._artifacts.get(sha_or_prefix)

    def get_artifacts(self, shas: Iterable[str], *, with_summary: bool = False) -> dict[str, ArtifactRecord]:
        """Many artifacts by full SHA-256 (unknown ones are left out)."""
        return self._artifacts.get_many(shas, with_summary=with_summary)

    def artifacts(self, *, with_summary: bool = True) -> list[ArtifactRecord]:
        """Every artifact, oldest first; `with_summary=False` is the fast list view."""
        return self._artifacts.all(with_summary=with_summary)

    def known_sha256(self, path: str | Path) -> str | None:
        """The SHA-256 of a file if the stat cache vouches for it (no hashing, no write)."""
        return self._artifacts.known_sha256(path)

    def registered_at(self, path: str) -> dict[str, str]:
        """Registered path -> SHA-256 at this path (a relative one: every registered path ending with it)."""
        return self._artifacts.registered_at(path)

    def verify_artifact(self, rec: ArtifactRecord, *, rehash: bool = False) -> tuple[bool, str | None]:
        """Do all registered paths still hold these bytes? Stat-cache hits cost no hashing."""
        return self._integrity.verify([rec], rehash=rehash)[rec.sha256]

    def verify_artifacts(self, recs: Iterable[Pinned], *, rehash: bool = False) -> dict[str, tuple[bool, str | None]]:
        """`verify_artifact` for many artifacts: one query, one write of refreshed stats."""
        return self._integrity.verify(recs, rehash=rehash)

    def snapshot(self, path: str | Path, *, twins: Mapping[str, TwinArray] | None = None) -> Snapshot:
        """The file opened once, parsed and hashed from that descriptor (the stat cache may vouch
        for the hash of exactly this stat): what a verdict about these bytes needs. `twins`: the
        pair's other file's arrays, compared while the arrays are read."""
        return self._artifacts.snapshot(path, twins=twins)

    def registered_unchanged(self, path: str | Path) -> str | None:
        """The SHA-256 when this very path is registered and unchanged since (stat cache)."""
        return self._artifacts.registered_unchanged(path)

    def locate(self, sha_or_prefix: str) -> Path:
        """A path that holds the artifact's bytes now (verified)."""
        return self._integrity.locate(sha_or_prefix)

    # -- pairs --------------------------------------------------------------------------------

    def record_verdict(self, verdict: PairVerdict) -> int:
        """Store a verdict (history is kept) and return the stable id of its pair."""
        return self._pairs.record_verdict(verdict)

    def pairs(
        self, admitted: bool | None = None, *, with_checks: bool = True, strict: bool = False
    ) -> list[PairRecord]:
        """Every pair with its standing verdict (`strict=True`: its latest strict one)."""
        return self._pairs.pairs(admitted, with_checks=with_checks, strict=strict)

    def admitted_artifacts(self) -> set[str]:
        """The SHA-256 of every file an admitted pair uses (what `audit --all` verifies)."""
        return self._pairs.admitted_artifacts()

    def admitted_pairs(self, *, strict: bool = False) -> list[PairRecord]:
        """Pairs whose standing verdict admits them (what the benchmark runner may use)."""
        return self._pairs.admitted_pairs(strict=strict)

    def get_pair(self, pair_id: int) -> PairRecord:
        """One pair by id, with the checks of its standing verdict."""
        return self._pairs.get_pair(pair_id)

    def pair_history(self, pair_id: int) -> list[PairVerdict]:
        """Every verdict recorded for a pair, oldest first."""
        return self._pairs.pair_history(pair_id)

    # -- machine probes -----------------------------------------------------------------------

    def machine_probes(
        self, shas: Iterable[str], hardware: str, runtime: str, flags: Iterable[str]
    ) -> dict[str, MachineProbe]:
        """The probes of these files on one machine (hardware class, runtime, speed flags), by SHA-256."""
        return self._probes.get(shas, hardware, runtime, flags)

    def record_machine_probe(self, probe: MachineProbe) -> bool:
        """Keep a probe under its key; False when this registry cannot be written (it is then not kept)."""
        return self._probes.put(probe)

    def pair_probe(
        self, target: str, draft: str, method: str, draft_length: int, hardware: str, runtime: str, flags: Iterable[str]
    ) -> PairProbe | None:
        """The pair probe of these files, method and draft length on one machine (None: never probed)."""
        return self._probes.get_pair(target, draft, method, draft_length, hardware, runtime, flags)

    def record_pair_probe(self, probe: PairProbe) -> bool:
        """Keep a pair probe under its key; False when this registry cannot be written."""
        return self._probes.put_pair(probe)
