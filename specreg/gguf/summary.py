"""From an opened GGUF file to `GGUFSummary`: the facts validators and the registry compare.

Values are read as stored (raw, not llama.cpp's effective defaults), every lookup type-checked.
"""

from __future__ import annotations

import copy
import hashlib
import re
from pathlib import Path
from typing import Any

from specreg.gguf import format as F
from specreg.gguf.fields import get_bool, get_int, get_int_list, get_int_or_max, get_str
from specreg.gguf.reader import GGUFArray, GGUFFile, open_gguf
from specreg.schemas.gguf import (
    GGUFSummary,
    LicenceFields,
    ProvenanceFields,
    SpeculativeMeta,
    TokenizerSummary,
)

_NEXTN_TENSOR = re.compile(r"^blk\.\d+\.nextn\.")
_BASE_MODEL_KEY = re.compile(r"^general\.base_model\.(\d+)\.(.+)$")
_INT32 = int(F.VT.INT32)
_FLOAT32 = int(F.VT.FLOAT32)


def _sha(arr: GGUFArray | None) -> str | None:
    return None if arr is None else arr.sha256()


def _tokenizer(gf: GGUFFile) -> TokenizerSummary:
    tokens = gf.typed_array(F.KEY_TOKENS, (F.T_STRING,))
    merges = gf.typed_array(F.KEY_MERGES, (F.T_STRING,))
    template = gf.raw_string(F.KEY_CHAT_TEMPLATE)
    get_str(gf, F.KEY_CHAT_TEMPLATE)  # type-checks the key
    ids: dict[str, Any] = {field: get_int(gf, key) for field, key in F.SPECIAL_ID_KEYS.items()}
    flags: dict[str, Any] = {field: get_bool(gf, key) for field, key in F.ADD_FLAG_KEYS.items()}
    return TokenizerSummary(
        model=get_str(gf, F.KEY_TOK_MODEL),
        pre=get_str(gf, F.KEY_TOK_PRE),
        n_tokens=0 if tokens is None else tokens.count,
        tokens_sha256=_sha(tokens),
        token_types_sha256=_sha(gf.typed_array(F.KEY_TOKEN_TYPES, (_INT32,))),
        scores_sha256=_sha(gf.typed_array(F.KEY_SCORES, (_FLOAT32, _INT32))),
        merges_sha256=_sha(merges),
        n_merges=0 if merges is None else merges.count,
        **ids,
        **flags,
        chat_template_present=template is not None,
        chat_template_sha256=None if template is None else hashlib.sha256(template).hexdigest(),
    )


def _speculative(gf: GGUFFile, arch: str | None) -> SpeculativeMeta:
    meta = SpeculativeMeta(nextn_tensors=[t.name for t in gf.tensors if _NEXTN_TENSOR.match(t.name)])
    d2t = gf.tensor(F.D2T_TENSOR)
    meta.d2t_shape = None if d2t is None else list(d2t.shape)
    if arch is None:
        return meta
    meta.nextn_predict_layers = get_int(gf, F.KEY_NEXTN.format(arch=arch))
    # EAGLE-3 and DFlash keys are prefixed by their own architecture name (eagle3.target_layers)
    if arch == F.EAGLE3_ARCH:
        meta.eagle3_target_layers = get_int_list(gf, F.KEY_TARGET_LAYERS.format(arch=arch))
        meta.eagle3_target_hidden_size = get_int(gf, F.KEY_TARGET_HIDDEN.format(arch=arch))
    elif arch == F.DFLASH_ARCH:
        meta.dflash_block_size = get_int(gf, F.KEY_BLOCK_SIZE.format(arch=arch))
        meta.dflash_target_layers = get_int_list(gf, F.KEY_TARGET_LAYERS.format(arch=arch))
        meta.dflash_target_hidden_size = get_int(gf, F.KEY_TARGET_HIDDEN.format(arch=arch))
    return meta


def _plain(gf: GGUFFile, key: str) -> str | int | None:
    """A provenance value as str/int (floats, bools and arrays are rendered as text)."""
    value = gf.metadata[key]
    vtype = gf.value_types[key]
    if vtype == F.T_STRING or vtype in F.INTEGER_TYPES:
        return value  # type: ignore[return-value]
    if vtype == F.T_ARRAY:
        return f"<array of {len(value)} {value.type_name}>"  # type: ignore[arg-type,attr-defined]
    return str(value)


