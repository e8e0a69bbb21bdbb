"""Rule sets are versioned data mirroring one llama.cpp build; effective tokenizer values follow them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from _pair_helpers import BASE, errors, run_pair

from specreg.errors import UsageError
from specreg.schemas.gguf import GGUFSummary, TokenizerSummary
from specreg.validators import ruleset
from specreg.validators.effective import effective_vocab
from specreg.validators.ruleset import RULE_SET_DEFAULT, is_stale, known_rule_sets, load_rule_set

RULES = load_rule_set()


def test_default_rule_set_names_its_build() -> None:
    assert RULE_SET_DEFAULT in known_rule_sets()
    assert RULES.id == f"{RULE_SET_DEFAULT}/r{RULES.revision}"
    assert RULES.draft_simple.max_size_difference == 128
    assert RULES.draft_simple.check_start_token_id == 5


def test_each_shipped_rule_set_is_named_for_its_build() -> None:
    """rule_set_names() reads the build from the file name; the file's own field must agree."""
    names = ruleset.rule_set_names()
    assert sorted(names.values()) == known_rule_sets()
    for build, name in names.items():
        assert load_rule_set(name).build == build, name


def test_unknown_runtime_lists_known_ones() -> None:
    with pytest.raises(UsageError, match=f"unknown runtime 'llama.cpp-b1'.*{RULE_SET_DEFAULT}"):
        load_rule_set("llama.cpp-b1")


def test_stale_means_not_the_current_revision_of_its_runtime() -> None:
    assert not is_stale(RULES.id)
    assert is_stale(f"{RULE_SET_DEFAULT}/r0")
    assert is_stale("llama.cpp-b1/r1")


def test_other_thresholds_are_a_data_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = json.loads((ruleset.RULES_DIR / f"{RULE_SET_DEFAULT}.json").read_text())
    data.update(name="llama.cpp-b99999", build=99999)
    data["draft_simple"]["max_size_difference"] = 256
    (tmp_path / "llama.cpp-b99999.json").write_text(json.dumps(data))
    monkeypatch.setattr(ruleset, "RULES_DIR", tmp_path)
    load_rule_set.cache_clear()
    try:
        wide = load_rule_set("llama.cpp-b99999")
        from specreg.gguf.reader import open_gguf
        from specreg.testing import write_model
        from specreg.validators.pair import check_pair

        t = open_gguf(write_model(tmp_path / "t.gguf", BASE))
        d = open_gguf(write_model(tmp_path / "d.gguf", BASE.but(pad_tokens=200)))
        assert "vocab.n_tokens" not in errors(check_pair(t, d, "draft-simple", rule_set=wide))
    finally:
        load_rule_set.cache_clear()
    assert "vocab.n_tokens" in errors(run_pair(tmp_path, BASE, BASE.but(pad_tokens=200), "draft-simple"))


def test_invalid_rule_file_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken.json").write_text('{"name": "broken"}')
    monkeypatch.setattr(ruleset, "RULES_DIR", tmp_path)
    load_rule_set.cache_clear()
    try:
        with pytest.raises(UsageError, match=r"rule set .*broken.json is invalid"):
            load_rule_set("broken")
    finally:
        load_rule_set.cache_clear()


def _summary(n_tokens: int = 1000, **tok: object) -> GGUFSummary:
    return GGUFSummary(
        path="x.gguf",
        file_size=1,
        version=3,
        n_tensors=0,
        n_kv=0,
        tokenizer=TokenizerSummary(n_tokens=n_tokens, merges_sha256="m", n_merges=1, **tok),
    )


