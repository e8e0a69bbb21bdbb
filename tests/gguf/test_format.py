"""The reader's GGUF constants are literals (importing `gguf` costs numpy, ~0.1 s per command):
they must agree with the installed `gguf` package, and add only what gguf does not know."""

from __future__ import annotations

import subprocess
import sys

import gguf

from specreg.gguf import format as F


def test_value_types_match_gguf() -> None:
    assert {t.name: int(t) for t in F.VT} == {t.name: int(t) for t in gguf.GGUFValueType}
    assert F.DEFAULT_ALIGNMENT == gguf.GGUF_DEFAULT_ALIGNMENT
    assert gguf.GGUF_MAGIC.to_bytes(4, "little") == F.MAGIC


# Where the `gguf` wheel's copy of ggml's sizes lags the runtime (ggml-common.h of b11434:
# block_q8_1 is 2*sizeof(ggml_half) + QK8_1 = 36 bytes; gguf 0.19.0 still says 40).
WHEEL_LAGS = {"Q8_1"}


def test_ggml_types_name_what_gguf_names() -> None:
    """Ids and names agree with the wheel; sizes come from the runtime's source (gguf/test_ggml_types.py)
    and may differ from the wheel's only where the wheel is known to lag."""
    theirs = {int(t): (t.name, blk, size) for t, (blk, size) in gguf.GGML_QUANT_SIZES.items()}
    both = set(F.GGML_TYPES) & set(theirs)
    assert {tid: F.GGML_TYPES[tid][0] for tid in both} == {tid: theirs[tid][0] for tid in both}
    assert set(theirs) <= set(F.GGML_TYPES)  # the runtime knows every type the wheel knows
    differ = {F.GGML_TYPES[tid][0] for tid in both if F.GGML_TYPES[tid] != theirs[tid]}
    assert differ <= WHEEL_LAGS, differ
    assert F.GGML_TYPES[9] == ("Q8_1", 32, 36)


def test_file_types_match_gguf() -> None:
    ours = {k: v for k, v in F._FILE_TYPE_NAMES.items() if k not in F.FILE_TYPE_NAMES_EXTRA}
    assert ours == {int(t): t.name for t in gguf.LlamaFileType}
    assert not set(F.FILE_TYPE_NAMES_EXTRA) & {int(t) for t in gguf.LlamaFileType}
    assert F.file_type_name(15) == gguf.LlamaFileType(15).name and F.file_type_name(99999) == "UNKNOWN_99999"


def test_keys_match_gguf() -> None:
    K = gguf.Keys
    pairs = {
        F.KEY_ALIGNMENT: K.General.ALIGNMENT,
        F.KEY_ARCH: K.General.ARCHITECTURE,
        F.KEY_NAME: K.General.NAME,
        F.KEY_FILE_TYPE: K.General.FILE_TYPE,
        F.KEY_LICENSE: K.General.LICENSE,
        F.KEY_LICENSE_NAME: K.General.LICENSE_NAME,
        F.KEY_LICENSE_LINK: K.General.LICENSE_LINK,
        F.KEY_REPO_URL: K.General.REPO_URL,
        F.KEY_BASE_MODEL_COUNT: K.General.BASE_MODEL_COUNT,
        F.KEY_SPLIT_COUNT: K.Split.LLM_KV_SPLIT_COUNT,
        F.KEY_SPLIT_NO: K.Split.LLM_KV_SPLIT_NO,
        F.KEY_CONTEXT_LENGTH: K.LLM.CONTEXT_LENGTH,
        F.KEY_EMBEDDING_LENGTH: K.LLM.EMBEDDING_LENGTH,
        F.KEY_BLOCK_COUNT: K.LLM.BLOCK_COUNT,
        F.KEY_HEAD_COUNT: K.Attention.HEAD_COUNT,
        F.KEY_HEAD_COUNT_KV: K.Attention.HEAD_COUNT_KV,
        F.KEY_TOK_MODEL: K.Tokenizer.MODEL,
        F.KEY_TOK_PRE: K.Tokenizer.PRE,
        F.KEY_TOKENS: K.Tokenizer.LIST,
        F.KEY_TOKEN_TYPES: K.Tokenizer.TOKEN_TYPE,
        F.KEY_SCORES: K.Tokenizer.SCORES,
        F.KEY_MERGES: K.Tokenizer.MERGES,
        F.KEY_CHAT_TEMPLATE: K.Tokenizer.CHAT_TEMPLATE,
    }
    assert [ours for ours, theirs in pairs.items() if ours != theirs] == []
    # newer than gguf 0.19.0: gguf's name when it has one, llama.cpp's literal otherwise
    for ours, attr in (
        (F.KEY_NEXTN, "NEXTN_PREDICT_LAYERS"),
        (F.KEY_TARGET_LAYERS, "TARGET_LAYERS"),
        (F.KEY_TARGET_HIDDEN, "TARGET_HIDDEN_SIZE"),
        (F.KEY_BLOCK_SIZE, "BLOCK_SIZE"),
    ):
        assert ours == getattr(K.LLM, attr, ours), attr
    T = K.Tokenizer
    assert F.SPECIAL_ID_KEYS == {
        "bos_id": T.BOS_ID,
        "eos_id": T.EOS_ID,
        "eot_id": T.EOT_ID,
        "eom_id": T.EOM_ID,
        "unk_id": T.UNK_ID,
        "pad_id": T.PAD_ID,
        "sep_id": T.SEP_ID,
        "fim_pre_id": T.FIM_PRE_ID,
        "fim_suf_id": T.FIM_SUF_ID,
        "fim_mid_id": T.FIM_MID_ID,
    }
    assert F.ADD_FLAG_KEYS == {"add_bos": T.ADD_BOS, "add_eos": T.ADD_EOS, "add_sep": T.ADD_SEP}


def test_reading_a_file_imports_neither_gguf_nor_numpy(tmp_path) -> None:
    from specreg.testing import ModelSpec, write_model

    path = write_model(tmp_path / "m.gguf", ModelSpec())
    code = (
        "import sys; from specreg.gguf.reader import open_gguf; from specreg.gguf.summary import summarize; "
        f"f = open_gguf({str(path)!r}); summarize(f); f.token_texts(); "
        "print(sorted(m for m in ('gguf', 'numpy', 'sqlite_utils') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
