"""Derive a rule set's llama.cpp facts from a llama.cpp source tree (maintenance tool).

A new llama.cpp build should be a data change: run
`python -m tools.extract_rules SRC_TREE --base specreg/validators/rules/llama.cpp-bOLD.json
--name llama.cpp-bNNNNN --build NNNNN > specreg/validators/rules/llama.cpp-bNNNNN.json`, review the
diff (`specreg rules diff`), bump `revision` when a shipped file's facts change. The tests run
this on the source trees of the shipped rule sets and compare the output with the files byte for
byte, so a transcription error cannot hide.

It cannot lose a fact quietly: every tokenizer model the vocab loader names, every pre-tokenizer
and every architecture in llama-arch.cpp's table is either extracted or reported as not
understood (file:line), and then the tool exits 1 without printing a rule set.
Never imported on the `check` path.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_NULL = "LLAMA_TOKEN_NULL"
_SPECIALS = ("bos", "eos", "unk", "sep", "pad", "mask")


class NotUnderstood(Exception):
    """Source constructs the extractor cannot read: each names its file and line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(f"{len(problems)} source construct(s) not understood")
        self.problems = problems


@dataclass
class _Source:
    """The tree's files, read once, with a `file:line` locator and the problems found so far."""

    root: Path
    texts: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def text(self, rel: str) -> str:
        if rel not in self.texts:
            self.texts[rel] = (self.root / rel).read_text()
        return self.texts[rel]

    def models(self) -> list[tuple[str, str]]:
        """(relative path, text) of every src/models/*.cpp, sorted."""
        return [
            (f"src/models/{f.name}", self.text(f"src/models/{f.name}"))
            for f in sorted((self.root / "src" / "models").glob("*.cpp"))
        ]

    def where(self, rel: str, needle: str, start: int = 0) -> str:
        text = self.text(rel)
        i = text.find(needle, start)
        return f"{rel}:{text.count(chr(10), 0, i) + 1}" if i >= 0 else rel

    def problem(self, rel: str, needle: str, what: str, start: int = 0) -> None:
        self.problems.append(f"{self.where(rel, needle, start)}: {what}")


def _between(text: str, start: str, end: str) -> str:
    i = text.index(start)
    return text[i : text.index(end, i)]


def _branches(block: str, var: str) -> list[tuple[list[str], str]]:
    """`if (var == "a" || var == "b") { body }` chains -> [([a, b], body), ...]."""
    name = re.escape(var)
    head = re.compile(rf"if\s*\(\s*((?:{name}\s*==\s*\"[^\"]*\"\s*(?:\|\|\s*)?)+)\)\s*\{{")
    matches = list(head.finditer(block))
    out = []
    for k, m in enumerate(matches):
        names = re.findall(r"\"([^\"]*)\"", m.group(1))
        body_end = matches[k + 1].start() if k + 1 < len(matches) else len(block)
        out.append((names, block[m.end() : body_end]))
    return out


def _specials(body: str) -> dict[str, int | None]:
    found: dict[str, int | None] = {}
    for name, value in re.findall(r"special_(\w+?)_id\s*=\s*(\w+)\s*;", body):
        if name in _SPECIALS:
            found[name] = None if value == _NULL else int(value)
    return found


def _flags(body: str) -> dict[str, bool]:
    return {k: v == "true" for k, v in re.findall(r"\b(add_bos|add_eos|add_sep)\s*=\s*(true|false)\s*;", body)}


def _vocab_types(names: list[str], body: str) -> dict[str, str] | None:
    """Each name's vocab type: `type = LLAMA_VOCAB_TYPE_X;`, or per name from a ternary
    `type = tokenizer_model == "a" ? LLAMA_VOCAB_TYPE_X : LLAMA_VOCAB_TYPE_Y;` (None: neither)."""
    plain = re.search(r"\btype\s*=\s*LLAMA_VOCAB_TYPE_(\w+)\s*;", body)
    if plain:
        return dict.fromkeys(names, plain.group(1))
    tern = re.search(
        r"\btype\s*=\s*tokenizer_model\s*==\s*\"([^\"]+)\"\s*\?\s*LLAMA_VOCAB_TYPE_(\w+)\s*:\s*LLAMA_VOCAB_TYPE_(\w+)\s*;",
        body,
    )
    if tern:
        return {n: tern.group(2) if n == tern.group(1) else tern.group(3) for n in names}
    return None


