"""structure.*: what makes llama.cpp fail at load, found from the header, and llama.cpp agrees.

Each broken file is also handed to the real bundled llama.cpp server: it must refuse to load it
with its own message naming the same tensor, so the checks cannot drift from the runtime.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _pair_helpers import BASE, RULES, errors, one, run_pair

from specreg.errors import GGUFError, ServerStartError
from specreg.gguf.reader import open_gguf
from specreg.schemas.checks import CheckResult
from specreg.servers.launcher import bundled_command, launch
from specreg.testing import ModelSpec, write_model
from specreg.testing.realvocab import vocab_files
from specreg.validators.checks_structure import check_structure
from specreg.validators.side import Side

N_VOCAB = 392  # tokens in the default tiny vocabulary (pinned by the first test)
EAGLE = BASE.but(architecture="eagle3", n_layer=1, eagle3_target_layers=(0, 1, 2), eagle3_target_hidden_size=64)
MTP = BASE.but(architecture="qwen35", nextn_predict_layers=1)

# (case, spec, code, words the message must hold: the tensor name and both numbers)
BROKEN = [
    (
        "token_embd rows",
        BASE.but(extra_tensors=(("token_embd.weight", (N_VOCAB - 3, 64)),)),
        "structure.token_embd",
        ["'token_embd.weight'", f"{N_VOCAB - 3} rows", f"{N_VOCAB} tokens"],
    ),
    (
        "token_embd columns",
        BASE.but(extra_tensors=(("token_embd.weight", (N_VOCAB, 32)),)),
        "structure.token_embd",
        ["'token_embd.weight'", "32 columns", "embedding_length is 64"],
    ),
    (
        "missing attention tensor",
        BASE.but(drop_tensors=("blk.1.attn_q.weight",)),
        "structure.blocks",
        ["'blk.1.attn_q.weight'", "all 2 blocks", "1 have it"],
    ),
    (
        "missing dense FFN tensor",
        BASE.but(drop_tensors=("blk.1.ffn_up.weight",)),
        "structure.blocks",
        ["'blk.1.ffn_up.weight'", "all 2 blocks", "1 have it"],
    ),
    (
        "tensor beyond block_count",
        BASE.but(extra_tensors=(("blk.2.attn_norm.weight", (64,)),)),
        "structure.blocks",
        ["'blk.2.attn_norm.weight'", "block 2", "block_count is 2"],
    ),
    (
        "output columns",
        BASE.but(extra_tensors=(("output.weight", (N_VOCAB, 32)),)),
        "structure.output",
        ["'output.weight'", "32 columns", "embedding_length is 64"],
    ),
    (
        "output rows",
        BASE.but(extra_tensors=(("output.weight", (N_VOCAB + 1, 64)),)),
        "structure.output",
        ["'output.weight'", f"{N_VOCAB + 1} rows", f"{N_VOCAB} vocabulary tokens"],
    ),
]
# what llama.cpp (b11434, via xllamacpp) logs for each case
LLAMA_SAYS = {
    "token_embd rows": r"tensor 'token_embd\.weight' has wrong shape",
    "token_embd columns": r"tensor 'token_embd\.weight' has wrong shape",
    "missing attention tensor": r"tensor 'blk\.1\.attn_q\.weight' not found",
    "missing dense FFN tensor": r"tensor 'blk\.1\.ffn_up\.weight' not found",
    "tensor beyond block_count": r"wrong number of tensors; expected 22, got 21",
    "output columns": r"tensor 'output\.weight' has wrong shape",
    "output rows": r"tensor 'output\.weight' has wrong shape",
}


def _file_checks(path: Path) -> list[CheckResult]:
    return check_structure(Side.of("target", open_gguf(path), RULES), RULES)


def _load_error(tmp: Path, *args: str) -> str | None:
    """None when the bundled server loads the model(s), else the llama.cpp log."""
    log = tmp / f"server-{len(list(tmp.glob('server-*.log')))}.log"
    try:
        server = launch(bundled_command(), [*args, "-c", "256"], log, start_timeout_s=60)
    except ServerStartError:
        return log.read_text(errors="replace")
    server.stop()
    return None


def test_tiny_vocab_size_is_what_the_cases_assume(tmp_path: Path) -> None:
    assert open_gguf(write_model(tmp_path / "t.gguf", BASE)).metadata["tokenizer.ggml.tokens"].count == N_VOCAB


@pytest.mark.parametrize(("case", "spec", "code", "words"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_structure_is_an_error_naming_tensor_and_numbers(
    tmp_path: Path, case: str, spec: ModelSpec, code: str, words: list[str]
) -> None:
    checks = run_pair(tmp_path, spec, BASE, "draft-simple")
    assert errors(checks) == {code}, [(c.code, c.message) for c in checks if c.severity == "error"]
    c = next(c for c in checks if c.code == code and c.severity == "error")
    assert c.message.startswith("target: ")
    for w in words:
        assert w in c.message, (w, c.message)
    # the same file as the draft: reported for the draft
    assert code in errors(run_pair(tmp_path, BASE, spec, "draft-simple"))


def test_llama_cpp_refuses_every_broken_file_and_loads_the_intact_one(tmp_path: Path) -> None:
    assert _load_error(tmp_path, "-m", str(write_model(tmp_path / "ok.gguf", BASE))) is None
    for case, spec, _code, words in BROKEN:
        path = write_model(tmp_path / f"{case.replace(' ', '-')}.gguf", spec)
        log = _load_error(tmp_path, "-m", str(path))
        assert log is not None, f"{case}: llama.cpp loaded it"
        assert re.search(LLAMA_SAYS[case], log), (case, log[-2000:])
        assert words[0].strip("'") in log or "wrong number of tensors" in log


def test_eagle3_head_must_fit_its_metadata_and_llama_cpp_agrees(tmp_path: Path) -> None:
    target = write_model(tmp_path / "t.gguf", BASE)
    good = write_model(tmp_path / "eagle.gguf", EAGLE)
    assert not [c for c in _file_checks(good) if c.severity == "error"]
    assert _load_error(tmp_path, "-m", str(target), "-md", str(good), "--spec-type", "draft-eagle3") is None

    bad = write_model(tmp_path / "eagle-fc.gguf", EAGLE.but(extra_tensors=(("fc.weight", (64, 128)),)))
    c = one(_file_checks(bad), "structure.eagle3_head")
    assert c.severity == "error"
    assert "'fc.weight' has 128 input columns, 3 target layers x target_hidden_size 64 = 192" in c.message
    log = _load_error(tmp_path, "-m", str(target), "-md", str(bad), "--spec-type", "draft-eagle3")
    assert log is not None and "tensor 'fc.weight' has wrong shape; expected    192,     64, got    128" in log

    missing = write_model(tmp_path / "eagle-nofc.gguf", EAGLE.but(drop_tensors=("fc.weight",)))
    assert one(_file_checks(missing), "structure.eagle3_head").message == "target: missing tensor 'fc.weight'"


def test_mtp_heads_sit_in_the_last_blocks_with_their_shapes(tmp_path: Path) -> None:
    """Shapes from every MTP loader in llama.cpp (eh_proj {2*n_embd, n_embd}, enorm/hnorm {n_embd})."""
    ok = _file_checks(write_model(tmp_path / "m.gguf", MTP))
    assert one(ok, "structure.mtp_heads").severity == "pass"
    wide = MTP.but(extra_tensors=(("blk.2.nextn.eh_proj.weight", (64, 64)),))
    c = one(_file_checks(write_model(tmp_path / "w.gguf", wide)), "structure.mtp_heads")
    assert c.severity == "error" and "'blk.2.nextn.eh_proj.weight' is [64, 64], n_embd 64 needs [128, 64]" in c.message
    early = MTP.but(extra_tensors=(("blk.0.nextn.enorm.weight", (64,)),))
    c = one(_file_checks(write_model(tmp_path / "e.gguf", early)), "structure.mtp_heads")
    assert c.severity == "error" and "'blk.0.nextn.enorm.weight' is in block 0; the MTP blocks are 2..2" in c.message


def test_data_outside_the_file_is_refused_with_both_numbers(tmp_path: Path) -> None:
    """Data regions are the reader's job: a truncated file names the tensor, its end and the size."""
    path = write_model(tmp_path / "cut.gguf", BASE)
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(GGUFError) as err:
        open_gguf(path)
    msg = str(err.value)
    assert "tensor 'output.weight'" in msg and f"past the end of the file ({len(data) - 100} bytes)" in msg
    assert re.search(r"data ends at \d+", msg)
    log = _load_error(tmp_path, "-m", str(path))
    assert log is not None and "output.weight" in log  # llama.cpp: "... data is not within the file bounds"


def test_tiny_models_and_real_vocab_files_pass(tmp_path: Path) -> None:
    specs = {
        "base": BASE,
        "f16": BASE.but(file_type="f16"),
        "gqa": BASE.but(n_head_kv=2),
        "eagle3": EAGLE,
        "eagle3 reduced vocab": EAGLE.but(d2t=tuple(range(100)), extra_tensors=(("output.weight", (100, 64)),)),
        "dflash": BASE.but(architecture="dflash", dflash_block_size=4, dflash_target_layers=(0, 1)),
        "mtp": MTP,
        "bpe": BASE.but(vocab_type="gpt2", pre="qwen2"),
        "tied output": BASE.but(drop_tensors=("output.weight",)),  # as SmolLM2: the embeddings are the head
    }
    for name, spec in specs.items():
        checks = _file_checks(write_model(tmp_path / f"{name}.gguf", spec))
        assert checks and all(c.severity == "pass" for c in checks), (name, checks)
        if name == "tied output":
            assert any(c.code == "structure.output" and "(tied to 'token_embd.weight')" in c.message for c in checks)
    for name, path in vocab_files().items():  # vocab-only: nothing to load, nothing reported
        assert _file_checks(path) == [], name
