"""Can an admitted pair be benchmarked? A vocab-only file (no tensors) can be checked, not served.

Read from the pair's recorded checks, so `bench admitted` can list such pairs before any server
starts, `pairs --admitted` can mark them and the audit can name the reason instead of failing
every gate that needs a run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specreg.schemas.registry import PairRecord

if TYPE_CHECKING:
    from specreg.schemas.bench import ConditionSpec

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


def drop_covered(
    plans: list[tuple[PairRecord, list[ConditionSpec]]],
) -> tuple[list[tuple[PairRecord, list[ConditionSpec]]], list[tuple[PairRecord, PairRecord]]]:
    """Leave out self-speculation pairs whose every condition another run of the same target has.

    Every run of a target includes the baseline and the n-gram methods, so benchmarking an
    admitted n-gram pair next to a draft pair of that target would measure the same servers twice.
    """
    order = sorted(plans, key=lambda ps: (ps[0].draft_sha256 is None, ps[0].id))
    kept: list[tuple[PairRecord, list[ConditionSpec]]] = []
    covered: list[tuple[PairRecord, PairRecord]] = []
    for pair, specs in order:
        methods = {s.method for s in specs}
        by = next(
            (
                q
                for q, qspecs in kept
                if pair.draft_sha256 is None
                and q.target_sha256 == pair.target_sha256
                and methods <= {s.method for s in qspecs}
            ),
            None,
        )
        if by is None:
            kept.append((pair, specs))
        else:
            covered.append((pair, by))
    return kept, covered
