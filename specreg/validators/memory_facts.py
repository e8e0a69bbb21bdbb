"""What a file's header says its server's memory depends on: its shape and its tokenizer's heap.

The memory arithmetic (memory_budget.py, memory_served.py) works on `ModelFacts`, never on a
file: this module reads them, once per open file and rule set. Shape facts are llama.cpp's
hyper-parameters with its defaults where a key is missing (per-layer head counts, sliding-window
layers by the file's array or the architecture's rule, MLA latents, experts, a mamba state).
The tokenizer's heap is what llama-vocab.cpp builds while loading (token tables, piece cache,
BPE ranks, the UGM byte trie, the metadata's own copy), priced per token, per byte of long token
text, per merge and per trie node by constants fitted to the bundled server's peak RSS over
llama.cpp's vocabulary files; counting them walks the token array, which is why the facts are
cached per file.
"""

from __future__ import annotations

import re
import weakref

from specreg.gguf import format as F
from specreg.gguf.fields import get_int, get_int_list
from specreg.gguf.reader import GGUFArray, GGUFFile
from specreg.validators.kv_cells import ModelFacts
from specreg.validators.ruleset import RuleSet

# the tokenizer's heap, in bytes: per token (id_to_token 40, token_to_id node and bucket, piece
# cache, the GGUF metadata's copy while loading), per byte of token text held out of line
# (std::string keeps 15 bytes inline; several copies), per BPE merge (bpe_ranks node holding two
# strings, the metadata's copy), per node of the UGM tokenizer's byte trie (std::map nodes)
VOCAB_PER_TOKEN = 216
VOCAB_PER_LONG_BYTE = 6
VOCAB_PER_MERGE = 248
VOCAB_PER_TRIE_NODE = 120
VOCAB_RETURNED = 16  # per token and per merge: the metadata copy glibc gives back after the load
# of the fitted heap per token and merge, the share a draft's vocabulary costs again (measured:
# draft-simple over the draft file alone, 32k SPM and 262k gemma-4 vocabularies)
DRAFT_VOCAB_SHARE = 0.85
# architectures whose every layer is recurrent with a mamba state (llm_arch_is_recurrent): no KV
RECURRENT_ARCHS = ("mamba", "mamba2")
_BLOCK = re.compile(r"^blk\.(\d+)\.")


def _per_layer(gf: GGUFFile, key: str, n: int, default: int) -> list[int]:
    if gf.value_types.get(key) == F.T_ARRAY:
        values = get_int_list(gf, key) or []
        return (values + [values[-1] if values else default] * n)[:n]
    v = get_int(gf, key)
    return [default if v is None else v] * n


def _swa_layers(gf: GGUFFile, arch: str, n_layer: int, n_swa: int, rules: RuleSet) -> list[bool]:
    """llama.cpp's is_swa per layer: from the file's array, its int pattern, or the arch's default."""
    if n_swa <= 0:
        return [False] * n_layer
    key = f"{arch}.attention.sliding_window_pattern"
    value = gf.metadata.get(key)
    if isinstance(value, GGUFArray):
        flags = [bool(x) for x in value.to_list()]
        return (flags + [False] * n_layer)[:n_layer]
    rule = rules.memory.swa_patterns.get(arch)
    if rule is None:
        return [False] * n_layer  # the architecture's loader sets no sliding-window layers
    n_pattern, dense_first = rule
    stated = get_int(gf, key)
    if stated is not None:
        n_pattern = stated
    if n_pattern < 0:
        return [False] * n_layer  # the loader needs the per-layer array, which the file lacks
    if dense_first:
        return [n_pattern == 0 or il % n_pattern != 0 for il in range(n_layer)]
    return [n_pattern == 0 or il % n_pattern < n_pattern - 1 for il in range(n_layer)]


def _trie_nodes(arr: GGUFArray) -> int:
    """Nodes of the UGM tokenizer's byte trie over the tokens: their distinct non-empty prefixes,
    counted over the sorted tokens (each adds its length less its common prefix with the one
    before), so time and memory stay linear in the array's bytes whatever a token's length."""
    raw = bytes(arr.raw())
    unpack = F.U64.unpack_from
    tokens = []
    p = 0
    for _ in range(arr.count):
        n = unpack(raw, p)[0]
        tokens.append(raw[p + 8 : p + 8 + n])
        p += 8 + n
    tokens = sorted(set(tokens))
    nodes, prev = 0, b""
    for tok in tokens:
        nodes += len(tok) - _common_prefix(prev, tok)
        prev = tok
    return nodes


