"""`structure.hparams`: the hyper-parameters llama.cpp's loader refuses before it reads a tensor.

Mirrors `llama_model_base::load_hparams` (src/llama-model.cpp, b11434), which every architecture
goes through: `get_key<uint32_t>` takes a count only when it is stored as UINT32 ("key ... has
wrong type"), block_count must lie in 1..LLAMA_MAX_LAYERS, nextn_predict_layers within it,
expert counts within LLAMA_MAX_EXPERTS and each other, a per-layer array must have exactly
block_count entries. A head count says how many columns the attention projections have: a file
whose `attn_q`/`attn_k` tensors are narrower than one column per head fails the loader's shape
check; for the architectures whose q/k/v projections are sized by the head counts alone (the
rule set's `structure.standard_qkv`, extracted from `src/models/*.cpp`), the widths must be
exactly head_dim x heads. Every loop here runs over what the file holds (its keys, its tensors),
never over a count.
"""

from __future__ import annotations

import re

from specreg.gguf import format as F
from specreg.gguf.reader import GGUFArray, GGUFFile
from specreg.schemas.checks import CheckResult
from specreg.validators.ruleset import RuleSet
from specreg.validators.side import Side, result

_U32 = int(F.VT.UINT32)
_PER_LAYER_ITEMS = frozenset({int(F.VT.UINT32), int(F.VT.INT32), int(F.VT.BOOL)})  # get_arr's std::array<uint32_t>
_REQUIRED = (F.KEY_CONTEXT_LENGTH, F.KEY_EMBEDDING_LENGTH, F.KEY_BLOCK_COUNT)
_OPTIONAL = (F.KEY_NEXTN, F.KEY_EXPERT_COUNT, F.KEY_EXPERT_GROUPS, F.KEY_KEY_LENGTH, F.KEY_VALUE_LENGTH)
_PER_LAYER = (F.KEY_FF_LENGTH, F.KEY_HEAD_COUNT, F.KEY_HEAD_COUNT_KV, F.KEY_EXPERT_USED)
# attention projections whose output width is (a multiple of) one head dimension per head
_HEAD_TENSORS = {
    "attn_q.weight": F.KEY_HEAD_COUNT,
    "attn_q_b.weight": F.KEY_HEAD_COUNT,
    "attn_k.weight": F.KEY_HEAD_COUNT_KV,
    "attn_v.weight": F.KEY_HEAD_COUNT_KV,
    "attn_qkv.weight": F.KEY_HEAD_COUNT,
}
_ATTN = re.compile(r"^blk\.(\d+)\.(attn_(?:q|q_b|k|v|qkv)\.weight)$")


def _type(gf: GGUFFile, key: str) -> str:
    value = gf.metadata.get(key)
    if isinstance(value, GGUFArray):
        return f"ARRAY of {value.type_name}"
    return F.VALUE_TYPE_NAMES.get(gf.value_types[key], "?")


def _u32(gf: GGUFFile, key: str, problems: list[str], *, required: bool) -> int | None:
    if key not in gf.metadata:
        if required:
            problems.append(f"key not found in model: {key}")
        return None
    if gf.value_types[key] != _U32:
        problems.append(f"key {key} has wrong type {_type(gf, key)} but expected type UINT32")
        return None
    value = gf.metadata[key]
    assert isinstance(value, int)  # a UINT32 reads as an int
    return value


def _per_layer(gf: GGUFFile, key: str, n_layer: int | None, problems: list[str]) -> list[int] | None:
    """llama.cpp's get_key_or_arr: a UINT32, or an array of exactly block_count entries."""
    value = gf.metadata.get(key)
    if value is None:
        return None
    if not isinstance(value, GGUFArray):
        v = _u32(gf, key, problems, required=False)
        return None if v is None else [v]
    if value.item_type not in _PER_LAYER_ITEMS:
        problems.append(f"{key} has wrong array element type {value.type_name}")
        return None
    if n_layer is None:  # block_count is already refused: the array is not read
        return None
    if value.count != n_layer:
        problems.append(f"key {key} has wrong array length; expected {n_layer}, got {value.count}")
        return None
    return [int(x) & 0xFFFFFFFF for x in value.to_list()]  # the loader copies them into uint32_t


def _at(values: list[int] | None, il: int) -> int | None:
    if not values:
        return None
    return values[0] if len(values) == 1 else (values[il] if il < len(values) else None)


