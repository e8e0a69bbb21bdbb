"""`draft.size` compares the weight bytes a decode step reads, not parameter counts (issue 11, 13)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _pair_helpers import BASE, RULES, one, run_pair

from specreg.gguf.reader import GGUFArray, GGUFFile, open_gguf
from specreg.testing import write_model
from specreg.testing.derive import derive
from specreg.validators.checks_common import decode_bytes
from specreg.validators.pair import check_pair

SMALL = BASE.but(n_embd=16, n_ff=32, n_head=2, n_head_kv=2, seed=3)


def test_a_lower_precision_draft_of_the_same_model_is_named_and_measured_in_bytes(tmp_path: Path) -> None:
    target = write_model(tmp_path / "t.gguf", BASE)
    derive(target, tmp_path / "q8.gguf", "q8_0")
    checks = check_pair(open_gguf(target), open_gguf(tmp_path / "q8.gguf"), "draft-simple", rule_set=RULES)
    c = one(checks, "draft.size")
    # same parameter count: the old check said "no speed-up possible" here
    assert c.evidence["target_parameters"] == c.evidence["draft_parameters"]
    assert c.severity == "pass", c.message
    assert "a Q8_0 draft of the same model as the F32 target" in c.message
    assert c.evidence["same_model_shape"] is True and 0.2 < c.evidence["ratio"] < 0.35
    f16 = one(run_pair(tmp_path, BASE, BASE.but(file_type="f16"), "draft-simple"), "draft.size")
    assert "F16 draft of the same model" in f16.message and 0.5 <= f16.evidence["ratio"] < 0.6
    assert f16.severity == "warn" and "unless almost every token is accepted" in f16.message


def test_a_different_smaller_model_is_a_plain_draft(tmp_path: Path) -> None:
    c = one(run_pair(tmp_path, BASE, SMALL, "draft-simple"), "draft.size")
    assert c.severity == "pass" and c.message.startswith("draft reads") and c.evidence["same_model_shape"] is False


def test_a_draft_much_larger_than_the_target_asks_whether_they_were_swapped(tmp_path: Path) -> None:
    c = one(run_pair(tmp_path, SMALL, BASE, "draft-simple"), "draft.size")
    assert c.severity == "warn" and "did you swap target and draft?" in c.message and c.evidence["ratio"] > 2
    same_size = one(run_pair(tmp_path, BASE, BASE.but(seed=9), "draft-simple"), "draft.size")
    assert "no speed-up possible" in same_size.message and "swap" not in same_size.message


def test_a_byte_identical_draft_gets_an_info_line(tmp_path: Path) -> None:
    path = write_model(tmp_path / "t.gguf", BASE)
    twice = check_pair(open_gguf(path), open_gguf(path), "draft-simple", rule_set=RULES)
    info = one(twice, "draft.identical")
    assert info.severity == "info" and "byte-identical" in info.message and "the same file" in info.message
    copy = write_model(tmp_path / "copy.gguf", BASE)
    t, d = open_gguf(path), open_gguf(copy)
    assert not [c for c in check_pair(t, d, "draft-simple", rule_set=RULES) if c.code == "draft.identical"]
    t.sha256 = d.sha256 = "ab" * 32  # what the registry knows after hashing both
    known = one(check_pair(t, d, "draft-simple", rule_set=RULES), "draft.identical")
    assert "same SHA-256 abababababab" in known.message
    d.sha256 = "cd" * 32
    assert not [c for c in check_pair(t, d, "draft-simple", rule_set=RULES) if c.code == "draft.identical"]


def test_decode_bytes_counts_a_lookup_embedding_as_one_row_unless_it_is_tied(tmp_path: Path) -> None:
    untied = open_gguf(write_model(tmp_path / "u.gguf", BASE))
    tied = open_gguf(write_model(tmp_path / "t.gguf", BASE.but(drop_tensors=("output.weight",))))
    emb = untied.tensor("token_embd.weight")
    out = untied.tensor("output.weight")
    assert emb is not None and out is not None
    everything = sum(t.n_bytes for t in untied.tensors)
    assert decode_bytes(untied.tensors) == everything - emb.n_bytes + emb.n_bytes // emb.shape[1]
    assert decode_bytes(tied.tensors) == everything - out.n_bytes  # the embedding is the output matrix


@pytest.mark.parametrize("variant", ["f32", "f16", "q8_0"])
def test_derived_file_keeps_every_key_but_the_file_type(tmp_path: Path, variant: str) -> None:
    src = write_model(tmp_path / "t.gguf", BASE)
    derive(src, tmp_path / "d.gguf", variant)
    a, b = open_gguf(src), open_gguf(tmp_path / "d.gguf")
    assert list(a.metadata) == list(b.metadata)

    def value(f: GGUFFile, key: str) -> object:
        v = f.metadata[key]
        return v.sha256() if isinstance(v, GGUFArray) else v  # arrays compare by their stored bytes

    changed = [] if variant == "f32" else ["general.file_type"]  # the tiny source is F32 already
    assert [k for k in a.metadata if value(a, k) != value(b, k)] == changed
    assert a.value_types == b.value_types
    assert [(t.name, t.shape) for t in a.tensors] == [(t.name, t.shape) for t in b.tensors]
    assert {t.type_name for t in b.tensors if len(t.shape) == 2} == {variant.upper()}
    assert {t.type_name for t in b.tensors if len(t.shape) == 1} == {"F32"}
