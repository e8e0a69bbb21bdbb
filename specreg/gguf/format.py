"""GGUF format constants and bounds, mirroring llama.cpp's ggml/src/gguf.cpp (b11434).

The reader is on the hot path of every `specreg check pair` (a fresh process each time), so
these are plain literals rather than imports from the `gguf` package (which pulls in numpy).
The tensor type table (block and type sizes) is generated from the b11434 runtime's
own source (`ggml_types.py`, by tools/extract_ggml_types.py; tests/gguf/test_ggml_types.py checks
every type against that source and against ggml itself). The rest were taken from `gguf` 0.19.0
plus the few entries that release lacks but the runtime knows; `tests/gguf/test_format.py`
checks them against the installed `gguf` package, so a test fails the day the two disagree.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final

# ggml type id -> (name, block size, bytes per block): generated from the runtime's own source
# (tools/extract_ggml_types.py), never from the `gguf` wheel, whose copy can lag (Q8_1: 40 there, 36 in ggml).
from specreg.gguf.ggml_types import GGML_TYPES as GGML_TYPES

MAGIC: Final = b"GGUF"
SUPPORTED_VERSIONS: Final = (2, 3)
DEFAULT_ALIGNMENT: Final = 32  # GGUF_DEFAULT_ALIGNMENT
MAX_STRING_LENGTH: Final = 1 << 30  # GGUF_MAX_STRING_LENGTH
MAX_ARRAY_ELEMENTS: Final = 1 << 30  # GGUF_MAX_ARRAY_ELEMENTS
GGML_MAX_NAME: Final = 64  # names must be shorter (room for the C string's NUL)
GGML_MAX_DIMS: Final = 4
INT64_MAX: Final = (1 << 63) - 1
SIZE_MAX: Final = (1 << 64) - 1

# specreg's own limits (llama.cpp has none beyond the format's): what one file may make us
# materialise. Real files have under 100 key/values, a few thousand tensors and at most a few
# hundred thousand tokens; a file past these is refused (GGUFError), not read.
MAX_KV: Final = 1 << 16
MAX_TENSORS: Final = 1 << 17
MAX_TOKENS: Final = 1 << 21  # token and merge arrays (gemma-4: 262,144 tokens, 514,906 merges)

# Smallest possible encodings, used to bound counts by the bytes left before looping:
# key length + 1-byte key + value type + 1-byte value; name length + n_dims + type + offset.
MIN_KV_BYTES: Final = 8 + 1 + 4 + 1
MIN_TENSOR_INFO_BYTES: Final = 8 + 4 + 4 + 8

# the ggml types llama-server takes for its KV cache (-ctk/-ctv; common/arg.cpp kv_cache_types)
KV_CACHE_TYPES: Final = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


class VT(IntEnum):
    """enum gguf_type (gguf.GGUFValueType)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


T_STRING: Final = int(VT.STRING)
T_ARRAY: Final = int(VT.ARRAY)

# value type -> struct format char of one element (little-endian is applied by the callers)
SCALAR_FORMATS: Final[dict[int, str]] = {
    int(VT.UINT8): "B",
    int(VT.INT8): "b",
    int(VT.UINT16): "H",
    int(VT.INT16): "h",
    int(VT.UINT32): "I",
    int(VT.INT32): "i",
    int(VT.FLOAT32): "f",
    int(VT.BOOL): "?",
    int(VT.UINT64): "Q",
    int(VT.INT64): "q",
    int(VT.FLOAT64): "d",
}
SCALAR_STRUCTS: Final[dict[int, struct.Struct]] = {t: struct.Struct("<" + f) for t, f in SCALAR_FORMATS.items()}
SCALAR_SIZES: Final[dict[int, int]] = {t: s.size for t, s in SCALAR_STRUCTS.items()}
INTEGER_TYPES: Final = frozenset(
    int(t) for t in (VT.UINT8, VT.INT8, VT.UINT16, VT.INT16, VT.UINT32, VT.INT32, VT.UINT64, VT.INT64)
)
VALUE_TYPE_NAMES: Final[dict[int, str]] = {int(t): t.name for t in VT}

U32: Final = struct.Struct("<I")
I32: Final = struct.Struct("<i")
U64: Final = struct.Struct("<Q")
I64: Final = struct.Struct("<q")


# general.file_type -> name: gguf.LlamaFileType plus what it lacks.
FILE_TYPE_NAMES_EXTRA: Final = {41: "MOSTLY_Q2_0"}  # llama.h of b11434
_FILE_TYPE_NAMES: dict[int, str] = {
    0: "ALL_F32",
    1: "MOSTLY_F16",
    2: "MOSTLY_Q4_0",
    3: "MOSTLY_Q4_1",
    7: "MOSTLY_Q8_0",
    8: "MOSTLY_Q5_0",
    9: "MOSTLY_Q5_1",
    10: "MOSTLY_Q2_K",
    11: "MOSTLY_Q3_K_S",
    12: "MOSTLY_Q3_K_M",
    13: "MOSTLY_Q3_K_L",
    14: "MOSTLY_Q4_K_S",
    15: "MOSTLY_Q4_K_M",
    16: "MOSTLY_Q5_K_S",
    17: "MOSTLY_Q5_K_M",
    18: "MOSTLY_Q6_K",
    19: "MOSTLY_IQ2_XXS",
    20: "MOSTLY_IQ2_XS",
    21: "MOSTLY_Q2_K_S",
    22: "MOSTLY_IQ3_XS",
    23: "MOSTLY_IQ3_XXS",
    24: "MOSTLY_IQ1_S",
    25: "MOSTLY_IQ4_NL",
    26: "MOSTLY_IQ3_S",
    27: "MOSTLY_IQ3_M",
    28: "MOSTLY_IQ2_S",
    29: "MOSTLY_IQ2_M",
    30: "MOSTLY_IQ4_XS",
    31: "MOSTLY_IQ1_M",
    32: "MOSTLY_BF16",
    36: "MOSTLY_TQ1_0",
    37: "MOSTLY_TQ2_0",
    38: "MOSTLY_MXFP4_MOE",
    39: "MOSTLY_NVFP4",
    40: "MOSTLY_Q1_0",
    1024: "GUESSED",
    **FILE_TYPE_NAMES_EXTRA,
}


