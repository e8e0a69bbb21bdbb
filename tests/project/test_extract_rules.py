"""tools/extract_rules.py: every shipped rule set is what its own llama.cpp tree gives, byte for
byte, and a construct the extractor cannot read stops it with the source line, never a silent gap."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from specreg.testing.realvocab import SOURCES
from specreg.validators import ruleset
from tools.extract_rules import main

SHIPPED = {ruleset.load_rule_set(name).build: name for name in ruleset.known_rule_sets()}


def test_every_shipped_rule_set_has_a_source_tree() -> None:
    assert set(SHIPPED) <= set(SOURCES), "a rule set the tests cannot re-extract"
    assert ruleset.RULE_SET_DEFAULT in SHIPPED.values()


@pytest.mark.realvocab
@pytest.mark.parametrize("build", sorted(SHIPPED))
def test_shipped_file_is_exactly_what_its_tree_gives(
    build: int, llama_source_of: Callable[[int], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = ruleset.RULES_DIR / f"{SHIPPED[build]}.json"
    assert main([str(llama_source_of(build)), "--base", str(path)]) == 0
    assert capsys.readouterr().out == path.read_text(encoding="utf-8")


@pytest.mark.realvocab
def test_the_bundled_tree_keeps_facts_the_old_extractor_lost(llama_source_of: Callable[[int], Path]) -> None:
    from tools.extract_rules import extract_rules

    new = extract_rules(llama_source_of(11549))
    # `tokenizer_model == "plamo2" || tokenizer_model == "plamo3"` with a ternary vocab type
    assert new["tokenizer_models"]["plamo2"]["type"] == "PLAMO2"
    assert new["tokenizer_models"]["plamo3"]["type"] == "PLAMO3" and new["vocab_type_ids"]["PLAMO3"] == 8
    # lfm2's loop became 0..n_layer - n_layer_decision (a decision head): both halves need these
    assert new["structure"]["block_tensors"]["lfm2"] == [["ffn_norm.weight"], ["attn_norm.weight"]]
    assert "glm5-next" in new["mtp"]["architectures"]


def _tree(src: Path, dest: Path) -> Path:
    for part in ("src", "common", "include"):
        shutil.copytree(src / part, dest / part)
    return dest


def _edit(path: Path, old: str, new: str) -> int:
    """Replace `old` once; the 1-based line where the replacement starts."""
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return text[: text.index(old)].count("\n") + 1


@pytest.mark.realvocab
def test_an_unreadable_construct_fails_naming_its_line(
    llama_source_of: Callable[[int], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _tree(llama_source_of(11549), tmp_path / "tree")
    vocab = root / "src" / "llama-vocab.cpp"
    line = _edit(
        vocab,
        '} else if (tokenizer_model == "gemma4") {',
        '} else if (tokenizer_model == "brand-new") {\n            type = pick_type();\n'
        '        } else if (tokenizer_model == "gemma4") {',
    )
    _edit(root / "src" / "models" / "llama.cpp", "i < n_layer; ++i", "i < n_layer / 2; ++i")
    bpe = _edit(vocab, 'tokenizer_pre == "qwen2"', 'tokenizer_pre.starts_with("qwen2")')
    assert main([str(root)]) == 1
    got = capsys.readouterr()
    assert got.out == ""  # no rule set with a fact missing
    assert f"src/llama-vocab.cpp:{line}: tokenizer model 'brand-new'" in got.err
    assert f"src/llama-vocab.cpp:{bpe}: tokenizer name matched by 'tokenizer_pre.starts_with('" in got.err
    assert "src/models/llama.cpp:" in got.err and "layer loop 0..n_layer / 2 not understood" in got.err


def test_help_and_a_wrong_tree_are_not_tracebacks(tmp_path: Path) -> None:
    cwd = Path(__file__).resolve().parents[2]
    run = [sys.executable, "-m", "tools.extract_rules"]
    helped = subprocess.run([*run, "--help"], capture_output=True, text=True, cwd=cwd, timeout=60)
    assert helped.returncode == 0 and "llama.cpp source root" in helped.stdout
    wrong = subprocess.run([*run, str(tmp_path)], capture_output=True, text=True, cwd=cwd, timeout=60)
    assert wrong.returncode == 2 and "not a llama.cpp source root" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def test_shipped_descriptions_name_a_tool_that_exists() -> None:
    for name in ruleset.known_rule_sets():
        data = json.loads((ruleset.RULES_DIR / f"{name}.json").read_text(encoding="utf-8"))
        assert "python -m tools.extract_rules" in data["description"]
        assert data["source"], name
