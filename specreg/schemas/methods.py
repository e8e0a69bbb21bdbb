"""The speculative-decoding methods of llama.cpp, declared once.

A plain enum module (no pydantic): the CLI offers these as `--method` choices at start-up,
so importing it must cost nothing. Every other list of methods derives from `Method`.
"""

from __future__ import annotations

from enum import StrEnum


class Method(StrEnum):
    """One `--spec-type` of llama.cpp; the value is the name users type and records store."""

    # in llama.cpp's order (common/arg.cpp's --spec-type list): SPEC_TYPES and the help follow it
    DRAFT_SIMPLE = "draft-simple"
    DRAFT_EAGLE3 = "draft-eagle3"
    DRAFT_MTP = "draft-mtp"
    DRAFT_DFLASH = "draft-dflash"
    DRAFT_DSPARK = "draft-dspark"
    NGRAM_SIMPLE = "ngram-simple"
    NGRAM_MAP_K = "ngram-map-k"
    NGRAM_MAP_K4V = "ngram-map-k4v"
    NGRAM_MOD = "ngram-mod"
    NGRAM_CACHE = "ngram-cache"


DRAFT_METHODS: frozenset[Method] = frozenset(
    {Method.DRAFT_SIMPLE, Method.DRAFT_EAGLE3, Method.DRAFT_DFLASH, Method.DRAFT_DSPARK}
)
SELF_METHODS: frozenset[Method] = frozenset(Method) - DRAFT_METHODS
# Methods whose drafts come from a model (a draft GGUF or the target's MTP heads): they draft on
# every step and their drafting has a cost of its own; n-gram methods draft only when text repeats.
MODEL_DRAFTED: frozenset[Method] = DRAFT_METHODS | {Method.DRAFT_MTP}
# `--spec-type none`: no speculation; every speed-up and equivalence is measured against it
BASELINE = "none"
# the self-drafting methods `bench` runs beside a pair's own method unless told otherwise
DEFAULT_NGRAM_METHODS: tuple[Method, ...] = (Method.NGRAM_SIMPLE, Method.NGRAM_MOD)
# every `--spec-type` value the server takes, the baseline first
SPEC_TYPES: tuple[str, ...] = (BASELINE, *(m.value for m in Method))
AUTO = "auto"  # `--method auto`: not a method; the validators pick one from the draft