def file_type_name(file_type: int | None) -> str | None:
    """`general.file_type` as llama.cpp names it (None when absent, 'UNKNOWN_<n>' when new)."""
    if file_type is None:
        return None
    return _FILE_TYPE_NAMES.get(file_type, f"UNKNOWN_{file_type}")


# Keys as in gguf.Keys; the target_layers / target_hidden_size / block_size keys postdate gguf 0.19.0
# and are llama.cpp's literal names.
KEY_ALIGNMENT: Final = "general.alignment"
KEY_ARCH: Final = "general.architecture"
KEY_NAME: Final = "general.name"
KEY_FILE_TYPE: Final = "general.file_type"
KEY_LICENSE: Final = "general.license"
KEY_LICENSE_NAME: Final = "general.license.name"
KEY_LICENSE_LINK: Final = "general.license.link"
KEY_REPO_URL: Final = "general.repo_url"
KEY_BASE_MODEL_COUNT: Final = "general.base_model.count"
SOURCE_PREFIX: Final = "general.source."
KEY_SPLIT_COUNT: Final = "split.count"
KEY_SPLIT_NO: Final = "split.no"

KEY_CONTEXT_LENGTH: Final = "{arch}.context_length"
KEY_EMBEDDING_LENGTH: Final = "{arch}.embedding_length"
KEY_BLOCK_COUNT: Final = "{arch}.block_count"
KEY_HEAD_COUNT: Final = "{arch}.attention.head_count"
KEY_HEAD_COUNT_KV: Final = "{arch}.attention.head_count_kv"
KEY_NEXTN: Final = "{arch}.nextn_predict_layers"
KEY_EXPERT_COUNT: Final = "{arch}.expert_count"
KEY_TARGET_LAYERS: Final = "{arch}.target_layers"
KEY_TARGET_HIDDEN: Final = "{arch}.target_hidden_size"
KEY_BLOCK_SIZE: Final = "{arch}.block_size"
KEY_EXPERT_USED: Final = "{arch}.expert_used_count"
KEY_EXPERT_GROUPS: Final = "{arch}.expert_group_count"
KEY_FF_LENGTH: Final = "{arch}.feed_forward_length"
KEY_KEY_LENGTH: Final = "{arch}.attention.key_length"
KEY_VALUE_LENGTH: Final = "{arch}.attention.value_length"
# llama.cpp's src/llama-hparams.h: load_hparams asserts block_count in 1..LLAMA_MAX_LAYERS and
# expert_count <= LLAMA_MAX_EXPERTS (a test reads both from the runtime's source)
LLAMA_MAX_LAYERS: Final = 512
LLAMA_MAX_EXPERTS: Final = 1024

KEY_TOK_MODEL: Final = "tokenizer.ggml.model"
KEY_TOK_PRE: Final = "tokenizer.ggml.pre"
KEY_TOKENS: Final = "tokenizer.ggml.tokens"
KEY_TOKEN_TYPES: Final = "tokenizer.ggml.token_type"
KEY_SCORES: Final = "tokenizer.ggml.scores"
KEY_MERGES: Final = "tokenizer.ggml.merges"
KEY_CHAT_TEMPLATE: Final = "tokenizer.chat_template"
# summary field -> key; every one of these must index the token list when present
SPECIAL_ID_KEYS: Final[dict[str, str]] = {
    "bos_id": "tokenizer.ggml.bos_token_id",
    "eos_id": "tokenizer.ggml.eos_token_id",
    "eot_id": "tokenizer.ggml.eot_token_id",
    "eom_id": "tokenizer.ggml.eom_token_id",
    "unk_id": "tokenizer.ggml.unknown_token_id",
    "pad_id": "tokenizer.ggml.padding_token_id",
    "sep_id": "tokenizer.ggml.seperator_token_id",  # sic: llama.cpp's spelling
    "fim_pre_id": "tokenizer.ggml.fim_pre_token_id",
    "fim_suf_id": "tokenizer.ggml.fim_suf_token_id",
    "fim_mid_id": "tokenizer.ggml.fim_mid_token_id",
}
ADD_FLAG_KEYS: Final[dict[str, str]] = {
    "add_bos": "tokenizer.ggml.add_bos_token",
    "add_eos": "tokenizer.ggml.add_eos_token",
    "add_sep": "tokenizer.ggml.add_sep_token",
}

# architectures whose drafts read target hidden states (keys prefixed by the arch name)
EAGLE3_ARCH: Final = "eagle3"
DFLASH_ARCH: Final = "dflash"
D2T_TENSOR: Final = "d2t"


def pad(n: int, alignment: int) -> int:
    """GGML_PAD: round `n` up to a multiple of `alignment` (a power of two)."""
    return (n + alignment - 1) & ~(alignment - 1)