_VOCAB = "src/llama-vocab.cpp"


def _vocab_rules(src: _Source) -> dict[str, Any]:
    vocab_cpp = src.text(_VOCAB)
    load = _between(vocab_cpp, "void llama_vocab::impl::load(", "\nvoid llama_vocab::impl::")
    models_part = _between(load, "// determine vocab type", "// for now, only BPE models have pre-tokenizers")
    pre_part = _between(
        load, "// for now, only BPE models have pre-tokenizers", "ml.get_key(LLM_KV_TOKENIZER_ADD_PREFIX"
    )
    bpe_part, _, per_type_part = pre_part.partition("} else if (type == LLAMA_VOCAB_TYPE_SPM)")
    per_type_part = "} else if (type == LLAMA_VOCAB_TYPE_SPM)" + per_type_part
    base = vocab_cpp.index(models_part)

    # names are only read from `== "x"`: any other way of matching them (`!=`, `.find(...)`, ...) is a problem
    for part in (models_part, bpe_part):
        for m in re.finditer(r"\btokenizer_(?:model|pre)\s*(?:!=|\.(?!c_str\(|empty\()\w+\()", part):
            src.problem(_VOCAB, m.group(0), f"tokenizer name matched by {m.group(0)!r}: not understood", base)
    per_type: dict[str, dict[str, bool]] = {}
    for m in re.finditer(r"type\s*==\s*LLAMA_VOCAB_TYPE_(\w+)\)\s*\{(.*?)\}", per_type_part, re.S):
        per_type[m.group(1)] = _flags(m.group(2))

    models: dict[str, dict[str, Any]] = {}
    reported: set[str] = set()
    for names, body in _branches(models_part, "tokenizer_model"):
        types = _vocab_types(names, body)
        if types is None:
            for name in names:
                src.problem(_VOCAB, f'"{name}"', f"tokenizer model {name!r}: no vocab type assignment understood", base)
            reported.update(names)
            continue
        for name in names:
            vtype = types[name]
            entry: dict[str, Any] = {"type": vtype}
            entry.update({k: None for k in _SPECIALS})
            entry.update(_specials(body))
            entry.update({"add_bos": False, "add_eos": False, "add_sep": False})
            entry.update(_flags(body))
            entry.update(per_type.get(vtype, {}))
            forced = re.search(r"tokenizer_pre\s*=\s*\"([^\"]+)\"\s*;", body)
            entry["force_pre"] = forced.group(1) if forced else None
            entry["requires_merges"] = "cannot find tokenizer merges" in body
            models[name] = entry
    for name in re.findall(r"tokenizer_model\s*==\s*\"([^\"]+)\"", models_part):
        if name not in models and name not in reported:
            src.problem(_VOCAB, f'"{name}"', f"tokenizer model {name!r} named outside an understood branch", base)

    pres: dict[str, dict[str, Any]] = {}
    pre_base = vocab_cpp.index(bpe_part)
    for names, body in _branches(bpe_part, "tokenizer_pre"):
        pt = re.search(r"pre_type\s*=\s*LLAMA_VOCAB_PRE_TYPE_(\w+)\s*;", body)
        if not pt:
            for name in names:
                src.problem(_VOCAB, f'"{name}"', f"pre-tokenizer {name!r}: no pre_type assignment understood", pre_base)
            reported.update(names)
            continue
        entry = {"pre_type": pt.group(1)}
        entry.update(_flags(body))
        entry.update(_specials(body))
        for name in names:
            pres[name] = entry
    for name in re.findall(r"tokenizer_pre\s*==\s*\"([^\"]+)\"", bpe_part):
        if name not in pres and name not in reported:
            src.problem(_VOCAB, f'"{name}"', f"pre-tokenizer {name!r} named outside an understood branch", pre_base)

    keys = _between(load, "// Handle add_bos, add_eos and add_sep", "// BertNormalizer options")
    forced_bos = re.findall(r"pre_type\s*==\s*LLAMA_VOCAB_PRE_TYPE_(\w+)\s*&&\s*!add_bos", keys)

    def texts(marker: str) -> list[str]:
        block = _between(load, f"if ({marker} == LLAMA_TOKEN_NULL)", "}")
        return re.findall(r"t\.first\s*==\s*\"([^\"]*)\"", block)

    return {
        "tokenizer_models": dict(sorted(models.items())),
        "bpe_pre_tokenizers": dict(sorted(pres.items())),
        "bpe_missing_pre": "DEFAULT",
        "add_bos_forced_pre_types": forced_bos,
        "empty_token_text": "[EMPTY_{id}]" if '"[EMPTY_" + std::to_string(i) + "]"' in load else None,
        "eot_texts": texts("special_eot_id"),
        "eom_texts": texts("special_eom_id"),
    }


