"""`structure.*`: the tensor layout llama.cpp's loader insists on, checked from the header alone.

A file whose metadata and tensors disagree passes every vocabulary rule and then dies at load
("tensor 'token_embd.weight' has wrong shape", "missing tensor 'blk.7.attn_q.weight'", "wrong
number of tensors"). These checks name the tensor and both numbers before anything is loaded.
What each architecture requires comes from the rule set (extracted from llama.cpp's
`src/models/*.cpp`); tensor data inside the file and packed without overlap is the reader's job
(a file that breaks it is refused with the tensor name and both offsets, exit 2).
"""

from __future__ import annotations

import re

from specreg.gguf import format as F
from specreg.gguf.fields import get_int
from specreg.schemas.checks import CheckResult
from specreg.schemas.gguf import TensorInfo
from specreg.validators.checks_hparams import hparams
from specreg.validators.ruleset import RuleSet
from specreg.validators.side import Side, result

_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")
_EMBD = "token_embd.weight"
_OUTPUT = "output.weight"
_FC = "fc.weight"
_NEXTN_SHAPES = {"nextn.eh_proj.weight": 2, "nextn.enorm.weight": 1, "nextn.hnorm.weight": 1}  # x n_embd


def _shape(t: TensorInfo) -> list[int]:
    """ggml's view: trailing dimensions of one dropped, so [64, 1] and [64] compare equal (llama.cpp does too)."""
    shape = list(t.shape)
    while len(shape) > 1 and shape[-1] == 1:
        shape.pop()
    return shape


def _blocks(side: Side) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for t in side.file.tensors:
        m = _BLOCK.match(t.name)
        if m:
            out.setdefault(int(m.group(1)), set()).add(m.group(2))
    return out


def token_embd(side: Side, rules: RuleSet) -> CheckResult:
    s, r = side.summary, rules.structure
    n_vocab, n_embd = s.tokenizer.n_tokens, s.embedding_length
    t = side.tensor(_EMBD)
    ev: dict[str, object] = {"role": side.role, "tensor": _EMBD, "n_tokens": n_vocab, "n_embd": n_embd}
    if t is None:
        if s.architecture in r.token_embd_required:
            return result("structure.token_embd", "error", f"{side.role}: missing tensor '{_EMBD}'", **ev)
        return result("structure.token_embd", "pass", f"{side.role}: no '{_EMBD}' (optional for {s.architecture})")
    shape = _shape(t)
    ev["shape"] = shape
    if s.architecture not in r.token_embd_vocab:
        return result("structure.token_embd", "pass", f"{side.role}: '{_EMBD}' {shape} (not sized by the vocabulary)")
    if len(shape) != 2 or shape[1] != n_vocab:
        rows = shape[1] if len(shape) == 2 else f"shape {shape}, not 2-D"
        msg = f"{side.role}: tensor '{_EMBD}' has {rows} rows, the vocabulary {n_vocab} tokens"
        return result("structure.token_embd", "error", msg, **ev)
    if n_embd is not None and shape[0] != n_embd:
        msg = f"{side.role}: tensor '{_EMBD}' has {shape[0]} columns, embedding_length is {n_embd}"
        return result("structure.token_embd", "error", msg, **ev)
    return result("structure.token_embd", "pass", f"{side.role}: '{_EMBD}' is [{n_embd}, {n_vocab}]", **ev)


def blocks(side: Side, rules: RuleSet) -> CheckResult:
    """Blocks 0..block_count-1 each hold the layer tensors the architecture requires; none beyond."""
    s = side.summary
    n_all = s.block_count
    ev: dict[str, object] = {"role": side.role, "block_count": n_all}
    if n_all is None:
        return result("structure.blocks", "info", f"{side.role}: no block_count to check the blocks against", **ev)
    found = _blocks(side)
    beyond = sorted(i for i in found if i >= n_all)
    if beyond:
        name = next(t.name for t in side.file.tensors if t.name.startswith(f"blk.{beyond[0]}."))
        msg = (
            f"{side.role}: tensor '{name}' is in block {beyond[0]}, but block_count is {n_all}: "
            "llama.cpp does not load it and stops (wrong number of tensors)"
        )
        return result("structure.blocks", "error", msg, **ev, blocks_beyond=beyond[:10])
    # block_count is only a claim: the first ten empty blocks lie within len(found) + 10 of 0,
    # and how many are empty is arithmetic (every found index is below n_all here)
    empty = [i for i in range(min(n_all, len(found) + 10)) if i not in found]
    if empty:
        msg = f"{side.role}: block {empty[0]} has no tensors; block_count {n_all} needs blocks 0..{n_all - 1}"
        return result("structure.blocks", "error", msg, **ev, empty_blocks=empty[:10], n_empty=n_all - len(found))
    n_layer = min(n_all, n_all - (s.speculative.nextn_predict_layers or 0))  # every block holds tensors here
    arch = s.architecture or ""
    groups = rules.structure.block_tensors.get(arch, [])
    if not get_int(side.file, F.KEY_EXPERT_COUNT.format(arch=arch)):  # a dense FFN in every layer
        groups = groups + rules.structure.block_tensors_dense.get(arch, [])
    for group in groups:
        options = [alt.split("+") for alt in group]
        lacking = [i for i in range(n_layer) if not any(all(n in found[i] for n in alt) for alt in options)]
        if lacking:
            i = lacking[0]
            first = next((n for n in options[-1] if n not in found[i]), options[-1][0])
            have = n_layer - len(lacking)
            msg = (
                f"{side.role}: missing tensor 'blk.{i}.{first}': {s.architecture} needs it in all {n_layer} "
                f"blocks, {have} have it"
            )
            return result(
                "structure.blocks", "error", msg, **ev, required=group, blocks_lacking=lacking[:10], blocks_with=have
            )
    how = f", {len(groups)} required tensor groups each" if groups else ""
    return result("structure.blocks", "pass", f"{side.role}: blocks 0..{n_all - 1} present{how}", **ev)


