"""draft-eagle3 / draft-dflash / draft-dspark: drafts trained for one target's hidden states."""

from __future__ import annotations

from pathlib import Path

import pytest
from _pair_helpers import BASE, RULES, codes, errors, one, run_pair

from specreg.gguf.reader import open_gguf
from specreg.testing import write_model
from specreg.validators.pair import detect_method

N_VOCAB = 392  # the factory's default vocabulary (3 specials + 256 bytes + words)
TARGET = BASE.but(n_layer=3)  # llama.cpp n_layer 3: layer ids 0..3 (3 = final hidden state)
EAGLE = BASE.but(
    architecture="eagle3",
    n_layer=1,
    eagle3_target_layers=(0, 1, 2),
    eagle3_target_hidden_size=64,
    base_model="specreg-tiny",
)
MARKOV = (("markov_w1.weight", (N_VOCAB, 8)), ("markov_w2.weight", (N_VOCAB, 8)))
DFLASH = BASE.but(
    architecture="dflash", n_layer=1, dflash_block_size=16, dflash_target_layers=(1, 2), base_model="specreg-tiny"
)

EAGLE_CASES = [
    ("fits", EAGLE, set()),
    ("final hidden state (id == n_layer) accepted", EAGLE.but(eagle3_target_layers=(0, 1, 3)), set()),
    ("layer above n_layer aborts", EAGLE.but(eagle3_target_layers=(0, 1, 4)), {"eagle3.target_layers"}),
    ("negative layer", EAGLE.but(eagle3_target_layers=(-1, 1, 2)), {"eagle3.target_layers"}),
    ("two layers fail to load", EAGLE.but(eagle3_target_layers=(0, 1)), {"eagle3.target_layers"}),
    ("no target_layers", EAGLE.but(eagle3_target_layers=None), {"eagle3.target_layers"}),
    ("hidden size differs", EAGLE.but(eagle3_target_hidden_size=32), {"eagle3.target_hidden_size"}),
    ("hidden size missing", EAGLE.but(eagle3_target_hidden_size=None), {"eagle3.target_hidden_size"}),
    (
        "not an eagle3 draft",
        EAGLE.but(architecture="llama"),
        {"eagle3.architecture", "eagle3.target_layers", "eagle3.target_hidden_size"},
    ),
    ("fewer tokens than the target", EAGLE.but(n_words=100), {"eagle3.n_tokens", "eagle3.tokenizer"}),
    ("other tokenizer", EAGLE.but(token_edits=((300, "\u2581zzz"),)), {"eagle3.tokenizer"}),
    ("d2t full and in range", EAGLE.but(d2t=tuple(range(N_VOCAB))), set()),
    (
        "reduced vocab with d2t",
        EAGLE.but(d2t=tuple(range(0, 200, 2)), extra_tensors=(("output.weight", (100, 64)),)),
        set(),
    ),
    ("reduced vocab without d2t", EAGLE.but(extra_tensors=(("output.weight", (100, 64)),)), {"eagle3.d2t"}),
    ("d2t value == n_tokens aborts", EAGLE.but(d2t=(*range(N_VOCAB - 1), N_VOCAB)), {"eagle3.d2t"}),
    ("d2t negative value", EAGLE.but(d2t=(-1, *range(1, N_VOCAB))), {"eagle3.d2t"}),
    (
        "d2t length != output rows",
        EAGLE.but(d2t=tuple(range(50)), extra_tensors=(("output.weight", (100, 64)),)),
        {"eagle3.d2t"},
    ),
]


@pytest.mark.parametrize("draft,want", [c[1:] for c in EAGLE_CASES], ids=[c[0] for c in EAGLE_CASES])
def test_eagle3_rules(tmp_path: Path, draft, want: set[str]) -> None:
    assert errors(run_pair(tmp_path, TARGET, draft, "draft-eagle3")) == want