def _vocab_type_ids(src: _Source) -> dict[str, int]:
    """`enum llama_vocab_type` in include/llama.h: the ids `tokenizer.ggml.model` maps to."""
    enum = _between(src.text("include/llama.h"), "enum llama_vocab_type {", "};")
    return {name: int(v) for name, v in re.findall(r"LLAMA_VOCAB_TYPE_(\w+)\s*=\s*(\d+)", enum)}


def _arch_names(arch_cpp: str) -> dict[str, str]:
    return dict(re.findall(r"\{\s*LLM_ARCH_(\w+),\s*\"([^\"]+)\"\s*\}", arch_cpp))


def _mapping(model_cpp: str) -> dict[str, list[str]]:
    """llama_model_X class -> the LLM_ARCH_* enums `llama_model_mapping` creates it for."""
    i = model_cpp.find("llama_model_mapping(llm_arch")
    if i >= 0:
        model_cpp = _body(model_cpp, model_cpp.index("{", i))
    out: dict[str, list[str]] = {}
    pending: list[str] = []
    for line in model_cpp.splitlines():
        case = re.search(r"case LLM_ARCH_(\w+):", line)
        if case:
            pending.append(case.group(1))
        new = re.search(r"return new (llama_model_\w+)\(", line)
        if new:
            out.setdefault(new.group(1), []).extend(pending)
            pending = []
        elif not case and line.strip() and not line.strip().startswith("//") and ("return" in line or "break" in line):
            pending = []
    return out


@dataclass
class _Classes:
    """Which architectures run each class's `load_arch_tensors` / `load_arch_hparams` / `build_arch_graph`:
    the class's own, plus those of subclasses (models.h `struct A : public B`) that do not override it."""

    names: dict[str, str]  # LLM_ARCH_X -> "name"
    created: dict[str, list[str]]  # class -> LLM_ARCH_X it is created for
    bases: dict[str, str]  # class -> its base class
    defines: dict[str, set[str]]  # method -> classes whose source defines it

    def archs(self, cls: str, method: str) -> list[str]:
        """Architecture names whose `method` is `cls`'s definition."""
        out = []
        for c, enums in self.created.items():
            k: str | None = c
            while k is not None and k not in self.defines[method]:
                k = self.bases.get(k)
            if k == cls:
                out += [self.names[a] for a in enums if a in self.names]
        return out


_METHODS = ("load_arch_tensors", "load_arch_hparams", "build_arch_graph")


def _classes(src: _Source) -> _Classes:
    header = src.text("src/models/models.h")
    bases = dict(re.findall(r"struct\s+(llama_model_\w+)\s*:\s*public\s+(llama_model_\w+)", header))
    defines: dict[str, set[str]] = {m: set() for m in _METHODS}
    for _, text in src.models():
        for m in re.finditer(r"(llama_model_\w+)::(\w+)\(", text):
            if m.group(2) in defines:
                defines[m.group(2)].add(m.group(1))
    names = _arch_names(src.text("src/llama-arch.cpp"))
    return _Classes(names, _mapping(src.text("src/llama-model.cpp")), bases, defines)