def output(side: Side, rules: RuleSet) -> CheckResult:
    s = side.summary
    t = side.tensor(_OUTPUT)
    if t is None:
        return result("structure.output", "pass", f"{side.role}: no '{_OUTPUT}' (tied to '{_EMBD}')")
    shape = _shape(t)
    arch = s.architecture
    if arch in (F.EAGLE3_ARCH, F.DFLASH_ARCH):  # rows follow d2t: judged by eagle3.d2t / dflash.d2t
        return result("structure.output", "pass", f"{side.role}: '{_OUTPUT}' {shape} (rows judged with d2t)")
    if arch not in rules.structure.output_vocab:
        return result("structure.output", "pass", f"{side.role}: '{_OUTPUT}' {shape} (not sized by the vocabulary)")
    rows, basis = s.tokenizer.n_tokens, "vocabulary tokens"
    n_embd = s.embedding_length
    ev = {"role": side.role, "tensor": _OUTPUT, "shape": shape, "expected": [n_embd, rows]}
    if len(shape) != 2 or shape[1] != rows:
        have = shape[1] if len(shape) == 2 else f"shape {shape}, not 2-D"
        return result(
            "structure.output", "error", f"{side.role}: tensor '{_OUTPUT}' has {have} rows, {rows} {basis}", **ev
        )
    if n_embd is not None and shape[0] != n_embd:
        msg = f"{side.role}: tensor '{_OUTPUT}' has {shape[0]} columns, embedding_length is {n_embd}"
        return result("structure.output", "error", msg, **ev)
    return result("structure.output", "pass", f"{side.role}: '{_OUTPUT}' is [{n_embd}, {rows}]", **ev)


def eagle3_head(side: Side) -> CheckResult:
    """EAGLE-3's fc fuses the target's extracted layers: [layers x target_hidden_size, n_embd]."""
    sp, n_embd = side.summary.speculative, side.summary.embedding_length
    layers, hidden = sp.eagle3_target_layers, sp.eagle3_target_hidden_size
    t = side.tensor(_FC)
    if t is None:
        return result("structure.eagle3_head", "error", f"{side.role}: missing tensor '{_FC}'", tensor=_FC)
    shape = _shape(t)
    if layers is None or hidden is None:
        return result("structure.eagle3_head", "info", f"{side.role}: '{_FC}' {shape}; no metadata to size it by")
    want = [len(layers) * hidden, n_embd]
    ev = {"tensor": _FC, "shape": shape, "expected": want, "target_layers": len(layers), "target_hidden": hidden}
    if len(shape) != 2 or shape[0] != want[0]:
        have = shape[0] if shape else "no"
        msg = (
            f"{side.role}: tensor '{_FC}' has {have} input columns, {len(layers)} target layers x "
            f"target_hidden_size {hidden} = {want[0]}"
        )
        return result("structure.eagle3_head", "error", msg, **ev)
    if n_embd is not None and shape[1] != n_embd:
        msg = f"{side.role}: tensor '{_FC}' has {shape[1]} rows, embedding_length is {n_embd}"
        return result("structure.eagle3_head", "error", msg, **ev)
    return result("structure.eagle3_head", "pass", f"{side.role}: '{_FC}' is {want}", **ev)


def mtp_heads(side: Side) -> CheckResult | None:
    """MTP (next-n) tensors live in the last nextn_predict_layers blocks, sized by n_embd."""
    s = side.summary
    n_next = s.speculative.nextn_predict_layers or 0
    names = s.speculative.nextn_tensors
    if not n_next and not names:
        return None
    n_all = s.block_count or 0
    first_head = n_all - n_next
    ev = {"role": side.role, "nextn_predict_layers": n_next, "block_count": n_all}
    for name in names:
        m = _BLOCK.match(name)
        if m and int(m.group(1)) < first_head:
            where = f"{first_head}..{n_all - 1}" if n_next else "none (nextn_predict_layers is 0)"
            msg = f"{side.role}: tensor '{name}' is in block {m.group(1)}; the MTP blocks are {where}"
            return result("structure.mtp_heads", "error", msg, **ev)
    n_embd = s.embedding_length
    for name in names:
        m = _BLOCK.match(name)
        mult = _NEXTN_SHAPES.get(m.group(2)) if m else None
        t = side.tensor(name)
        if mult is None or t is None or n_embd is None:
            continue
        want = [mult * n_embd, n_embd] if mult == 2 else [n_embd]
        if _shape(t) != want:
            msg = f"{side.role}: tensor '{name}' is {_shape(t)}, n_embd {n_embd} needs {want}"
            return result("structure.mtp_heads", "error", msg, **ev, tensor=name, shape=_shape(t), expected=want)
    return result("structure.mtp_heads", "pass", f"{side.role}: {len(names)} MTP tensors in the last {n_next} blocks")


def check_structure(side: Side, rules: RuleSet) -> list[CheckResult]:
    """Every structural check for one file (none for a vocab-only file: it has no tensors)."""
    if side.summary.vocab_only:
        return []
    out = [hparams(side, rules), token_embd(side, rules), blocks(side, rules), output(side, rules)]
    if side.summary.architecture == F.EAGLE3_ARCH:
        out.append(eagle3_head(side))
    mtp = mtp_heads(side)
    if mtp is not None:
        out.append(mtp)
    return out
