"""Derive a rule set's llama.cpp facts from a llama.cpp source tree (maintenance tool).

A new llama.cpp build should be a data change: run
`python tools/extract_rules.py SRC_TREE > specreg/validators/rules/llama.cpp-bNNNNN.json`, review the
diff, keep the `advisory` block, bump `revision`. The tests compare the shipped rule set with
what this extracts from the source tree in the cache, so a transcription error cannot hide.
Never imported on the `check` path.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

_NULL = "LLAMA_TOKEN_NULL"
_SPECIALS = ("bos", "eos", "unk", "sep", "pad", "mask")


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


def _vocab_rules(vocab_cpp: str) -> dict[str, Any]:
    load = _between(vocab_cpp, "void llama_vocab::impl::load(", "\nvoid llama_vocab::impl::")
    models_part = _between(load, "// determine vocab type", "// for now, only BPE models have pre-tokenizers")
    pre_part = _between(
        load, "// for now, only BPE models have pre-tokenizers", "ml.get_key(LLM_KV_TOKENIZER_ADD_PREFIX"
    )
    bpe_part, _, per_type_part = pre_part.partition("} else if (type == LLAMA_VOCAB_TYPE_SPM)")
    per_type_part = "} else if (type == LLAMA_VOCAB_TYPE_SPM)" + per_type_part

    per_type: dict[str, dict[str, bool]] = {}
    for m in re.finditer(r"type\s*==\s*LLAMA_VOCAB_TYPE_(\w+)\)\s*\{(.*?)\}", per_type_part, re.S):
        per_type[m.group(1)] = _flags(m.group(2))

    models: dict[str, dict[str, Any]] = {}
    for names, body in _branches(models_part, "tokenizer_model"):
        t = re.search(r"type\s*=\s*LLAMA_VOCAB_TYPE_(\w+)\s*;", body)
        if not t:
            continue
        vtype = t.group(1)
        entry: dict[str, Any] = {"type": vtype}
        entry.update({k: None for k in _SPECIALS})
        entry.update(_specials(body))
        entry.update({"add_bos": False, "add_eos": False, "add_sep": False})
        entry.update(_flags(body))
        entry.update(per_type.get(vtype, {}))
        forced = re.search(r"tokenizer_pre\s*=\s*\"([^\"]+)\"\s*;", body)
        entry["force_pre"] = forced.group(1) if forced else None
        entry["requires_merges"] = "cannot find tokenizer merges" in body
        for name in names:
            models[name] = dict(entry)

    pres: dict[str, dict[str, Any]] = {}
    for names, body in _branches(bpe_part, "tokenizer_pre"):
        pt = re.search(r"pre_type\s*=\s*LLAMA_VOCAB_PRE_TYPE_(\w+)\s*;", body)
        entry = {"pre_type": pt.group(1) if pt else None}
        entry.update(_flags(body))
        entry.update(_specials(body))
        for name in names:
            pres[name] = entry

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


def _arch_names(arch_cpp: str) -> dict[str, str]:
    return dict(re.findall(r"\{\s*LLM_ARCH_(\w+),\s*\"([^\"]+)\"\s*\}", arch_cpp))


def _class_archs(model_cpp: str) -> dict[str, list[str]]:
    """llama_model_X class -> the LLM_ARCH_* enums whose case returns it."""
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


def _mtp_rules(root: Path) -> dict[str, Any]:
    src = root / "src"
    names = _arch_names((src / "llama-arch.cpp").read_text())
    class_archs = _class_archs((src / "llama-model.cpp").read_text())
    archs: set[str] = set()
    for f in sorted((src / "models").glob("*.cpp")):
        text = f.read_text()
        for m in re.finditer(r"(llama_model_\w+)::build_arch_graph\(.*?\)\s*const\s*\{(.*?)\n\}", text, re.S):
            body = m.group(2)
            mtp = re.search(r"LLM_GRAPH_TYPE_DECODER_MTP\)\s*\{(.*?)\}", body, re.S)
            if mtp and "make_unique<graph_mtp>" in mtp.group(1):
                archs.update(names[a] for a in class_archs.get(m.group(1), []) if a in names)
    # required per-layer tensors: the ones every MTP loader creates without TENSOR_NOT_REQUIRED
    qwen = (src / "models" / "qwen35.cpp").read_text()
    required = []
    for kind, suffix in re.findall(r"tn\(LLM_TENSOR_NEXTN_(\w+),\s*\"(\w+)\",\s*il\)[^;]*?mtp_flags\)", qwen):
        tmpl = re.search(rf"\{{\s*LLM_TENSOR_NEXTN_{kind},\s*\"([^\"]+)\"", (src / "llama-arch.cpp").read_text())
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


def _final_layer_archs(root: Path) -> list[str]:
    """Target architectures whose graph exposes the input of layer n_layer (the final hidden state)."""
    src = root / "src"
    names = _arch_names((src / "llama-arch.cpp").read_text())
    class_archs = _class_archs((src / "llama-model.cpp").read_text())
    out: set[str] = set()
    for f in sorted((src / "models").glob("*.cpp")):
        text = f.read_text()
        if re.search(r"t_layer_inp\[n_layer\]\s*=", text):
            for cls in set(re.findall(r"(llama_model_\w+)::", text)):
                out.update(names[a] for a in class_archs.get(cls, []) if a in names)
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


def _structure_rules(root: Path) -> dict[str, Any]:
    """Per architecture: the tensors its loader requires in every layer (created with flags 0 at the
    top level of the layer loop, never inside a condition), and which archs size token_embd /
    output by the vocabulary. A sound under-approximation: a tensor listed here is one llama.cpp
    cannot load the model without."""
    src = root / "src"
    arch_cpp = (src / "llama-arch.cpp").read_text()
    names = _arch_names(arch_cpp)
    tensors = dict(re.findall(r"\{\s*LLM_TENSOR_(\w+),\s*\"([^\"]+)\"\s*\}", arch_cpp))
    class_archs = _class_archs((src / "llama-model.cpp").read_text())

    def suffix(kind: str, part: str) -> str | None:
        name = tensors.get(kind)
        return None if name is None or not name.startswith("blk.%d.") else f"{name[7:]}.{part}"

    blocks: dict[str, list[list[str]]] = {}
    blocks_dense: dict[str, list[list[str]]] = {}
    embd_required: set[str] = set()
    embd_vocab: set[str] = set()
    output_vocab: set[str] = set()
    standard_qkv: dict[str, list[str]] = {}
    for f in sorted((src / "models").glob("*.cpp")):
        text = f.read_text()
        for m in re.finditer(r"void (llama_model_\w+)::load_arch_tensors\([^)]*\)\s*\{", text):
            body = _body(text, m.end() - 1)
            archs = [names[a] for a in class_archs.get(m.group(1), []) if a in names]
            embd = re.search(r"tn\(LLM_TENSOR_TOKEN_EMBD,\s*\"weight\"\),\s*" + _VOCAB_SHAPE + r"\s*,\s*(\w+)\)", body)
            if embd:
                embd_vocab.update(archs)
                if embd.group(1) == "0":
                    embd_required.update(archs)
            if re.search(r"tn\(LLM_TENSOR_OUTPUT,\s*\"weight\"\),\s*" + _VOCAB_SHAPE, body):
                output_vocab.update(archs)
            required: list[list[str]] = []
            dense: list[list[str]] = []
            qkv: list[str] | None = None
            loops = r"for\s*\(\s*int\s+(\w+)\s*=\s*0;\s*\1\s*<\s*n_layer;\s*\+\+\1\s*\)\s*\{"
            for loop in re.finditer(loops, body):
                if body[: loop.start()].count("{") != body[: loop.start()].count("}"):
                    continue  # a loop inside a condition (another variant of the architecture)
                layer = _body(body, loop.end() - 1).split("continue")[0]  # after a `continue`: some layers only
                required += _required(_top_level(layer), suffix)
                # every layer's q/k/v sized by the head counts alone (llama_model_base::create_tensor_qkv)
                qkv = qkv or next(filter(None, map(_qkv_widths, _top_level(layer))), None)
                # `if (n_expert == 0) { dense FFN } else { experts }` at the loop's top level
                branch = re.search(r"(?:^|[;}\s])if\s*\(\s*n_expert\s*==\s*0\s*\)\s*\{", layer)
                if branch and layer[: branch.end()].count("{") - layer[: branch.end()].count("}") == 1:
                    dense += _required(_top_level(_body(layer, branch.end() - 1)), suffix)
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


def _memory_rules(root: Path) -> dict[str, Any]:
    """Per architecture, the sliding-window layer pattern its loader applies when the file names a
    window (`load_swa_pattern(ml, N[, dense_first])`); N = -1: the per-layer array must be in the file."""
    src = root / "src"
    names = _arch_names((src / "llama-arch.cpp").read_text())
    class_archs = _class_archs((src / "llama-model.cpp").read_text())
    patterns: dict[str, list[int | bool]] = {}
    for f in sorted((src / "models").glob("*.cpp")):
        text = f.read_text()
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
            for arch in (names[a] for a in class_archs.get(m.group(1), []) if a in names):
                patterns[arch] = rule
    return {"swa_patterns": dict(sorted(patterns.items()))}


def extract_rules(root: Path) -> dict[str, Any]:
    """The llama.cpp facts a rule set holds, read from the source tree at `root`."""
    vocab = _vocab_rules((root / "src" / "llama-vocab.cpp").read_text())
    spec = _speculative_rules(root)
    return {
        "draft_simple": spec["draft_simple"],
        **vocab,
        "mtp": _mtp_rules(root),
        "structure": _structure_rules(root),
        "memory": _memory_rules(root),
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
            "final_layer_archs": _final_layer_archs(root),
            "d2t_ggml_type": 27,
        },
    }


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    json.dump(extract_rules(Path(sys.argv[1])), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