def _check_archs(src: _Source, cls: _Classes) -> None:
    """Every architecture in the table is created by llama_model_mapping with a tensor loader, or is
    one llama.cpp cannot create (the mapping's default throws): anything else is not understood."""
    model_cpp = src.text("src/llama-model.cpp")
    mapping = model_cpp[model_cpp.find("llama_model_mapping(llm_arch") :]
    throws = re.search(r"default:\s*throw\b", mapping[: mapping.find("\n}")]) is not None
    created = {a: c for c, enums in cls.created.items() for a in enums}
    for enum, name in cls.names.items():
        if enum == "UNKNOWN":
            continue
        c = created.get(enum)
        if c is None:
            if not throws:
                src.problem(
                    "src/llama-arch.cpp", f"LLM_ARCH_{enum},", f"architecture {name!r}: not in llama_model_mapping"
                )
            continue  # llama.cpp refuses the architecture: no rule needed
        k: str | None = c
        while k is not None and k not in cls.defines["load_arch_tensors"]:
            k = cls.bases.get(k)
        if k is None:
            src.problem("src/llama-model.cpp", f"new {c}(", f"architecture {name!r}: no load_arch_tensors for {c}")


def _mtp_rules(src: _Source, cls: _Classes) -> dict[str, Any]:
    archs: set[str] = set()
    for _, text in src.models():
        for m in re.finditer(r"(llama_model_\w+)::build_arch_graph\(.*?\)\s*const\s*\{(.*?)\n\}", text, re.S):
            body = m.group(2)
            mtp = re.search(r"LLM_GRAPH_TYPE_DECODER_MTP\)\s*\{(.*?)\}", body, re.S)
            if mtp and "make_unique<graph_mtp>" in mtp.group(1):
                archs.update(cls.archs(m.group(1), "build_arch_graph"))
    # required per-layer tensors: the ones every MTP loader creates without TENSOR_NOT_REQUIRED
    qwen = src.text("src/models/qwen35.cpp")
    arch_cpp = src.text("src/llama-arch.cpp")
    required = []
    for kind, suffix in re.findall(r"tn\(LLM_TENSOR_NEXTN_(\w+),\s*\"(\w+)\",\s*il\)[^;]*?mtp_flags\)", qwen):
        tmpl = re.search(rf"\{{\s*LLM_TENSOR_NEXTN_{kind},\s*\"([^\"]+)\"", arch_cpp)
        if tmpl:
            required.append(tmpl.group(1).replace("%d", "{il}") + "." + suffix)
    return {"architectures": sorted(archs), "required_tensors": required}


def _speculative_rules(root: Path) -> dict[str, Any]:
    spec = (root / "common" / "speculative.cpp").read_text()

    def define(name: str) -> int:
        m = re.search(rf"#define\s+{name}\s+(\d+)", spec)
        if not m:
            raise ValueError(f"{name} not found in common/speculative.cpp")
        return int(m.group(1))

    eagle = (root / "src" / "models" / "eagle3.cpp").read_text()
    n_layers = re.search(r"target_layer_ids\.size\(\)\s*!=\s*(\d+)", eagle)
    dflash = (root / "src" / "models" / "dflash.cpp").read_text()
    markov = re.search(r"get_tensor_meta\(\"(markov_\w+\.weight)\"\)", dflash)
    block = re.search(r"read the trained block size.*?block_size\s*=\s*(\d+);", spec, re.S)
    return {
        "draft_simple": {
            "max_size_difference": define("SPEC_VOCAB_MAX_SIZE_DIFFERENCE"),
            "check_start_token_id": define("SPEC_VOCAB_CHECK_START_TOKEN_ID"),
            "texts_compared_as_c_strings": "std::strcmp(token_text_tgt, token_text_dft)" in spec,
        },
        "eagle3_n_target_layers": int(n_layers.group(1)) if n_layers else None,
        "eagle3_final_layer_allowed": "target_layer_ids[k] == n_layer_tgt" in spec,
        "dspark_tensor": markov.group(1) if markov else None,
        "dflash_default_block_size": int(block.group(1)) if block else None,
    }


