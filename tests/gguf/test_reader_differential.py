"""Differential test: our reader and `gguf.GGUFReader` agree on every key, value and tensor.

GGUFReader is the slow, trusted reference (about 1 s for a 32k-token vocab, 7-20 s for the
150k-260k ones), so the default suite compares the fixtures; the real vocab files run with
`-m slow`, the two smallest (SPM and BPE with merges) first. Array fingerprints are also
checked against the payload bytes located by GGUFReader's own field offsets.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path

import gguf
import pytest
from malformed import make_corpus

from specreg.gguf.reader import GGUFArray, GGUFFile, open_gguf
from specreg.gguf.summary import summarize
from specreg.testing import ModelSpec, write_model

_FIXTURES: dict[str, ModelSpec] = {
    "spm": ModelSpec(chat_template="{% for m in messages %}{{ m }}{% endfor %}", base_model="Org/Base"),
    "bpe": ModelSpec(vocab_type="gpt2", pre="qwen2", extra_tokens=3, pad_tokens=2),
    "f16-mtp": ModelSpec(file_type="f16", nextn_predict_layers=1),
    "eagle3": ModelSpec(
        architecture="eagle3", eagle3_target_layers=(0, 1, 2), eagle3_target_hidden_size=64, d2t=(0, 3, 9)
    ),
    "dflash": ModelSpec(
        architecture="dflash",
        dflash_block_size=8,
        dflash_target_layers=(1,),
        dflash_target_hidden_size=64,
        extra_kv=(("x.float", 0.25), ("x.flag", True)),
    ),
    "vocab-only": ModelSpec(vocab_only=True),
}
CI_VOCABS = ["llama-spm", "deepseek-coder"]  # SPM and BPE (with merges), the cheapest of each
SLOW_VOCABS = [
    "phi-3",
    "bert-bge",
    "baichuan",
    "gpt-2",
    "gpt-neox",
    "mpt",
    "refact",
    "starcoder",
    "falcon",
    "deepseek-llm",
    "aquila",
    "qwen2",
    "qwen35",
    "nomic-bert-moe",
    "llama-bpe",
    "command-r",
    "gemma-4",
]


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def assert_agrees(path: Path) -> GGUFFile:
    """Compare every key (value type, element type, value) and every tensor info."""
    ours = open_gguf(path)
    ref = gguf.GGUFReader(path)
    ref_keys = [k for k in ref.fields if not k.startswith("GGUF.")]
    assert list(ours.metadata) == ref_keys
    assert ours.version == ref.fields["GGUF.version"].contents()
    for key in ref_keys:
        field = ref.fields[key]
        value = ours.metadata[key]
        assert ours.value_types[key] == int(field.types[0]), key
        if isinstance(value, GGUFArray):
            assert value.item_type == int(field.types[-1]), key
            decoded = value.to_list()
            expected = field.contents()
            assert len(decoded) == len(expected) == value.count, key
            assert all(_same(a, b) for a, b in zip(decoded, expected, strict=True)), key
            # the fingerprint covers exactly the elements: the field minus key, type, subtype and count
            header = 8 + len(key.encode()) + 4 + 4 + 8
            end = field.offset + sum(int(p.nbytes) for p in field.parts)
            payload = bytes(ref.data[field.offset + header : end])
            assert value.sha256() == hashlib.sha256(payload).hexdigest(), key
        else:
            assert _same(value, field.contents()), key
    assert len(ours.tensors) == len(ref.tensors)
    for mine, theirs in zip(ours.tensors, ref.tensors, strict=True):
        assert mine.name == theirs.name
        assert mine.shape == [int(d) for d in theirs.shape]
        assert mine.ggml_type == int(theirs.tensor_type) and mine.type_name == theirs.tensor_type.name
        assert ours.data_offset + mine.offset == theirs.data_offset
        assert mine.n_bytes == theirs.n_bytes and ours.n_elements[mine.name] == theirs.n_elements
    if ours.tensors:
        assert ours.data_offset == ref.data_offset and ours.alignment == ref.alignment
    return ours


@pytest.mark.parametrize("name", sorted(_FIXTURES))
def test_agrees_with_gguf_reader_on_fixtures(tmp_path: Path, name: str) -> None:
    f = assert_agrees(write_model(tmp_path / f"{name}.gguf", _FIXTURES[name]))
    summarize(f)


def test_agrees_on_the_malformed_corpus_base_file(tmp_path: Path) -> None:
    p = tmp_path / "base.gguf"
    p.write_bytes(make_corpus.encode(make_corpus.base()))
    assert_agrees(p)


@pytest.mark.slow  # the fixtures above run the same lines of the reader
@pytest.mark.realvocab
@pytest.mark.parametrize("name", CI_VOCABS)
def test_agrees_on_small_real_vocab_files(real_vocab: Callable[[str], Path], name: str) -> None:
    f = assert_agrees(real_vocab(name))
    assert summarize(f).tokenizer.n_tokens == len(f.token_texts()) >= 32000


@pytest.mark.slow
@pytest.mark.realvocab
@pytest.mark.parametrize("name", SLOW_VOCABS)
def test_agrees_on_every_real_vocab_file(real_vocab: Callable[[str], Path], name: str) -> None:
    f = assert_agrees(real_vocab(name))
    f.merges()