def _heads(
    side: Side, arch: str, per_layer: dict[str, list[int] | None], problems: list[str], widths: list[str] | None
) -> None:
    """One column per head at least, in every attention projection the file holds; with `widths`
    (the loader sizes q, k, v from the first layer's head counts), exactly those widths."""
    gf = side.file
    heads = per_layer[F.KEY_HEAD_COUNT]
    if heads is None:
        return
    kv = per_layer[F.KEY_HEAD_COUNT_KV] or heads  # llama.cpp: n_head_kv defaults to n_head
    want: dict[str, int] = {}
    swa_dims = any(f"{arch}.attention.{k}_length_swa" in gf.metadata for k in ("key", "value"))
    if widths is not None and not swa_dims and heads[0] > 0:
        n_embd = side.summary.embedding_length or 0
        dim = {}
        for which, key in (("head_k", F.KEY_KEY_LENGTH), ("head_v", F.KEY_VALUE_LENGTH)):
            stated = gf.metadata.get(key.format(arch=arch))  # llama.cpp's default: n_embd / n_head()
            dim[which] = stated if isinstance(stated, int) else n_embd // heads[0]
        value = {
            "n_embd": n_embd,
            "head_k*n_head": dim["head_k"] * heads[0],
            "head_k*n_head_kv": dim["head_k"] * kv[0],
            "head_v*n_head_kv": dim["head_v"] * kv[0],
        }
        q, k, v = (value[w] for w in widths)
        want = {"attn_q.weight": q, "attn_k.weight": k, "attn_v.weight": v, "attn_qkv.weight": q + k + v}
    for t in side.file.tensors:
        m = _ATTN.match(t.name)
        if m is None or len(t.shape) < 2:
            continue
        il, part = int(m.group(1)), m.group(2)
        cols, which = t.shape[1], _HEAD_TENSORS[part]
        n = _at(kv if which == F.KEY_HEAD_COUNT_KV else heads, il)
        if part != "attn_qkv.weight" and n is not None and (n == 0 or cols < n):
            key = which.format(arch=arch)
            problems.append(
                f"tensor '{t.name}' has {cols} columns for {key} = {n}: llama.cpp's loader refuses its shape"
            )
            return
        if part in want and cols != want[part]:
            problems.append(
                f"tensor '{t.name}' has {cols} columns; head_count {heads[0]}, head_count_kv {kv[0]} "
                f"make {want[part]}: llama.cpp's loader refuses its shape"
            )
            return


def hparams(side: Side, rules: RuleSet) -> CheckResult:
    """Every refusal of llama.cpp's generic load_hparams, in the order it meets them."""
    gf, arch = side.file, side.summary.architecture
    if arch is None:
        return result("structure.hparams", "info", f"{side.role}: no general.architecture to read hyper-parameters by")
    problems: list[str] = []
    stated = {key: _u32(gf, key.format(arch=arch), problems, required=True) for key in _REQUIRED}
    n_all = stated[F.KEY_BLOCK_COUNT]
    if n_all is not None and not 0 < n_all <= F.LLAMA_MAX_LAYERS:
        problems.append(
            f"{arch}.block_count is {n_all}: llama.cpp loads 1..{F.LLAMA_MAX_LAYERS} blocks (LLAMA_MAX_LAYERS)"
        )
        n_all = None
    opt = {key: _u32(gf, key.format(arch=arch), problems, required=False) for key in _OPTIONAL}
    per_layer = {key: _per_layer(gf, key.format(arch=arch), n_all, problems) for key in _PER_LAYER}
    n_next = opt[F.KEY_NEXTN]
    if n_next is not None and n_all is not None and n_next > n_all:
        problems.append(f"{arch}.nextn_predict_layers {n_next} exceeds block_count {n_all}")
    experts, groups = opt[F.KEY_EXPERT_COUNT] or 0, opt[F.KEY_EXPERT_GROUPS] or 0
    used = max(per_layer[F.KEY_EXPERT_USED] or [0])
    if experts > F.LLAMA_MAX_EXPERTS:
        problems.append(f"{arch}.expert_count is {experts}: llama.cpp allows at most {F.LLAMA_MAX_EXPERTS}")
    elif used > experts:
        problems.append(f"{arch}.expert_used_count {used} exceeds expert_count {experts}")
    elif experts and not used:
        problems.append(f"{arch}.expert_count is {experts} but expert_used_count is 0")
    elif groups and groups >= max(experts, 1):
        problems.append(f"{arch}.expert_group_count {groups} is not below expert_count {experts}")
    _heads(side, arch, per_layer, problems, rules.structure.standard_qkv.get(arch))
    ev: dict[str, object] = {"role": side.role, "problems": problems[:10], "n_problems": len(problems)}
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        msg = f"{side.role}: {problems[0]}{more}; llama.cpp refuses to load it"
        return result("structure.hparams", "error", msg, **ev)
    return result("structure.hparams", "pass", f"{side.role}: hyper-parameters within llama.cpp's limits", **ev)