def _final_layer_archs(src: _Source, cls: _Classes) -> list[str]:
    """Target architectures whose graph exposes the input of layer n_layer (the final hidden state)."""
    out: set[str] = set()
    for _, text in src.models():
        if re.search(r"t_layer_inp\[n_layer\]\s*=", text):
            for c in set(re.findall(r"(llama_model_\w+)::build_arch_graph\(", text)):
                out.update(cls.archs(c, "build_arch_graph"))
    return sorted(out)


def _body(text: str, open_brace: int) -> str:
    """The text between the brace at `open_brace` and its match."""
    depth = 0
    for i in range(open_brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_brace + 1 : i]
    raise ValueError("unbalanced braces")


def _top_level(body: str) -> list[str]:
    """Statements of `body` outside nested blocks, minus conditional ones (`if (x) stmt;`).

    Braces inside parentheses are initializer lists (`{n_embd}`), kept as text; braces at
    statement level open blocks (`if (..) {`, `else {`), which are left out.
    """
    flat, depth, parens = [], 0, 0
    for ch in body:
        if depth == 0:
            parens += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "{" and (depth or parens == 0):
            depth += 1
            if depth == 1:  # a nested block ends the statement before it
                flat.append(";")
        elif ch == "}" and depth:
            depth -= 1
        elif depth == 0:
            flat.append(ch)
    statements = [re.sub(r"//[^\n]*", "", st).strip() for st in "".join(flat).split(";")]
    return [st for st in statements if st and not re.match(r"(if|else|for|while|switch)\b", st) and "?" not in st]


def _required(statements: list[str], suffix: Any) -> list[list[str]]:
    """Groups of required layer tensors among unconditional statements (flags exactly 0)."""
    out: list[list[str]] = []
    for st in statements:
        one = re.search(
            r"create_tensor\(\s*tn\(LLM_TENSOR_(\w+),\s*\"(\w+)\",\s*\w+\)\s*,\s*\{[^}]*\}\s*,\s*0\s*\)", st
        )
        name = suffix(one.group(1), one.group(2)) if one else None
        if name:
            out.append([name])
        elif re.search(r"create_tensor_qkv\([^;]*,\s*0\s*\)$", st):
            out.append(["attn_qkv.weight", "attn_q.weight+attn_k.weight+attn_v.weight"])
    return out


_VOCAB_SHAPE = r"\{\s*n_embd\s*,\s*n_vocab\s*\}"
_LOOP = re.compile(r"for\s*\(\s*int\s+(\w+)\s*=\s*([^;]+?)\s*;\s*\1\s*<\s*([^;]+?)\s*;\s*\+\+\1\s*\)\s*\{")
# layer loops over other blocks than blk.0..n_layer-1, and why they give no whole-model rule
_OTHER_LOOPS = {
    ("n_layer", "n_layer_all"): "the MTP blocks after the main ones (judged by structure.mtp_heads)",
    ("0", "n_layer_all"): "main and MTP blocks together, tensors created with per-block flags",
    ("0", "n_layer_nextn"): "an assistant head's own blocks",
    ("0", "n_phys"): "nanbeige's physical blocks, repeated by loops (block_count is not n_layer)",
    ("0", "head_layers.size()"): "clef's head layers (dec.* tensors, not blk.*)",
    ("0", "hparams.n_hrm_h_cycles"): "hrm_text's passes over its two stacks (blocks aliased between passes)",
    ("0", "dec_n_layer"): "the decoder's dec.blk.* blocks",
}