def test_eagle3_layer_bound_follows_llama_n_layer_not_block_count(tmp_path: Path) -> None:
    """An MTP target has block_count = n_layer + nextn layers; llama.cpp bounds by n_layer."""
    mtp_target = TARGET.but(nextn_predict_layers=1)  # block_count 4, n_layer 3
    c = one(
        run_pair(tmp_path, mtp_target, EAGLE.but(eagle3_target_layers=(0, 1, 4)), "draft-eagle3"),
        "eagle3.target_layers",
    )
    assert c.severity == "error" and c.evidence["target_n_layer"] == 3


def test_eagle3_d2t_duplicates_warn_and_base_model(tmp_path: Path) -> None:
    checks = run_pair(
        tmp_path, TARGET, EAGLE.but(d2t=(0, 0, *range(2, N_VOCAB)), base_model="another-model"), "draft-eagle3"
    )
    assert errors(checks) == set()
    assert {"eagle3.d2t", "eagle3.base_model"} <= codes(checks, "warn")


DFLASH_CASES = [
    ("fits", DFLASH, set()),
    ("no block_size (llama.cpp silently uses 16)", DFLASH.but(dflash_block_size=None), {"dflash.block_size"}),
    ("layer id == n_layer on a llama target aborts", DFLASH.but(dflash_target_layers=(1, 3)), {"dflash.target_layers"}),
    ("no target_layers", DFLASH.but(dflash_target_layers=None), {"dflash.target_layers"}),
    ("draft width differs from target", DFLASH.but(n_embd=32, n_head=2, n_head_kv=2), {"dflash.target_hidden_size"}),
    ("stated target_hidden_size differs", DFLASH.but(dflash_target_hidden_size=32), {"dflash.target_hidden_size"}),
    (
        "not a dflash draft",
        DFLASH.but(architecture="llama"),
        {"dflash.architecture", "dflash.block_size", "dflash.target_layers"},
    ),
    ("other tokenizer", DFLASH.but(token_edits=((300, "\u2581zzz"),)), {"dflash.tokenizer"}),
    ("d2t out of range", DFLASH.but(d2t=(N_VOCAB + 5, *range(1, N_VOCAB))), {"dflash.d2t"}),
]


@pytest.mark.parametrize("draft,want", [c[1:] for c in DFLASH_CASES], ids=[c[0] for c in DFLASH_CASES])
def test_dflash_rules(tmp_path: Path, draft, want: set[str]) -> None:
    assert errors(run_pair(tmp_path, TARGET, draft, "draft-dflash")) == want


def test_dspark_needs_markov_head_and_dflash_warns_about_one(tmp_path: Path) -> None:
    assert errors(run_pair(tmp_path, TARGET, DFLASH, "draft-dspark")) == {"dspark.markov_head"}
    spark = DFLASH.but(extra_tensors=MARKOV)
    assert errors(run_pair(tmp_path, TARGET, spark, "draft-dspark")) == set()
    checks = run_pair(tmp_path, TARGET, spark, "draft-dflash")
    assert errors(checks) == set() and "dspark.markov_head" in codes(checks, "warn")


def test_final_layer_allowed_for_targets_that_expose_it(tmp_path: Path) -> None:
    """deepseek4 / mimo2 / nemotron_h graphs record layer n_layer's input (rule set data)."""
    assert "mimo2" in RULES.dflash.final_layer_archs
    target = TARGET.but(architecture="mimo2")
    checks = run_pair(tmp_path, target, DFLASH.but(dflash_target_layers=(1, 3)), "draft-dflash")
    assert "dflash.target_layers" not in errors(checks)


@pytest.mark.parametrize(
    "spec,method",
    [
        (EAGLE, "draft-eagle3"),
        (DFLASH, "draft-dflash"),
        (DFLASH.but(extra_tensors=MARKOV), "draft-dspark"),
        (BASE, "draft-simple"),
    ],
)
def test_auto_method_from_draft(tmp_path: Path, spec, method: str) -> None:
    assert detect_method(open_gguf(write_model(tmp_path / "d.gguf", spec)), RULES) == method
