"""Can an admitted pair be benchmarked? A vocab-only file (no tensors) can be checked, not served.

Read from the pair's recorded checks, so `bench admitted` can list such pairs before any server
starts, `pairs --admitted` can mark them and the audit can name the reason instead of failing
every gate that needs a run.
"""

from __future__ import annotations

from specreg.schemas.registry import PairRecord

# the validators' codes for "this side has no tensors" (a warning for draft methods)
VOCAB_ONLY_CODES = ("file.vocab_only", "target.tensors")
NOT_BENCHMARKABLE = "admitted, not benchmarkable"


def not_benchmarkable(pair: PairRecord) -> str | None:
    """Why an admitted pair cannot be benchmarked (a side is vocab-only), or None when it can.

    Needs the pair's checks (`Registry.pairs(with_checks=True)` or `get_pair`).
    """
    for c in pair.checks:
        if c.code in VOCAB_ONLY_CODES and c.severity != "pass":
            return c.message
    return None