def _common_prefix(a: bytes, b: bytes) -> int:
    """Length of the common prefix, by bisection over slice comparisons (each done in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def vocab_heap_bytes(gf: GGUFFile) -> tuple[int, int]:
    """(tokens, heap bytes) of the file's tokenizer as llama.cpp holds it while loading; (0, 0)
    without one."""
    n, heap, _, _ = _vocab_heap(gf)
    return n, heap


def _vocab_heap(gf: GGUFFile) -> tuple[int, int, int, int]:
    """(tokens, heap at load, the metadata's copy of it, the part of that returned to the system)."""
    tokens = gf.metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, GGUFArray) or tokens.item_type != F.T_STRING:
        return 0, 0, 0, 0
    long_bytes = tokens.long_string_heap()
    merges = gf.metadata.get("tokenizer.ggml.merges")
    n_merges = merges.count if isinstance(merges, GGUFArray) else 0
    trie = _trie_nodes(tokens) if gf.metadata.get("tokenizer.ggml.model") == "t5" else 0
    heap = (
        VOCAB_PER_TOKEN * tokens.count
        + VOCAB_PER_LONG_BYTE * long_bytes
        + VOCAB_PER_MERGE * n_merges
        + VOCAB_PER_TRIE_NODE * trie
    )
    # gguf.cpp keeps each string array as std::string elements (32 bytes + long text), scores and
    # types as 4 bytes each; glibc returns part of it when freed (measured: peak RSS less RSS after
    # the load, 0-13 MiB over llama.cpp's vocab files: ~16 bytes per token and per merge)
    meta = 40 * tokens.count + long_bytes + 32 * n_merges
    returned = min(meta, VOCAB_RETURNED * (tokens.count + n_merges))
    return tokens.count, heap, meta, returned


# model_facts per open file and rule set: `check pair` asks for each file's facts twice (the
# estimate, then the budget and memory checks), and each ask walks every token string of the
# vocabulary
_FACTS: weakref.WeakKeyDictionary[GGUFFile, dict[str, ModelFacts]] = weakref.WeakKeyDictionary()


def model_facts(gf: GGUFFile, rules: RuleSet) -> ModelFacts:
    """Shape facts of one file; missing keys fall back to llama.cpp's defaults."""
    known = _FACTS.setdefault(gf, {})
    if rules.id not in known:
        known[rules.id] = _model_facts(gf, rules)
    return known[rules.id]


def _model_facts(gf: GGUFFile, rules: RuleSet) -> ModelFacts:
    from specreg.gguf.summary import summarize

    s = summarize(gf)
    arch = s.architecture or ""
    # per-layer lists are sized by the block count: llama.cpp loads at most LLAMA_MAX_LAYERS blocks
    # (a file claiming more is refused by structure.hparams), so more is never built here
    n_all = max(0, min(s.block_count or 0, F.LLAMA_MAX_LAYERS))
    n_layer = max(0, min(n_all, n_all - (s.speculative.nextn_predict_layers or 0)))
    n_embd = s.embedding_length or 0
    heads = _per_layer(gf, f"{arch}.attention.head_count", n_layer, 1)
    heads_kv = _per_layer(gf, f"{arch}.attention.head_count_kv", n_layer, heads[0] if heads else 1)
    head_k = get_int(gf, f"{arch}.attention.key_length") or (n_embd // max(1, heads[0] if heads else 1))
    head_v = get_int(gf, f"{arch}.attention.value_length") or head_k
    lora = get_int(gf, f"{arch}.attention.kv_lora_rank")
    if lora:  # MLA (DeepSeek-2 style): one latent of kv_lora_rank + rope dims per token, shared by heads
        rope = get_int(gf, f"{arch}.rope.dimension_count") or 64
        heads_kv, head_k, head_v = [1] * n_layer, lora + rope, lora
    ff = max(_per_layer(gf, f"{arch}.feed_forward_length", max(1, n_layer), 0) or [0])
    experts = get_int(gf, f"{arch}.expert_used_count") or 0
    ff = max(ff, (get_int(gf, f"{arch}.expert_feed_forward_length") or 0) * max(1, experts))
    n_swa = get_int(gf, f"{arch}.attention.sliding_window") or 0
    d_state = get_int(gf, f"{arch}.ssm.state_size")
    recurrent_state = 0
    if d_state is not None and arch in RECURRENT_ARCHS:  # llm_arch_is_recurrent, mamba family
        d_inner = get_int(gf, f"{arch}.ssm.inner_size") or 0
        d_conv = get_int(gf, f"{arch}.ssm.conv_kernel") or 0
        groups = get_int(gf, f"{arch}.ssm.group_count") or 0
        n_r = max(0, d_conv - 1) * (d_inner + 2 * groups * d_state)
        recurrent_state = n_all * (n_r + d_state * d_inner) * 4  # f32 rows (GGML_TYPE_F32 R and S)
    layer_weights: dict[int, int] = {}
    for t in gf.tensors:
        m = _BLOCK.match(t.name)
        if m:
            layer_weights[int(m.group(1))] = layer_weights.get(int(m.group(1)), 0) + t.n_bytes
    output = gf.tensor("output.weight") or gf.tensor("token_embd.weight")
    n_vocab, vocab_heap, vocab_meta, vocab_returned = _vocab_heap(gf)
    return ModelFacts(
        arch=s.architecture,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=ff or 4 * n_embd,
        heads_kv=heads_kv,
        head_k=head_k,
        head_v=head_v,
        swa=_swa_layers(gf, arch, n_layer, n_swa, rules),
        n_swa=n_swa,
        weights=sum(t.n_bytes for t in gf.tensors),
        layer_weights=layer_weights,
        output_weights=output.n_bytes if output is not None else 0,
        recurrent=d_state is not None,
        recurrent_state=recurrent_state,
        n_vocab=n_vocab,
        vocab_heap=vocab_heap,
        vocab_meta=vocab_meta,
        vocab_returned=vocab_returned,
        tokenizer=str(gf.metadata.get("tokenizer.ggml.model")) if "tokenizer.ggml.model" in gf.metadata else None,
    )