@pytest.mark.parametrize(
    "tok,want",
    [
        ({"model": "llama"}, {"vocab_type": "SPM", "add_bos": True, "bos": 1, "add_eos": False, "eos": 2}),
        ({"model": "gpt2", "pre": "qwen2"}, {"vocab_type": "BPE", "add_bos": False, "bos": 11, "eos": 11}),
        ({"model": "gpt2", "pre": "llama-bpe"}, {"add_bos": True}),
        ({"model": "gpt2", "pre": "tekken"}, {"add_bos": True}),
        ({"model": "gpt2", "pre": "chatglm-bpe"}, {"bos": None, "eos": 11}),
        ({"model": "gpt2", "pre": "chatglm-bpe", "bos_id": 7}, {"bos": 7}),
        ({"model": "gemma4", "add_bos": False}, {"add_bos": True, "pre": "gemma4"}),
        ({"model": "t5"}, {"vocab_type": "UGM", "add_bos": False, "add_eos": True, "eos": 1}),
        ({"model": "bert"}, {"vocab_type": "WPM", "add_bos": True, "bos": 101, "eos": None}),
        ({"model": "llama", "add_bos": False, "bos_id": 9}, {"add_bos": False, "bos": 9}),
    ],
)
def test_effective_values_follow_llama_cpp_defaults(tok: dict, want: dict) -> None:
    v = effective_vocab(_summary(**tok), RULES)
    assert v.problem is None
    assert {k: getattr(v, k) for k in want} == want


def test_default_ids_outside_the_vocabulary_are_disabled() -> None:
    v = effective_vocab(_summary(n_tokens=8, model="gpt2", pre="gpt-2"), RULES)
    assert (v.bos, v.eos) == (None, None)
    assert any("outside the vocabulary" in n for n in v.notes)


@pytest.mark.parametrize(
    "tok,problem",
    [
        ({"model": "sentencepiece-ish"}, "unknown tokenizer"),
        ({}, "no tokenizer.ggml.model"),
        ({"model": "gpt2", "pre": "brand-new"}, "unknown pre-tokenizer"),
    ],
)
def test_tokenizers_llama_cpp_cannot_load(tok: dict, problem: str) -> None:
    v = effective_vocab(_summary(**tok), RULES)
    assert v.problem and problem in v.problem


def _same(a: Any, b: Any) -> bool:
    """Equal field by field, every nested value of the same type (rule-set parts are compared
    by identity: they are `eq=False`), so a part left a dict by the loader is a difference."""
    if type(a) is not type(b):
        return False
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def test_same_sees_a_part_the_loader_left_a_dict() -> None:
    """The comparison above can fail: a nested part that is a dict with the same values is not
    the same rule set, nor is a changed threshold."""
    assert _same(RULES, RULES)
    as_dict = dataclasses.replace(RULES, draft_simple=dataclasses.asdict(RULES.draft_simple))
    assert not _same(RULES, as_dict)
    lax = dataclasses.replace(RULES, draft_simple=dataclasses.replace(RULES.draft_simple, max_size_difference=129))
    assert not _same(RULES, lax)


@pytest.mark.parametrize("name", known_rule_sets())
def test_the_loader_builds_what_pydantic_validates(name: str) -> None:
    """load_rule_set builds the shipped files without validating them (schemas.record.build):
    each must pass pydantic's validation of the same classes and give the same rule set, the
    pre-tokenizers' stated keys included (a null bos is stated: chatglm-bpe)."""
    from specreg.schemas.record import from_python, to_python

    data = json.loads((ruleset.RULES_DIR / f"{name}.json").read_text())
    validated = from_python(ruleset.RuleSet, data)
    built = load_rule_set(name)
    assert _same(built, validated) and to_python(built) == to_python(validated)
    assert isinstance(built.memory.swa_patterns[next(iter(built.memory.swa_patterns))], tuple)
    for pre, stated in data["bpe_pre_tokenizers"].items():
        assert built.bpe_pre_tokenizers[pre].stated == frozenset(stated), pre
    assert "bos" in built.bpe_pre_tokenizers["chatglm-bpe"].stated
    assert built.bpe_pre_tokenizers["chatglm-bpe"].bos is None


def test_pydantic_refuses_what_a_rule_set_does_not_define() -> None:
    """The classes keep the files honest: an unknown key, a wrong type, each refused by the
    validation the tests above run (and by the loader, for a key it does not know)."""
    from pydantic import ValidationError

    from specreg.schemas.record import adapter

    data = json.loads((ruleset.RULES_DIR / f"{RULE_SET_DEFAULT}.json").read_text())
    for broken in (
        {**data, "extra_key": 1},
        {**data, "draft_simple": {**data["draft_simple"], "max_size_difference": "x"}},
    ):
        with pytest.raises(ValidationError):
            adapter(ruleset.RuleSet).validate_python(broken)
    with pytest.raises(KeyError):
        from specreg.schemas.record import build

        build(ruleset.RuleSet, {**data, "extra_key": 1})
