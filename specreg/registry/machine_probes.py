"""Machine probes kept by file SHA-256, hardware class, runtime and speed flags (table
`machine_probes`), and pair probes by both files' SHA-256, method and draft length on the same key
(table `pair_probes`).

The one owner of both tables: `benchmark/run/machine_probe.py` measures a model (and
`pair_probe.py` a pair) and hands the probe here; `drafts`, `check pair --probe`, `bench --tune`
and `runs show` read it back under the key of the machine they run on (or the run was measured
on). A probe is a cache of a measurement: a newer one of the same key replaces the older, and a
registry that cannot be written simply does not remember it. A damaged row reads as a miss and is probed again.
The probe's model (pydantic) is imported by the calls, not by the registry's import.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import TYPE_CHECKING

from specreg.errors import RegistryError
from specreg.registry.db import Database

if TYPE_CHECKING:
    from specreg.schemas.machine_probe import MachineProbe, PairProbe


def flags_key(flags: Iterable[str]) -> str:
    """The flags as the key stores them (a JSON list, in the order the server gets them)."""
    return json.dumps(list(flags))


class MachineProbes:
    """Read and keep machine probes (migration m023)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, shas: Iterable[str], hardware: str, runtime: str, flags: Iterable[str]) -> dict[str, MachineProbe]:
        """The probes of these files under one machine key, by SHA-256 (a file never probed is absent)."""
        from pydantic import ValidationError

        from specreg.schemas.machine_probe import MachineProbe

        wanted = sorted(set(shas))
        if not wanted:
            return {}
        sql = (
            "SELECT sha256, probe_json FROM machine_probes WHERE hardware = ? AND runtime = ? AND flags = ? "
            "AND sha256 IN (SELECT value FROM json_each(?))"
        )
        out: dict[str, MachineProbe] = {}
        try:
            found = self.db.rows(sql, (hardware, runtime, flags_key(flags), json.dumps(wanted)))
        except sqlite3.Error:  # a registry this specreg could not migrate: nothing remembered
            return {}
        for row in found:
            try:
                out[row["sha256"]] = MachineProbe.model_validate_json(row["probe_json"])
            except ValidationError:
                continue  # damaged: a miss, probed again
        return out

    def _keep(self, sql: str, params: tuple[object, ...]) -> bool:
        """One INSERT OR REPLACE; False when the registry cannot be written (a cache not kept)."""
        if self.db.read_only:
            return False
        try:
            with self.db.keeping(wait_s=2.0) as conn:
                conn.execute(sql, params)
        except (RegistryError, sqlite3.Error):
            return False
        return True

    def put(self, probe: MachineProbe) -> bool:
        """Keep a probe (replacing one of the same key); False when the registry cannot be written."""
        return self._keep(
            "INSERT OR REPLACE INTO machine_probes (sha256, hardware, runtime, flags, probe_json, probed_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (probe.sha256, probe.hardware, probe.runtime, flags_key(probe.flags), probe.model_dump_json(),
             probe.probed_at),
        )  # fmt: skip

    def get_pair(
        self, target: str, draft: str, method: str, draft_length: int, hardware: str, runtime: str, flags: Iterable[str]
    ) -> PairProbe | None:
        """The pair probe of these files, method and draft length under one machine key (None: never probed)."""
        from pydantic import ValidationError

        from specreg.schemas.machine_probe import PairProbe

        sql = (
            "SELECT probe_json FROM pair_probes WHERE target_sha256 = ? AND draft_sha256 = ? AND method = ? "
            "AND draft_length = ? AND hardware = ? AND runtime = ? AND flags = ?"
        )
        try:
            found = self.db.rows(sql, (target, draft, method, draft_length, hardware, runtime, flags_key(flags)))
        except sqlite3.Error:
            return None
        for row in found:
            try:
                return PairProbe.model_validate_json(row["probe_json"])
            except ValidationError:
                return None  # damaged: a miss, probed again
        return None

    def put_pair(self, probe: PairProbe) -> bool:
        """Keep a pair probe (replacing one of the same key); False when the registry cannot be written."""
        return self._keep(
            "INSERT OR REPLACE INTO pair_probes (target_sha256, draft_sha256, method, draft_length, hardware, "
            "runtime, flags, probe_json, probed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (probe.target_sha256, probe.draft_sha256, probe.method, probe.draft_length, probe.hardware,
             probe.runtime, flags_key(probe.flags), probe.model_dump_json(), probe.probed_at),
        )  # fmt: skip