def _provenance(gf: GGUFFile) -> ProvenanceFields:
    get_int(gf, F.KEY_BASE_MODEL_COUNT)  # type-checks the key; entries come from the keys present
    bases: dict[int, dict[str, str | int | None]] = {}
    source: dict[str, str | int | None] = {}
    for key in gf.metadata:
        m = _BASE_MODEL_KEY.match(key)
        if m:
            bases.setdefault(int(m.group(1)), {})[m.group(2)] = _plain(gf, key)
        elif key.startswith(F.SOURCE_PREFIX):
            source[key[len(F.SOURCE_PREFIX) :]] = _plain(gf, key)
    return ProvenanceFields(
        base_models=[bases[i] for i in sorted(bases)], source=source, repo_url=get_str(gf, F.KEY_REPO_URL)
    )


def build_summary(gf: GGUFFile) -> GGUFSummary:
    """Assemble the summary; every lookup is type-checked against the stored value type, so the
    plain dataclasses need no second validation."""
    arch = get_str(gf, F.KEY_ARCH)
    split_count = get_int(gf, F.KEY_SPLIT_COUNT)
    split_no = get_int(gf, F.KEY_SPLIT_NO)
    if split_count is not None and split_count < 1:
        raise gf.error(f"split count {split_count} must be at least 1", F.KEY_SPLIT_COUNT)
    if split_no is not None and split_count is not None and not 0 <= split_no < split_count:
        raise gf.error(f"split number {split_no} is outside 0..{split_count - 1}", F.KEY_SPLIT_NO)

    def arch_int(template: str) -> int | None:
        return None if arch is None else get_int(gf, template.format(arch=arch))

    file_type = get_int(gf, F.KEY_FILE_TYPE)
    return GGUFSummary(
        path=str(gf.path),
        file_size=gf.file_size,
        version=gf.version,
        n_tensors=len(gf.tensors),
        n_kv=len(gf.metadata),
        alignment=gf.alignment,
        data_offset=gf.data_offset,
        architecture=arch,
        name=get_str(gf, F.KEY_NAME),
        file_type=file_type,
        file_type_name=F.file_type_name(file_type),
        parameter_count=sum(gf.n_elements.values()),
        context_length=arch_int(F.KEY_CONTEXT_LENGTH),
        embedding_length=arch_int(F.KEY_EMBEDDING_LENGTH),
        block_count=arch_int(F.KEY_BLOCK_COUNT),
        head_count=None if arch is None else get_int_or_max(gf, F.KEY_HEAD_COUNT.format(arch=arch)),
        head_count_kv=None if arch is None else get_int_or_max(gf, F.KEY_HEAD_COUNT_KV.format(arch=arch)),
        vocab_only=not gf.tensors,
        split_count=split_count,
        split_no=split_no,
        tokenizer=_tokenizer(gf),
        speculative=_speculative(gf, arch),
        license=LicenceFields(
            license=get_str(gf, F.KEY_LICENSE),
            name=get_str(gf, F.KEY_LICENSE_NAME),
            link=get_str(gf, F.KEY_LICENSE_LINK),
        ),
        provenance=_provenance(gf),
    )


def summarize(source: GGUFFile | str | Path, *, shared: bool = False) -> GGUFSummary:
    """The summary of an opened file (cached on it) or of a path; sha256 stays None: the registry hashes.

    Args:
        source: an opened file, or the path of one to open.
        shared: give the cached summary itself rather than a copy, for readers that never
            edit it (a deep copy per call is costly where `drafts` reads every candidate).
            The default is a copy, since callers may edit theirs (e.g. fill sha256).

    Raises:
        GGUFError: when `source` is a path and the file is unreadable or malformed.
    """
    gf = source if isinstance(source, GGUFFile) else open_gguf(source)
    if gf._summary is None:
        gf._summary = build_summary(gf)
    return gf._summary if shared else copy.deepcopy(gf._summary)
