"""draft-simple: one fixture per rule breaks exactly that rule; everything else equal passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from _pair_helpers import BASE, codes, errors, one, run_pair

from specreg.testing.vocab import build_vocab

SPM_TEXTS = tuple(enumerate(build_vocab(BASE).texts))
BPE = BASE.but(vocab_type="gpt2", pre="gpt-2")

# (name, target spec, draft spec, expected error codes, codes expected among warn/info)
CASES = [
    ("identical", BASE, BASE, set(), set()),
    ("token text at id >= 5", BASE, BASE.but(token_edits=((300, "\u2581zzz"),)), {"vocab.tokens"}, set()),
    (
        "token text at id < 5 (llama.cpp skips ids 0-4)",
        BASE,
        BASE.but(token_edits=((3, "<0xZZ>"),)),
        set(),
        {"vocab.tokens_head"},
    ),
    ("add_bos differs", BASE, BASE.but(add_bos=False), {"vocab.bos"}, set()),
    ("bos id differs while added", BASE, BASE.but(bos_id=5), {"vocab.bos"}, set()),
    ("bos id differs, not added", BASE.but(add_bos=False), BASE.but(add_bos=False, bos_id=5), set(), set()),
    ("add_eos differs", BASE, BASE.but(add_eos=True), {"vocab.eos"}, set()),
    ("eos id differs while added", BASE.but(add_eos=True), BASE.but(add_eos=True, eos_id=5), {"vocab.eos"}, set()),
    ("eos id differs, not added", BASE, BASE.but(eos_id=5), set(), {"vocab.eog"}),
    ("eot differs", BASE, BASE.but(eot_id=2), set(), {"vocab.eog"}),
    (
        "draft +128 padding tokens (the limit)",
        BASE,
        BASE.but(pad_tokens=128),
        set(),
        {"vocab.padding", "vocab.extra_ids"},
    ),
    ("draft +129 padding tokens", BASE, BASE.but(pad_tokens=129), {"vocab.n_tokens"}, {"vocab.padding"}),
    ("target +100 padding tokens", BASE.but(pad_tokens=100), BASE, set(), {"vocab.padding", "vocab.extra_ids"}),
    ("target +50 real extra tokens", BASE.but(extra_tokens=50), BASE, set(), {"vocab.padding"}),
    (
        "vocab type differs, same texts",
        BASE,
        BPE.but(token_edits=SPM_TEXTS),
        {"vocab.type"},
        {"vocab.token_types", "vocab.merges", "vocab.pre"},
    ),
    ("SPM add_bos absent = true (effective)", BASE.but(add_bos=None), BASE, set(), set()),
    ("SPM add_bos absent vs false (effective)", BASE.but(add_bos=None), BASE.but(add_bos=False), {"vocab.bos"}, set()),
    (
        "BPE llama-bpe pre implies add_bos",
        BPE.but(pre="llama-bpe", add_bos=None),
        BPE.but(pre="gpt-2", add_bos=None),
        {"vocab.bos"},
        {"vocab.pre"},
    ),
    ("BPE default bos 11 equals explicit 11", BPE.but(bos_id=None), BPE.but(bos_id=11), set(), set()),
    ("BPE default bos 11 vs explicit 12", BPE.but(bos_id=None), BPE.but(bos_id=12), {"vocab.bos"}, set()),
    ("token type differs", BASE, BASE.but(token_type_edits=((300, 4),)), set(), {"vocab.token_types"}),
    ("pre-tokenizer differs", BPE.but(pre="qwen2"), BPE.but(pre="qwen35"), set(), {"vocab.pre"}),
    ("merges differ", BPE, BPE.but(merge_edits=((0, "x y"),)), set(), {"vocab.merges"}),
    (
        "chat template differs",
        BASE.but(chat_template="{{ a }}"),
        BASE.but(chat_template="{{ b }}"),
        set(),
        {"vocab.chat_template"},
    ),
    (
        "empty text == [EMPTY_i] (llama.cpp renames empties)",
        BASE.but(token_edits=((300, "[EMPTY_300]"),)),
        BASE.but(token_edits=((300, ""),)),
        set(),
        set(),
    ),
    (
        "texts equal up to a NUL (strcmp)",
        BASE.but(token_edits=((300, "ab\0c"),)),
        BASE.but(token_edits=((300, "ab\0d"),)),
        set(),
        set(),
    ),
    (
        "texts differ before a NUL",
        BASE.but(token_edits=((300, "ab\0c"),)),
        BASE.but(token_edits=((300, "ax\0c"),)),
        {"vocab.tokens"},
        set(),
    ),
    ("draft context shorter", BASE, BASE.but(n_ctx=256), set(), {"draft.context_length"}),
    ("architecture differs", BASE, BASE.but(architecture="qwen2"), set(), {"arch.family"}),
    ("vocab-only draft", BASE, BASE.but(vocab_only=True), set(), {"file.vocab_only"}),
]


@pytest.mark.parametrize("target,draft,want_errors,want_notes", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_one_rule_each(tmp_path: Path, target, draft, want_errors: set[str], want_notes: set[str]) -> None:
    checks = run_pair(tmp_path, target, draft, "draft-simple")
    assert errors(checks) == want_errors
    assert want_notes <= codes(checks, "warn", "info")


def test_token_mismatch_evidence_names_ids_texts_and_count(tmp_path: Path) -> None:
    draft = BASE.but(token_edits=((300, "\u2581zzz"), (301, "\u2581yyy"), (2, "</x>")))
    c = one(run_pair(tmp_path, BASE, draft, "draft-simple"), "vocab.tokens")
    assert c.severity == "error"
    assert c.evidence["n_differ"] == 2  # id 2 is below llama.cpp's start id 5
    first = c.evidence["first"]
    assert [f["id"] for f in first] == [300, 301]
    assert first[0]["draft"] == "\u2581zzz" and first[0]["target"] != "\u2581zzz"


def test_padding_is_named_padding_and_real_extras_are_not(tmp_path: Path) -> None:
    pad = one(run_pair(tmp_path, BASE.but(pad_tokens=100), BASE, "draft-simple"), "vocab.padding")
    assert pad.severity == "info" and pad.evidence["extra"] == 100
    real = one(run_pair(tmp_path, BASE.but(extra_tokens=3, pad_tokens=10), BASE, "draft-simple"), "vocab.padding")
    assert real.severity == "warn" and [r["text"] for r in real.evidence["real"]] == [
        "<extra_0>",
        "<extra_1>",
        "<extra_2>",
    ]


def test_strict_turns_warnings_into_errors(tmp_path: Path) -> None:
    t, d = BASE.but(chat_template="{{ a }}"), BASE.but(chat_template="{{ b }}")
    assert "vocab.chat_template" not in errors(run_pair(tmp_path, t, d, "draft-simple"))
    assert "vocab.chat_template" in errors(run_pair(tmp_path, t, d, "draft-simple", strict=True))


def test_draft_size(tmp_path: Path) -> None:
    small = BASE.but(n_embd=16, n_ff=32, n_head=2, n_head_kv=2, seed=3)
    assert one(run_pair(tmp_path, BASE, small, "draft-simple"), "draft.size").severity == "pass"
    same = one(run_pair(tmp_path, BASE, BASE, "draft-simple"), "draft.size")
    assert same.severity == "warn" and "no speed-up" in same.message
    half = one(run_pair(tmp_path, BASE, BASE.but(n_layer=1), "draft-simple"), "draft.size")
    assert half.severity == "warn" and half.evidence["ratio"] >= 0.5


def test_huge_token_text_is_clipped_in_message_and_evidence(tmp_path: Path) -> None:
    c = one(run_pair(tmp_path, BASE, BASE.but(token_edits=((300, "x" * 100_000),)), "draft-simple"), "vocab.tokens")
    assert c.severity == "error" and len(c.message) <= 600
    assert len(c.evidence["first"][0]["draft"]) < 300 and "+99800 chars" in c.evidence["first"][0]["draft"]


def test_pre_tokenizer_pass_message_reads_as_text(tmp_path: Path) -> None:
    """An absent tokenizer.ggml.pre is said in words, not printed as Python's `None`."""
    spm = one(run_pair(tmp_path, BASE, BASE, "draft-simple"), "vocab.pre")
    assert spm.severity == "pass" and "None" not in spm.message and "neither sets" in spm.message
    bpe = one(run_pair(tmp_path, BPE, BPE, "draft-simple"), "vocab.pre")
    assert bpe.message == "same pre-tokenizer 'gpt-2'"
