"""llama.cpp's own tokenizer files: specreg's draft-simple verdicts are llama.cpp's (PROTOCOL §8).

Measured on the real server: draft-simple drafts for same-vocab pairs and for llama-spm/phi-3,
qwen2/qwen35 and mpt/gpt-neox; every other cross pair is refused as incompatible.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from _pair_helpers import RULES, codes, errors, one

from specreg.gguf.reader import GGUFFile, open_gguf
from specreg.testing import realvocab
from specreg.validators.pair import check_pair

ADMITTED_CROSS = {frozenset(p) for p in (("llama-spm", "phi-3"), ("qwen2", "qwen35"), ("mpt", "gpt-neox"))}


@cache
def _open(path: Path) -> GGUFFile:
    return open_gguf(path)


CASES = [
    ("qwen2", "qwen35", set(), {"vocab.pre"}),
    ("llama-spm", "phi-3", set(), {"vocab.padding"}),
    ("mpt", "gpt-neox", set(), {"vocab.pre"}),
    ("llama-bpe", "qwen2", {"vocab.bos", "vocab.n_tokens", "vocab.tokens"}, set()),
    ("gpt-2", "starcoder", {"vocab.n_tokens", "vocab.tokens"}, set()),
    ("llama-spm", "llama-bpe", {"vocab.type", "vocab.bos", "vocab.n_tokens", "vocab.tokens"}, set()),
    ("qwen2", "qwen2", set(), set()),
]


@pytest.mark.realvocab
@pytest.mark.parametrize("target,draft,want_errors,want_warn", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_real_pairs(
    real_vocab: Callable[[str], Path], target: str, draft: str, want_errors: set[str], want_warn: set[str]
) -> None:
    checks = check_pair(_open(real_vocab(target)), _open(real_vocab(draft)), "draft-simple", rule_set=RULES)
    assert errors(checks) == want_errors
    assert want_warn <= codes(checks, "warn")


@pytest.mark.realvocab
def test_phi3_extras_are_named(real_vocab: Callable[[str], Path]) -> None:
    """phi-3 = llama-spm + 64 tokens: llama.cpp admits it (within 128); 11 extras are chat tokens, the rest [PAD...]."""
    checks = check_pair(_open(real_vocab("llama-spm")), _open(real_vocab("phi-3")), "draft-simple", rule_set=RULES)
    pad = one(checks, "vocab.padding")
    assert pad.severity == "warn" and pad.evidence["extra"] == 64 and pad.evidence["larger"] == "draft"
    assert [r["text"] for r in pad.evidence["real"]][:2] == ["<|endoftext|>", "<|assistant|>"]
    assert "11 of the 64" in pad.message
    assert one(checks, "vocab.extra_ids").severity == "warn"


@pytest.mark.realvocab
@pytest.mark.slow
def test_every_cross_pair_matches_the_runtime(real_vocab: Callable[[str], Path]) -> None:
    names = sorted(realvocab.vocab_files())
    if not names:
        real_vocab("qwen2")  # skips with the reason
    admitted = set()
    for a, b in itertools.combinations(names, 2):
        checks = check_pair(_open(real_vocab(a)), _open(real_vocab(b)), "draft-simple", rule_set=RULES)
        if not errors(checks):
            admitted.add(frozenset((a, b)))
    assert admitted == ADMITTED_CROSS
