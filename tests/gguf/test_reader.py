"""The reader on valid files written by gguf's own writer (through specreg.testing)."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict, replace
from pathlib import Path

import gguf
import numpy as np
import pytest

from specreg.errors import GGUFError
from specreg.gguf.reader import GGUFArray, open_gguf
from specreg.gguf.summary import summarize
from specreg.schemas.gguf import GGUFSummary, summary_from_json, summary_to_json
from specreg.testing import ModelSpec, write_model


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    specs = {
        "target": ModelSpec(
            chat_template="{{ messages }}",
            base_model="Org/Base",
            base_model_repo_url="https://x/base",
            repo_url="https://x/target",
            license_name="Apache 2.0",
            license_link="https://x/LICENSE",
        ),
        "same": ModelSpec(seed=7, name="other-weights"),
        "edited": ModelSpec(token_edits=((300, "changed"),)),
        "bpe": ModelSpec(vocab_type="gpt2", pre="qwen2", bos_id=None, unk_id=None),
        "mtp": ModelSpec(nextn_predict_layers=1),
        "eagle3": ModelSpec(
            architecture="eagle3", eagle3_target_layers=(1, 3, 5), eagle3_target_hidden_size=128, d2t=(0, 5, -1, 7)
        ),
        "dflash": ModelSpec(
            architecture="dflash", dflash_block_size=16, dflash_target_layers=(2, 4), dflash_target_hidden_size=64
        ),
        "f16": ModelSpec(file_type="f16"),
        "vocab": ModelSpec(vocab_only=True),
    }
    return {k: write_model(d / f"{k}.gguf", spec) for k, spec in specs.items()}


def test_summary_reads_identity_shape_and_tokenizer(models: dict[str, Path]) -> None:
    s = summarize(models["target"])
    assert (s.architecture, s.name, s.version) == ("llama", "specreg-tiny", 3)
    assert (s.file_type, s.file_type_name) == (0, "ALL_F32")
    assert (s.context_length, s.embedding_length, s.block_count, s.head_count, s.head_count_kv) == (512, 64, 2, 4, 4)
    assert s.sha256 is None and not s.vocab_only and s.n_tensors == len(open_gguf(models["target"]).tensors)
    t = s.tokenizer
    assert (t.model, t.pre, t.bos_id, t.eos_id, t.unk_id, t.pad_id, t.add_bos, t.add_eos, t.add_sep) == (
        "llama",
        None,
        1,
        2,
        0,
        None,
        True,
        False,
        None,
    )
    assert t.n_tokens == len(open_gguf(models["target"]).token_texts()) > 256
    assert t.chat_template_present and t.chat_template_sha256 == hashlib.sha256(b"{{ messages }}").hexdigest()
    assert asdict(s.license) == {"license": "apache-2.0", "name": "Apache 2.0", "link": "https://x/LICENSE"}
    assert s.provenance.base_models == [{"name": "Org/Base", "repo_url": "https://x/base"}]
    assert s.provenance.repo_url == "https://x/target"


def test_parameter_count_is_the_sum_of_tensor_elements(models: dict[str, Path]) -> None:
    f = open_gguf(models["target"])
    expected = sum(int(np.prod(t.shape)) for t in f.tensors)
    assert summarize(f).parameter_count == expected > 0


def test_fingerprints_are_sha256_of_the_raw_payload(models: dict[str, Path]) -> None:
    a, same, edited = (summarize(models[k]).tokenizer for k in ("target", "same", "edited"))
    assert a.tokens_sha256 == same.tokens_sha256 and a.scores_sha256 == same.scores_sha256
    assert a.tokens_sha256 != edited.tokens_sha256
    f = open_gguf(models["target"])
    arr = f.metadata["tokenizer.ggml.tokens"]
    assert isinstance(arr, GGUFArray)
    raw = b"".join(struct.pack("<Q", len(x.encode())) + x.encode() for x in f.token_texts())
    assert bytes(arr.raw()) == raw and a.tokens_sha256 == hashlib.sha256(raw).hexdigest()
    types = struct.pack(f"<{len(f.token_types())}i", *f.token_types())
    assert a.token_types_sha256 == hashlib.sha256(types).hexdigest()


def test_lazy_arrays_decode_on_demand_and_cache(models: dict[str, Path]) -> None:
    f = open_gguf(models["bpe"])
    assert "tokenizer.ggml.tokens" not in f._cache
    texts = f.token_texts()
    assert f.token_texts() is texts and texts[:1] == f.array("tokenizer.ggml.tokens")[:1]
    merges = f.merges()
    assert merges and all(m.count(" ") == 1 for m in merges)
    assert summarize(f).tokenizer.n_merges == len(merges)
    assert (summarize(f).tokenizer.pre, summarize(f).tokenizer.bos_id) == ("qwen2", None)
    with pytest.raises(GGUFError, match="not an array"):
        f.array("general.name")


def test_speculative_metadata(models: dict[str, Path]) -> None:
    mtp = summarize(models["mtp"]).speculative
    assert mtp.nextn_predict_layers == 1 and mtp.nextn_tensors and all(".nextn." in n for n in mtp.nextn_tensors)
    e = summarize(models["eagle3"])
    assert (e.speculative.eagle3_target_layers, e.speculative.eagle3_target_hidden_size) == ([1, 3, 5], 128)
    assert e.speculative.d2t_shape == [4] and e.speculative.dflash_target_layers is None
    d = summarize(models["dflash"]).speculative
    assert (d.dflash_block_size, d.dflash_target_layers, d.dflash_target_hidden_size) == (16, [2, 4], 64)
    assert summarize(models["target"]).speculative.nextn_tensors == []


def test_tensor_values_reads_small_tensors_only(models: dict[str, Path]) -> None:
    e = open_gguf(models["eagle3"])
    assert e.tensor_values("d2t") == [0, 5, -1, 7]
    with pytest.raises(GGUFError, match="more than the 3 allowed"):
        e.tensor_values("d2t", max_elems=3)
    with pytest.raises(GGUFError, match="no such tensor"):
        e.tensor_values("missing")
    f16 = open_gguf(models["f16"])
    w = f16.tensor("blk.0.attn_q.weight")
    assert w is not None and w.type_name == "F16" and w.n_bytes == 64 * 64 * 2
    vals = f16.tensor_values("blk.0.attn_q.weight")
    assert len(vals) == 64 * 64 and all(isinstance(v, float) for v in vals[:5])
    assert open_gguf(models["target"]).tensor_values("output_norm.weight") == [1.0] * 64


def test_tensor_values_notices_a_file_changed_after_open(models: dict[str, Path], tmp_path: Path) -> None:
    p = tmp_path / "m.gguf"
    p.write_bytes(models["eagle3"].read_bytes())
    f = open_gguf(p)
    with open(p, "r+b") as fh:
        fh.truncate(f.file_size - 4)
    with pytest.raises(GGUFError, match="changed size"):
        f.tensor_values("d2t")


def test_vocab_only_and_tensor_infos(models: dict[str, Path]) -> None:
    v = open_gguf(models["vocab"])
    assert v.tensors == [] and summarize(v).vocab_only and summarize(v).parameter_count == 0
    f = open_gguf(models["target"])
    offsets = [t.offset for t in f.tensors]
    assert offsets == sorted(offsets) and offsets[0] == 0 and f.data_offset % f.alignment == 0
    last = f.tensors[-1]
    assert f.data_offset + last.offset + last.n_bytes <= f.file_size


def test_custom_alignment_split_keys_and_per_layer_heads(tmp_path: Path) -> None:
    p = tmp_path / "split-00002-of-00003.gguf"
    w = gguf.GGUFWriter(p, "llama")
    w.add_custom_alignment(64)
    w.add_uint16("split.no", 1)
    w.add_uint16("split.count", 3)
    w.add_array("llama.attention.head_count", [4, 8, 8])
    w.add_uint32("llama.attention.head_count_kv", 2)
    w.add_tensor("a", np.arange(3, dtype=np.float32))
    w.add_tensor("b", np.arange(5, dtype=np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = open_gguf(p)
    assert f.alignment == 64 and f.data_offset % 64 == 0 and f.tensors[1].offset == 64
    assert f.tensor_values("a") == [0.0, 1.0, 2.0] and f.tensor_values("b") == [0, 1, 2, 3, 4]
    s = summarize(f)
    assert (s.split_count, s.split_no, s.head_count, s.head_count_kv) == (3, 1, 8, 2)


def test_gguf_v2_is_read_like_v3(models: dict[str, Path], tmp_path: Path) -> None:
    data = bytearray(models["target"].read_bytes())
    assert data[4:8] == struct.pack("<I", 3)
    data[4:8] = struct.pack("<I", 2)
    p = tmp_path / "v2.gguf"
    p.write_bytes(bytes(data))
    v2, v3 = summarize(p), summarize(models["target"])
    assert v2.version == 2
    assert replace(v2, version=3, path="") == replace(v3, path="")


def test_invalid_utf8_values_are_replaced_but_hashed_raw(tmp_path: Path) -> None:
    w = gguf.GGUFWriter(tmp_path / "u.gguf", "llama")
    w.add_key_value("general.name", b"caf\xe9", gguf.GGUFValueType.STRING)
    w.add_key_value("tokenizer.chat_template", b"\xff{{x}}", gguf.GGUFValueType.STRING)
    w.add_token_list([b"a", b"\x80"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = open_gguf(tmp_path / "u.gguf")
    s = summarize(f)
    assert s.name == "caf\ufffd" and summary_to_json(s)  # display-safe, JSON-safe
    assert s.tokenizer.chat_template_sha256 == hashlib.sha256(b"\xff{{x}}").hexdigest()
    assert [t.encode("utf-8", "surrogateescape") for t in f.token_texts()] == [b"a", b"\x80"]


def test_summary_returns_independent_copies(models: dict[str, Path]) -> None:
    f = open_gguf(models["target"])
    s = summarize(f)
    s.tokenizer.bos_id = 99
    assert summarize(f).tokenizer.bos_id == 1


def test_open_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="no such file") as exc:
        open_gguf(tmp_path / "missing.gguf")
    assert str(tmp_path / "missing.gguf") in str(exc.value)
    with pytest.raises(GGUFError, match=r"is a directory|not a regular file"):
        open_gguf(tmp_path)
    with pytest.raises(GGUFError, match="not a regular file"):
        open_gguf("/dev/null")


def test_summaries_are_built_without_validation_yet_valid(models: dict[str, Path]) -> None:
    """The reader fills plain dataclasses from type-checked values (no pydantic on `inspect`'s
    path): every summary must still pass strict validation unchanged, nested parts included, and
    round-trip through the registry's JSON."""
    from pydantic import TypeAdapter

    adapter = TypeAdapter(GGUFSummary)
    for name, path in models.items():
        s = summarize(open_gguf(path))
        assert adapter.validate_python(asdict(s), strict=False) == s, name
        assert summary_from_json(summary_to_json(s), strict=True) == s, name


def test_a_summary_from_json_is_validated() -> None:
    """`summary_json` read back from a registry or bundle is checked, field by field."""
    s = GGUFSummary(path="m.gguf", file_size=1, version=3, n_tensors=0, n_kv=0)
    data = asdict(s)
    data["tokenizer"]["n_tokens"] = "many"
    with pytest.raises(ValueError, match="n_tokens"):
        summary_from_json(json.dumps(data))
    del data["file_size"]
    with pytest.raises(ValueError, match="file_size"):
        summary_from_json(json.dumps(data))


def test_special_tokens_are_decoded_alone(models: dict[str, Path]) -> None:
    gf = open_gguf(models["target"])
    tokens = gf.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GGUFArray)
    texts = gf.token_texts()
    assert tokens.strings_at([300, 1, 0, len(texts) - 1, len(texts), -1]) == {
        i: texts[i] for i in (0, 1, 300, len(texts) - 1)
    }