# create_tensor_qkv(layer, i, n_embd, Q, K, V, 0) with widths from the first layer's head counts
# (LLAMA_LOAD_LOCALS): each of Q, K, V one of these expressions, named for the rule set
_QKV_WIDTHS = {
    "n_embd": "n_embd",
    "n_embd_head_k * n_head": "head_k*n_head",
    "n_embd_k_gqa": "head_k*n_head_kv",
    "n_embd_v_gqa": "head_v*n_head_kv",
    "n_embd_gqa": "head_v*n_head_kv",  # LLAMA_LOAD_LOCALS: n_embd_gqa = n_embd_v_gqa
}
_QKV_CALL = r"create_tensor_qkv\(\s*layer\s*,\s*i\s*,\s*n_embd\s*,([^,]+),([^,]+),([^,]+),\s*0\s*\)"


def _qkv_widths(statement: str) -> list[str] | None:
    m = re.fullmatch(_QKV_CALL, statement.strip())
    if m is None:
        return None
    names = [_QKV_WIDTHS.get(re.sub(r"\s+", " ", g.strip())) for g in m.groups()]
    return None if None in names else [n for n in names if n is not None]


def _layer_groups(
    src: _Source, rel: str, body: str, at: int, suffix: Any
) -> tuple[list[list[str]], list[list[str]], list[str] | None]:
    """(required, dense-only) tensor groups of every main block, and the q/k/v widths when every
    block's q/k/v are sized by the head counts alone (llama_model_base::create_tensor_qkv).

    Loops at the loader's top level: `0..n_layer` states what every block needs; a split
    `0..n_layer - E` + `n_layer - E..n_layer` (a decision head's last blocks) gives what both halves
    need; the bounds in _OTHER_LOOPS are other blocks; any other bound is not understood."""
    loops = [m for m in _LOOP.finditer(body) if body[: m.start()].count("{") == body[: m.start()].count("}")]
    aliases = dict(re.findall(r"const\s+int\s+(\w+)\s*=\s*(n_layer\s*-\s*[^;]+?)\s*;", body))

    def norm(bound: str) -> str:
        bound = aliases.get(bound.strip(), bound.strip())
        return re.sub(r"\s+", " ", re.sub(r"\(\s*int\s*\)\s*", "", bound))

    required: list[list[str]] | None = None
    dense: list[list[str]] = []
    qkv: list[str] | None = None
    for loop in loops:
        lo, hi = norm(loop.group(2)), norm(loop.group(3))
        split = re.fullmatch(r"n_layer - (.+)", hi) if lo == "0" else None
        if (lo, hi) in _OTHER_LOOPS or (re.fullmatch(r"n_layer - (.+)", lo) and hi == "n_layer"):
            continue  # other blocks, or the second half of a split (read with the first)
        if not (lo == "0" and hi == "n_layer") and not split:
            src.problem(rel, loop.group(0), f"layer loop {lo}..{hi} not understood", at)
            continue
        groups, more = _loop_groups(body, loop, suffix)
        layer = _body(body, loop.end() - 1).split("continue")[0]
        qkv = qkv or next(filter(None, map(_qkv_widths, _top_level(layer))), None)
        if split:  # the other half's needs, wherever it is (inside `if (E > 0)`: both halves then)
            tail = next(
                (m for m in _LOOP.finditer(body) if norm(m.group(2)) == hi and norm(m.group(3)) == "n_layer"), None
            )
            if tail is None:
                src.problem(rel, loop.group(0), f"layer loop 0..{hi} without its {hi}..n_layer half", at)
                continue
            other = _loop_groups(body, tail, suffix)[0]
            groups, more = [g for g in groups if g in other], []
        required = groups if required is None else required + groups
        dense += more
    return required or [], dense, qkv


def _loop_groups(body: str, loop: re.Match[str], suffix: Any) -> tuple[list[list[str]], list[list[str]]]:
    layer = _body(body, loop.end() - 1).split("continue")[0]  # after a `continue`: some layers only
    groups = _required(_top_level(layer), suffix)
    dense: list[list[str]] = []
    # `if (n_expert == 0) { dense FFN } else { experts }` at the loop's top level
    branch = re.search(r"(?:^|[;}\s])if\s*\(\s*n_expert\s*==\s*0\s*\)\s*\{", layer)
    if branch and layer[: branch.end()].count("{") - layer[: branch.end()].count("}") == 1:
        dense = _required(_top_level(_body(layer, branch.end() - 1)), suffix)
    return groups, dense


