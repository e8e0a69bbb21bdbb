"""Self-speculation: draft-mtp needs the model's own next-n heads; n-gram methods need a servable target."""

from __future__ import annotations

from pathlib import Path

import pytest
from _pair_helpers import BASE, RULES, errors, one, run_pair

from specreg.errors import UsageError
from specreg.schemas.methods import SELF_METHODS
from specreg.validators.ruleset import load_rule_set

MTP = BASE.but(architecture="qwen35", nextn_predict_layers=1)  # blocks 0..1 trunk, block 2 = MTP head

MTP_CASES = [
    ("heads present", MTP, set()),
    ("architecture without an MTP graph", MTP.but(architecture="llama"), {"mtp.architecture"}),
    ("no nextn_predict_layers", BASE.but(architecture="qwen35"), {"mtp.nextn_layers"}),
    ("a required head tensor missing", MTP.but(drop_tensors=("blk.2.nextn.eh_proj.weight",)), {"mtp.tensors"}),
    ("vocab-only", MTP.but(vocab_only=True), {"target.tensors", "mtp.tensors"}),
]


@pytest.mark.parametrize("target,want", [c[1:] for c in MTP_CASES], ids=[c[0] for c in MTP_CASES])
def test_mtp_rules(tmp_path: Path, target, want: set[str]) -> None:
    assert errors(run_pair(tmp_path, target, None, "draft-mtp")) == want


def test_missing_mtp_tensor_is_named(tmp_path: Path) -> None:
    c = one(run_pair(tmp_path, MTP.but(drop_tensors=("blk.2.nextn.hnorm.weight",)), None, "draft-mtp"), "mtp.tensors")
    assert c.evidence["missing"] == ["blk.2.nextn.hnorm.weight"]


def test_mtp_architectures_come_from_the_rule_set() -> None:
    assert {"qwen35", "qwen35moe", "qwen3next", "deepseek2", "glm4moe"} <= set(RULES.mtp.architectures)
    assert "llama" not in RULES.mtp.architectures
    # glm5-next got its MTP graph between b11434 and the bundled build (b11549)
    assert "glm5-next" not in load_rule_set("llama.cpp-b11434").mtp.architectures
    assert "glm5-next" in load_rule_set("llama.cpp-b11549").mtp.architectures


@pytest.mark.parametrize("method", sorted(SELF_METHODS - {"draft-mtp"}))
def test_ngram_methods_need_a_servable_target(tmp_path: Path, method: str) -> None:
    assert errors(run_pair(tmp_path, BASE, None, method)) == set()
    assert errors(run_pair(tmp_path, BASE.but(vocab_only=True), None, method)) == {"target.tensors"}


def test_ngram_with_unknown_tokenizer_is_rejected(tmp_path: Path) -> None:
    bad = BASE.but(vocab_type="gpt2", pre="not-a-pre-tokenizer")
    assert errors(run_pair(tmp_path, bad, None, "ngram-simple")) == {"target.tokenizer"}


def test_draft_refused_for_self_methods_and_required_for_draft_methods(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="target alone"):
        run_pair(tmp_path, BASE, BASE, "ngram-mod")
    with pytest.raises(UsageError, match="needs a DRAFT"):
        run_pair(tmp_path, BASE, None, "draft-simple")
