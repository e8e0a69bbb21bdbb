"""Memory fits: a serving configuration of a pair judged against a budget, beside its verdicts.

Owns the table `memory_fits` (migration m023). `check pair --budget` records one per judgement;
`deploy` reads the latest for the configuration it prints and pins the caps it names. A fit is
never a verdict: it does not change whether a pair is admitted, so `bench admitted` and the
audit's verdict gate never read it.
"""

from __future__ import annotations

from specreg.registry.db import Database, now_iso
from specreg.schemas.memory import MemoryFit
from specreg.schemas.record import from_json, stamp, to_json


class MemoryFits:
    """The registry's memory fits, by the pair's files, method and configuration."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(self, fit: MemoryFit) -> MemoryFit:
        """Keep a judgement (every one is kept; the latest stands) and return it with its time."""
        when = now_iso()
        fit.created_at = stamp(when)
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO memory_fits (target_sha256, draft_sha256, method, config, fits, budget_bytes, "
                "cache_ram_mib, ctx_checkpoints, fit_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    fit.target_sha256,
                    fit.draft_sha256,
                    fit.method,
                    fit.config,
                    int(fit.fits),
                    fit.budget_bytes,
                    fit.cache_ram_mib,
                    fit.ctx_checkpoints,
                    to_json(fit),
                    when,
                ),
            )
        return fit

    def latest(self, target_sha256: str, draft_sha256: str | None, method: str, config: str) -> MemoryFit | None:
        """The latest fit recorded for this configuration of the pair; None when none was, or when
        the stored record cannot be read (a fit is advice: a damaged one is not applied)."""
        row = self.db.one(
            "SELECT fit_json, created_at FROM memory_fits WHERE target_sha256 = ? "
            "AND ifnull(draft_sha256, '') = ? AND method = ? AND config = ? ORDER BY id DESC LIMIT 1",
            (target_sha256, draft_sha256 or "", method, config),
        )
        if row is None:
            return None
        try:
            fit = from_json(MemoryFit, row["fit_json"])
        except ValueError:
            return None
        fit.created_at = stamp(row["created_at"])
        return fit
