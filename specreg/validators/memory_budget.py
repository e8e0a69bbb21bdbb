"""What a llama-server running a pair needs in memory, predicted from the GGUF headers alone.

Mirrors llama.cpp b11434 (llama-context.cpp, llama-kv-cache*.cpp), checked against the buffer
sizes it logs (tests/test_memory_budget.py) and against measured peak RSS
(benchmarks/bench_memory.py):
- weights: every tensor's bytes (by type), target and draft; on CPU the mmap'ed file is read
  each token, so all of it becomes resident;
- KV cache: cells x layers x (K heads x head dim x K type size + the same for V), per layer
  (GQA and per-layer head counts honoured); cells = context over all slots, padded to 256 per
  slot stream; sliding-window layers keep min(cells, window + micro-batch) cells; the draft has
  its own cache of the same cells;
- compute buffer per context: a micro-batch of activations (max(3.5 n_ff + 2.5 n_embd, 7 n_embd)
  floats per token) plus flash attention's f16 mask (cells per stream x micro-batch);
- the server process itself: a constant measured for the bundled server.
- the speculative method's own state where llama.cpp allocates it up front (ngram-mod's table).
Recurrent (SSM) state, an MTP head's own context and the host prompt cache (--cache-ram, filled
as prompts are cached) are not modelled; notes say so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specreg.errors import UsageError
from specreg.gguf import format as F
from specreg.gguf.fields import get_int, get_int_list
from specreg.gguf.reader import GGUFArray, GGUFFile
from specreg.schemas.checks import CheckResult
from specreg.schemas.memory import MemoryEstimate, ServeSettings
from specreg.validators.ruleset import RuleSet

MIB = 1 << 20
# The bundled server (Python + xllamacpp + llama.cpp's runtime, OpenMP pool, slot and prompt-cache
# bookkeeping) with nothing loaded, and each further llama context (the draft's): measured on the
# CPU wheel 2026.10.11549 (peak RSS minus weights, KV and touched compute: 33-36 MiB over the
# conditions of benchmarks/bench_memory.py serving the default workload).
PROCESS_OVERHEAD = 35 * MIB
CONTEXT_OVERHEAD = 5 * MIB // 2
# speculative state llama.cpp allocates up front (common/speculative.cpp: common_ngram_mod(n, 4*1024*1024)
# entries of one llama_token, zero-filled, once per server)
METHOD_STATE = {"ngram-mod": 4 * 1024 * 1024 * 4}
KV_PAD = 256  # llama.cpp pads each stream's cells (and the SWA cache) to 256
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
_TYPE_IDS = {name: tid for tid, (name, _, _) in F.GGML_TYPES.items()}
_BLOCK = re.compile(r"^blk\.(\d+)\.")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*$", re.I)


def _pad(n: int, to: int = KV_PAD) -> int:
    return -(-n // to) * to


def type_size(cache_type: str) -> tuple[int, int]:
    """(block size, bytes per block) of a -ctk/-ctv type; UsageError for anything else."""
    name = cache_type.lower()
    if name not in CACHE_TYPES:
        raise UsageError(f"unknown cache type {cache_type!r}; choose one of {', '.join(CACHE_TYPES)}")
    _, block, size = F.GGML_TYPES[_TYPE_IDS[name.upper()]]
    return block, size


def type_name(cache_type: str) -> str:
    """A -ctk/-ctv value checked and in llama.cpp's spelling (lower case)."""
    type_size(cache_type)
    return cache_type.lower()


def human(n: int) -> str:
    """Bytes for a message: MiB below 1 GiB, else GiB."""
    return f"{n / MIB:,.1f} MiB" if n < 1 << 30 else f"{n / (1 << 30):,.2f} GiB"


def parse_size(text: str) -> int:
    """'24GiB', '24G', '512MB', '1.5TiB', '123456' -> bytes (K/M/G/T: powers of 1024 with 'i' or alone)."""
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"--budget {text!r}: expected a size like 24GiB, 512MiB or a number of bytes")
    value, unit, binary = float(m.group(1)), m.group(2).upper(), m.group(3)
    base = 1024 if binary or not text.strip().upper().endswith("B") else 1000
    return int(value * base ** "_KMGT".index(unit)) if unit else int(value)


@dataclass
class ModelFacts:
    """One file's shape as the memory needs it."""

    arch: str | None
    n_layer: int  # main layers (MTP heads excluded: they run in their own context)
    n_embd: int
    n_ff: int
    heads_kv: list[int]
    head_k: int
    head_v: int
    swa: list[bool]
    n_swa: int
    weights: int
    layer_weights: dict[int, int]
    output_weights: int
    recurrent: bool


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