def _structure_rules(src: _Source, cls: _Classes) -> dict[str, Any]:
    """Per architecture: the tensors its loader requires in every layer (created with flags 0 at the
    top level of the layer loop, never inside a condition), and which archs size token_embd /
    output by the vocabulary. A sound under-approximation: a tensor listed here is one llama.cpp
    cannot load the model without."""
    arch_cpp = src.text("src/llama-arch.cpp")
    tensors = dict(re.findall(r"\{\s*LLM_TENSOR_(\w+),\s*\"([^\"]+)\"\s*\}", arch_cpp))

    def suffix(kind: str, part: str) -> str | None:
        name = tensors.get(kind)
        return None if name is None or not name.startswith("blk.%d.") else f"{name[7:]}.{part}"

    blocks: dict[str, list[list[str]]] = {}
    blocks_dense: dict[str, list[list[str]]] = {}
    embd_required: set[str] = set()
    embd_vocab: set[str] = set()
    output_vocab: set[str] = set()
    standard_qkv: dict[str, list[str]] = {}
    for rel, text in src.models():
        for m in re.finditer(r"void (llama_model_\w+)::load_arch_tensors\([^)]*\)\s*\{", text):
            body = _body(text, m.end() - 1)
            archs = cls.archs(m.group(1), "load_arch_tensors")
            embd = re.search(r"tn\(LLM_TENSOR_TOKEN_EMBD,\s*\"weight\"\),\s*" + _VOCAB_SHAPE + r"\s*,\s*(\w+)\)", body)
            if embd:
                embd_vocab.update(archs)
                if embd.group(1) == "0":
                    embd_required.update(archs)
            if re.search(r"tn\(LLM_TENSOR_OUTPUT,\s*\"weight\"\),\s*" + _VOCAB_SHAPE, body):
                output_vocab.update(archs)
            required, dense, qkv = _layer_groups(src, rel, body, m.start(), suffix)
            for arch in archs:
                if qkv:
                    standard_qkv[arch] = qkv
                if required:
                    blocks[arch] = required
                if dense:
                    blocks_dense[arch] = dense
    return {
        "token_embd_required": sorted(embd_required),
        "token_embd_vocab": sorted(embd_vocab),
        "output_vocab": sorted(output_vocab),
        "block_tensors": dict(sorted(blocks.items())),
        "block_tensors_dense": dict(sorted(blocks_dense.items())),
        "standard_qkv": dict(sorted(standard_qkv.items())),
    }


def _memory_rules(src: _Source, cls: _Classes) -> dict[str, Any]:
    """Per architecture, the sliding-window layer pattern its loader applies when the file names a
    window (`load_swa_pattern(ml, N[, dense_first])`); N = -1: the per-layer array must be in the file."""
    patterns: dict[str, list[int | bool]] = {}
    for _, text in src.models():
        for m in re.finditer(r"void (llama_model_\w+)::load_arch_hparams\([^)]*\)\s*\{", text):
            body = _body(text, m.end() - 1)
            call = re.search(
                r"(?:load_swa_pattern\(ml,|set_swa_pattern\()\s*(\d+)(?:,\s*(?:/\*\w+=\*/)?(true|false))?\)", body
            )
            if re.search(r"get_arr\(LLM_KV_ATTENTION_SLIDING_WINDOW_PATTERN,\s*hparams\.is_swa_impl\)", body):
                rule: list[int | bool] = [-1, False]
            elif call:
                rule = [int(call.group(1)), call.group(2) == "true"]
            else:
                continue
            for arch in cls.archs(m.group(1), "load_arch_hparams"):
                patterns[arch] = rule
    return {"swa_patterns": dict(sorted(patterns.items()))}


