"""GGUF format constants and bounds, mirroring llama.cpp's ggml/src/gguf.cpp (b11434).

Names, value types and block sizes come from the `gguf` package; the few entries that the
PyPI release (0.19.0) lacks but the b11434 runtime knows are supplied here, so a valid file
for that runtime is not refused as "unknown type".
"""

from __future__ import annotations

import struct
from typing import Final

import gguf

MAGIC: Final = b"GGUF"
SUPPORTED_VERSIONS: Final = (2, 3)
DEFAULT_ALIGNMENT: Final = int(gguf.GGUF_DEFAULT_ALIGNMENT)
MAX_STRING_LENGTH: Final = 1 << 30  # GGUF_MAX_STRING_LENGTH
MAX_ARRAY_ELEMENTS: Final = 1 << 30  # GGUF_MAX_ARRAY_ELEMENTS
GGML_MAX_NAME: Final = 64  # names must be shorter (room for the C string's NUL)
GGML_MAX_DIMS: Final = 4
INT64_MAX: Final = (1 << 63) - 1
SIZE_MAX: Final = (1 << 64) - 1

# Smallest possible encodings, used to bound counts by the bytes left before looping:
# key length + 1-byte key + value type + 1-byte value; name length + n_dims + type + offset.
MIN_KV_BYTES: Final = 8 + 1 + 4 + 1
MIN_TENSOR_INFO_BYTES: Final = 8 + 4 + 4 + 8

VT = gguf.GGUFValueType
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
FLOAT_TYPES: Final = frozenset((int(VT.FLOAT32), int(VT.FLOAT64)))
VALUE_TYPE_NAMES: Final[dict[int, str]] = {int(t): t.name for t in VT}

U32: Final = struct.Struct("<I")
I32: Final = struct.Struct("<i")
U64: Final = struct.Struct("<Q")
I64: Final = struct.Struct("<q")


def _ggml_types() -> dict[int, tuple[str, int, int]]:
    """ggml type id -> (name, block size, bytes per block)."""
    table = {int(t): (t.name, blk, size) for t, (blk, size) in gguf.GGML_QUANT_SIZES.items()}
    # ggml-common.h of b11434: block_q2_0 = fp16 scale + 64 2-bit values.
    table.setdefault(42, ("Q2_0", 64, 18))
    return table


GGML_TYPES: Final = _ggml_types()

_FILE_TYPE_NAMES: dict[int, str] = {int(t): t.name for t in gguf.LlamaFileType}
_FILE_TYPE_NAMES.setdefault(41, "MOSTLY_Q2_0")  # llama.h of b11434


def file_type_name(file_type: int | None) -> str | None:
    """`general.file_type` as llama.cpp names it (None when absent, 'UNKNOWN_<n>' when new)."""
    if file_type is None:
        return None
    return _FILE_TYPE_NAMES.get(file_type, f"UNKNOWN_{file_type}")


def _key(cls: type, attr: str, fallback: str) -> str:
    # Keys added to gguf-py after the PyPI release are read with llama.cpp's literal name.
    return str(getattr(cls, attr, fallback))


K = gguf.Keys
KEY_ALIGNMENT: Final = K.General.ALIGNMENT
KEY_ARCH: Final = K.General.ARCHITECTURE
KEY_NAME: Final = K.General.NAME
KEY_FILE_TYPE: Final = K.General.FILE_TYPE
KEY_LICENSE: Final = K.General.LICENSE
KEY_LICENSE_NAME: Final = K.General.LICENSE_NAME
KEY_LICENSE_LINK: Final = K.General.LICENSE_LINK
KEY_REPO_URL: Final = K.General.REPO_URL
KEY_BASE_MODEL_COUNT: Final = K.General.BASE_MODEL_COUNT
BASE_MODEL_PREFIX: Final = "general.base_model."
SOURCE_PREFIX: Final = "general.source."
KEY_SPLIT_COUNT: Final = K.Split.LLM_KV_SPLIT_COUNT
KEY_SPLIT_NO: Final = K.Split.LLM_KV_SPLIT_NO

KEY_CONTEXT_LENGTH: Final = K.LLM.CONTEXT_LENGTH
KEY_EMBEDDING_LENGTH: Final = K.LLM.EMBEDDING_LENGTH
KEY_BLOCK_COUNT: Final = K.LLM.BLOCK_COUNT
KEY_HEAD_COUNT: Final = K.Attention.HEAD_COUNT
KEY_HEAD_COUNT_KV: Final = K.Attention.HEAD_COUNT_KV
KEY_NEXTN: Final = _key(K.LLM, "NEXTN_PREDICT_LAYERS", "{arch}.nextn_predict_layers")
KEY_TARGET_LAYERS: Final = _key(K.LLM, "TARGET_LAYERS", "{arch}.target_layers")
KEY_TARGET_HIDDEN: Final = _key(K.LLM, "TARGET_HIDDEN_SIZE", "{arch}.target_hidden_size")
KEY_BLOCK_SIZE: Final = _key(K.LLM, "BLOCK_SIZE", "{arch}.block_size")

KT = K.Tokenizer
KEY_TOK_MODEL: Final = KT.MODEL
KEY_TOK_PRE: Final = KT.PRE
KEY_TOKENS: Final = KT.LIST
KEY_TOKEN_TYPES: Final = KT.TOKEN_TYPE
KEY_SCORES: Final = KT.SCORES
KEY_MERGES: Final = KT.MERGES
KEY_CHAT_TEMPLATE: Final = KT.CHAT_TEMPLATE
# summary field -> key; every one of these must index the token list when present
SPECIAL_ID_KEYS: Final[dict[str, str]] = {
    "bos_id": KT.BOS_ID,
    "eos_id": KT.EOS_ID,
    "eot_id": KT.EOT_ID,
    "eom_id": KT.EOM_ID,
    "unk_id": KT.UNK_ID,
    "pad_id": KT.PAD_ID,
    "sep_id": KT.SEP_ID,
    "fim_pre_id": KT.FIM_PRE_ID,
    "fim_suf_id": KT.FIM_SUF_ID,
    "fim_mid_id": KT.FIM_MID_ID,
}
ADD_FLAG_KEYS: Final[dict[str, str]] = {"add_bos": KT.ADD_BOS, "add_eos": KT.ADD_EOS, "add_sep": KT.ADD_SEP}

# architectures whose drafts read target hidden states (keys prefixed by the arch name)
EAGLE3_ARCH: Final = "eagle3"
DFLASH_ARCH: Final = "dflash"
D2T_TENSOR: Final = "d2t"


def pad(n: int, alignment: int) -> int:
    """GGML_PAD: round `n` up to a multiple of `alignment` (a power of two)."""
    return (n + alignment - 1) & ~(alignment - 1)