def model_facts(gf: GGUFFile, rules: RuleSet) -> ModelFacts:
    """Shape facts of one file; missing keys fall back to llama.cpp's defaults."""
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
    layer_weights: dict[int, int] = {}
    for t in gf.tensors:
        m = _BLOCK.match(t.name)
        if m:
            layer_weights[int(m.group(1))] = layer_weights.get(int(m.group(1)), 0) + t.n_bytes
    output = gf.tensor("output.weight") or gf.tensor("token_embd.weight")
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
        recurrent=get_int(gf, f"{arch}.ssm.state_size") is not None,
    )


def cells(settings: ServeSettings) -> tuple[int, int]:
    """(cells per stream, streams): llama.cpp splits -c over -np slots unless the cache is unified."""
    if settings.kv_unified:
        return _pad(settings.ctx_size), 1
    return _pad(max(1, settings.ctx_size // settings.slots)), settings.slots


def _row_bytes(n: int, cache_type: str) -> float:
    block, size = type_size(cache_type)
    return n * size / block


def kv_bytes(f: ModelFacts, s: ServeSettings) -> tuple[int, int, int | None]:
    """(bytes, cells of a full layer, cells of a SWA layer or None): K and V over every main layer."""
    per_stream, streams = cells(s)
    full = per_stream * streams
    swa_cells = None
    if any(f.swa):
        window = f.n_swa * (streams if s.kv_unified else 1) + s.n_ubatch
        swa_cells = _pad(min(per_stream, window)) * streams
    total = 0.0
    for il in range(f.n_layer):
        n = swa_cells if f.swa[il] and swa_cells is not None else full
        kv = f.heads_kv[il] if il < len(f.heads_kv) else f.heads_kv[-1]
        total += n * (_row_bytes(kv * f.head_k, s.cache_type_k) + _row_bytes(kv * f.head_v, s.cache_type_v))
    return int(total), full, swa_cells


def compute_bytes(f: ModelFacts, s: ServeSettings, tokens: int | None = None, kv_used: int | None = None) -> int:
    """Compute buffer of one context; `tokens`/`kv_used` narrow it to what a short request touches."""
    t = min(s.n_ubatch, tokens) if tokens is not None else s.n_ubatch
    per_stream, _ = cells(s)
    n_kv = min(per_stream, _pad(kv_used)) if kv_used is not None else per_stream
    # f32 activations per token at the graph's widest point, fitted to llama.cpp's own compute buffer
    # sizes over 9 shapes (n_embd 64..512, n_ff 128..1024): the FFN (3.5 n_ff + 2.5 n_embd) or the
    # attention block (7 n_embd), whichever is wider; within 15% of the logged size on all of them
    activations = t * 4 * max(int(3.5 * f.n_ff + 2.5 * f.n_embd), 7 * f.n_embd)
    mask = n_kv * t * 2  # flash attention's f16 KQ mask
    return activations + mask


def _offload(f: ModelFacts, s: ServeSettings, kv: int) -> int:
    """Bytes -ngl puts on the GPU: the last layers (llama.cpp offloads from the output end), their KV,
    the output layer when every block is offloaded."""
    n = s.gpu_layers
    if not n:
        return 0
    n_gpu = f.n_layer + 1 if n < 0 else min(n, f.n_layer + 1)
    layers = range(max(0, f.n_layer - n_gpu), f.n_layer)
    weights = sum(f.layer_weights.get(il, 0) for il in layers)
    if n_gpu > f.n_layer:
        weights += f.output_weights
    return weights + (kv * len(layers) // max(1, f.n_layer))


def estimate(target: GGUFFile, draft: GGUFFile | None, settings: ServeSettings, rules: RuleSet) -> MemoryEstimate:
    """The memory of a server for this pair under `settings` (worst case: full micro-batch and context)."""
    for ct in (settings.cache_type_k, settings.cache_type_v):
        type_size(ct)
    t = model_facts(target, rules)
    d = model_facts(draft, rules) if draft is not None else None
    t_kv, full, swa = kv_bytes(t, settings)
    d_kv = kv_bytes(d, settings)[0] if d is not None else 0
    compute = compute_bytes(t, settings) + (compute_bytes(d, settings) if d is not None else 0)
    overhead = PROCESS_OVERHEAD + (CONTEXT_OVERHEAD if d is not None else 0)
    method = METHOD_STATE.get(settings.method or "", 0)
    weights = t.weights + (d.weights if d is not None else 0)
    total = overhead + method + weights + t_kv + d_kv + compute
    vram = _offload(t, settings, t_kv) + (_offload(d, settings, d_kv) if d is not None else 0)
    if vram:
        vram += compute  # with any layer offloaded, the compute buffers live on the GPU
    notes = []
    if settings.method == "draft-mtp":
        notes.append("the MTP heads' own context (KV and compute of the next-n layers) is not counted")
    for role, f in (("target", t), ("draft", d)):
        if f is not None and f.recurrent:
            notes.append(f"{role} has recurrent (SSM) layers: their state is not counted")
        if f is not None and any(f.swa):
            notes.append(f"{role}: {sum(f.swa)} of {f.n_layer} layers use a {f.n_swa}-token sliding window")
    return MemoryEstimate(
        ctx_size=settings.ctx_size,
        slots=settings.slots,
        cache_type_k=settings.cache_type_k,
        cache_type_v=settings.cache_type_v,
        gpu_layers=settings.gpu_layers,
        target_weights_bytes=t.weights,
        draft_weights_bytes=d.weights if d is not None else 0,
        kv_bytes=t_kv + d_kv,
        draft_kv_bytes=d_kv,
        compute_bytes=compute,
        overhead_bytes=overhead,
        method_bytes=method,
        total_bytes=total,
        vram_bytes=vram,
        host_bytes=total - vram,
        kv_cells=full,
        swa_cells=swa,
        notes=notes,
    )


def resident_bytes(
    target: GGUFFile, draft: GGUFFile | None, settings: ServeSettings, rules: RuleSet, tokens: int, kv_used: int
) -> int:
    """Peak RSS to expect on CPU when the longest prompt has `tokens` tokens and a request fills at most
    `kv_used` cells: weights and KV are all resident (read each token / cleared at start), the compute
    buffer only as far as such a batch reaches."""
    est = estimate(target, draft, settings, rules)
    facts = [model_facts(f, rules) for f in (target, draft) if f is not None]
    touched = sum(compute_bytes(f, settings, tokens, kv_used) for f in facts)
    return est.total_bytes - est.compute_bytes - est.vram_bytes + touched


def head_dim_check(target: GGUFFile, draft: GGUFFile | None, settings: ServeSettings, rules: RuleSet) -> list[str]:
    """llama.cpp refuses a quantized cache whose block does not divide the head size."""
    problems = []
    for role, gf in (("target", target), ("draft", draft)):
        if gf is None:
            continue
        f = model_facts(gf, rules)
        for which, ct, dim in (("K", settings.cache_type_k, f.head_k), ("V", settings.cache_type_v, f.head_v)):
            block, _ = type_size(ct)
            if dim % block:
                head = f"n_embd_head_{which.lower()}={dim}"
                problems.append(f"{role}: {which} cache type {ct} with block size {block} does not divide {head}")
    return problems


def budget_check(est: MemoryEstimate, budget: int, source: str) -> CheckResult:
    """`memory.budget`: the estimate against a budget (VRAM when layers are offloaded, else host)."""
    gpu = bool(est.gpu_layers)
    need = est.vram_bytes if gpu else est.total_bytes
    where = "GPU" if gpu else "host"
    ev = {"budget_bytes": budget, "needed_bytes": need, "budget_source": source, "on": where}
    ev |= est.model_dump(include={"ctx_size", "slots", "cache_type_k", "cache_type_v", "gpu_layers", "total_bytes"})
    if need > budget:
        msg = f"needs {human(need)} on the {where}, more than the budget of {human(budget)} ({source})"
        return CheckResult(code="memory.budget", severity="error", message=msg, evidence=ev)
    msg = f"needs {human(need)} on the {where}, within the budget of {human(budget)} ({source})"
    return CheckResult(code="memory.budget", severity="pass", message=msg, evidence=ev)


def memory_checks(
    est: MemoryEstimate,
    target: GGUFFile,
    draft: GGUFFile | None,
    settings: ServeSettings,
    rules: RuleSet,
    budget: tuple[int, str] | None,
) -> list[CheckResult]:
    """`memory.cache_type` when a cache type is set, `memory.budget` when a budget is given."""
    out: list[CheckResult] = []
    problems = head_dim_check(target, draft, settings, rules)
    if (settings.cache_type_k, settings.cache_type_v) != ("f16", "f16"):
        types = {"cache_type_k": settings.cache_type_k, "cache_type_v": settings.cache_type_v}
        if problems:
            out.append(
                CheckResult(code="memory.cache_type", severity="error", message="; ".join(problems), evidence=types)
            )
        else:
            msg = f"K {settings.cache_type_k} / V {settings.cache_type_v} divide every head size"
            out.append(CheckResult(code="memory.cache_type", severity="pass", message=msg, evidence=types))
    if budget is not None:
        out.append(budget_check(est, budget[0], budget[1]))
    return out