def extract_rules(root: Path) -> dict[str, Any]:
    """The llama.cpp facts a rule set holds, read from the source tree at `root`.

    Raises NotUnderstood (every construct it could not read, file:line) rather than return a rule
    set with a fact missing."""
    src = _Source(root)
    cls = _classes(src)
    _check_archs(src, cls)
    vocab = _vocab_rules(src)
    spec = _speculative_rules(root)
    out = {
        "draft_simple": spec["draft_simple"],
        **vocab,
        "mtp": _mtp_rules(src, cls),
        "structure": _structure_rules(src, cls),
        "memory": _memory_rules(src, cls),
        "eagle3": {
            "architecture": "eagle3",
            "n_target_layers": spec["eagle3_n_target_layers"],
            "final_layer_allowed": spec["eagle3_final_layer_allowed"],
            "d2t_ggml_type": 27,  # GGML_TYPE_I64: GGML_ASSERT(model.d2t->type == GGML_TYPE_I64)
        },
        "dflash": {
            "architecture": "dflash",
            "dspark_tensor": spec["dspark_tensor"],
            "default_block_size": spec["dflash_default_block_size"],
            "final_layer_archs": _final_layer_archs(src, cls),
            "d2t_ggml_type": 27,
        },
        "vocab_type_ids": _vocab_type_ids(src),
    }
    unknown = sorted({t["type"] for t in out["tokenizer_models"].values()} - set(out["vocab_type_ids"]))
    for vtype in unknown:
        src.problem(
            "include/llama.h", "enum llama_vocab_type", f"vocab type {vtype} has no id in enum llama_vocab_type"
        )
    if src.problems:
        raise NotUnderstood(src.problems)
    return out


# the keys of a rule set file that are not llama.cpp facts, in the order the shipped files have them
_HEAD = ("name", "revision", "runtime", "build", "source", "description")
_OWN = ("advisory", "server")  # kept from --base after the facts: specreg's thresholds, the server's names


def rule_set_file(facts: dict[str, Any], base: dict[str, Any], **head: Any) -> dict[str, Any]:
    """A whole rule set: `head` over `base`'s own keys (name, revision, ..., advisory, server), then
    the facts. `server` (what a running server's /metrics, /slots and /props are named) is checked
    against tools/server/ by hand and kept from the base."""
    top = {k: head.get(k, base.get(k)) for k in _HEAD if head.get(k, base.get(k)) is not None}
    return top | facts | {k: base[k] for k in _OWN if k in base}


def main(argv: list[str] | None = None) -> int:
    """Print the facts (or, with --base, a whole rule set file); 1 with the constructs not understood."""
    ap = argparse.ArgumentParser(
        prog="python -m tools.extract_rules",
        description="Extract a specreg rule set's llama.cpp facts from a llama.cpp source tree "
        "(the directory holding src/, common/ and include/).",
    )
    ap.add_argument("source", type=Path, help="llama.cpp source root")
    ap.add_argument("--base", type=Path, help="a rule set file whose own keys (name, advisory, ...) to keep")
    ap.add_argument("--name", help="the new rule set's name, e.g. llama.cpp-b11549")
    ap.add_argument("--build", type=int, help="the llama.cpp build number it mirrors")
    ap.add_argument("--revision", type=int, help="the rule set's revision")
    ap.add_argument("--source-label", dest="source_label", help="where the tree came from (the `source` key)")
    ap.add_argument("--description", help="the `description` key")
    args = ap.parse_args(argv)
    if not (args.source / "src" / "llama-vocab.cpp").is_file():
        ap.error(f"{args.source}: no src/llama-vocab.cpp (not a llama.cpp source root)")
    try:
        facts = extract_rules(args.source)
    except NotUnderstood as exc:
        for line in exc.problems:
            sys.stderr.write(f"error: {line}\n")
        sys.stderr.write(f"error: {exc}; no rule set written\n")
        return 1
    if args.base is not None:
        head = {"name": args.name, "build": args.build, "revision": args.revision}
        head |= {"source": args.source_label, "description": args.description}
        base = json.loads(args.base.read_text(encoding="utf-8"))
        facts = rule_set_file(facts, base, **{k: v for k, v in head.items() if v is not None})
    json.dump(facts, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    sys.exit(main())
