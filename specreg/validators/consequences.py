"""Which failed checks only follow from another: one decisive failure, not a page of its echoes.

A draft of another tokenizer family fails `vocab.type`, and then differs from the target in
every vocabulary comparison after it (token texts, token types, merges, pre-tokenizer, extra
ids, ...). llama.cpp refuses such a draft at the type already (common_speculative_are_compatible
compares the type first), so those checks tell a person nothing more - and one of them
(`vocab.extra_ids`: "the server aborts") is about a draft the server never loads. Views show the
decisive failure and fold its consequences into one line; `--json` and SARIF keep every check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specreg.schemas.checks import CheckResult

# a failing check -> the code prefixes of the checks that only follow from it; listed codes never follow
ROOTS: dict[str, tuple[str, ...]] = {"vocab.type": ("vocab.",)}
NEVER_FOLLOW = frozenset({"vocab.type", "vocab.model", "vocab.chat_template"})  # independent of the family


def follow_ons(checks: Sequence[CheckResult]) -> dict[str, list[CheckResult]]:
    """For each decisive failure (an error whose code is in `ROOTS`), the checks that did not pass
    and only follow from it, in their order; a check follows from the first root it matches."""
    roots = [c.code for c in checks if c.severity == "error" and c.code in ROOTS]
    out: dict[str, list[CheckResult]] = {r: [] for r in roots}
    for c in checks:
        if c.severity == "pass" or c.code in NEVER_FOLLOW or c.code in out:
            continue
        root = next((r for r in roots if c.code.startswith(ROOTS[r])), None)
        if root is not None:
            out[root].append(c)
    return {r: cs for r, cs in out.items() if cs}
