"""What a llama-server running a pair needs in memory, predicted from the GGUF headers alone.

The byte arithmetic of llama.cpp's allocations (llama-context.cpp, llama-kv-cache*.cpp), part by
part, so a prediction can be checked against the buffer sizes the server logs
(tests/validators/test_memory_budget.py) and against measured peak RSS (benchmarks/bench_memory.py): the
weights, the KV cache (per layer, sliding-window layers at their window, the draft's own cache),
the compute and output buffers of each context, the tokenizer's heap, the process itself, a
method's up-front state and recurrent state. What serving adds over time (prompt cache, context
checkpoints, HTTP threads) is memory_served.py's; what a file says these depend on is read by
memory_facts.py, so everything here is arithmetic on `ModelFacts` and `ServeSettings`. Layouts it
does not model (other recurrent and hybrid families, speculative rollback checkpoints, an MTP
head's own context) are named in the estimate's notes rather than guessed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from specreg.errors import UsageError
from specreg.gguf.reader import GGUFFile
from specreg.schemas.checks import CheckResult
from specreg.schemas.memory import MemoryEstimate, ServeSettings
from specreg.schemas.methods import MODEL_DRAFTED
from specreg.units import MIB, size_text
from specreg.validators.kv_cells import ModelFacts, cells, type_size
from specreg.validators.kv_cells import pad as _pad
from specreg.validators.memory_facts import DRAFT_VOCAB_SHARE, model_facts
from specreg.validators.memory_served import (
    Served,
    cache_bound,
    http_bound,
    http_bytes,
    http_threads,
    served_growth,
)
from specreg.validators.ruleset import RuleSet

# The bundled server (Python + xllamacpp + llama.cpp's runtime, OpenMP pool, slot and prompt-cache
# bookkeeping) with nothing loaded, and each further llama context (the draft's): measured on the
# CPU wheel 2026.10.11549 (peak RSS, high-water mark included, minus every other part: 33 MiB for
# the factory's tiny model in benchmarks/bench_memory.py; a long-running server's prompt cache
# adds to it as prompts are cached, see the notes).
PROCESS_OVERHEAD = 33 * MIB
CONTEXT_OVERHEAD = 5 * MIB // 2
# speculative state llama.cpp allocates up front (common/speculative.cpp: common_ngram_mod(n, 4*1024*1024)
# entries of one llama_token, zero-filled, once per server)
METHOD_STATE = {"ngram-mod": 4 * 1024 * 1024 * 4}
# tokens a method drafts at most per step with llama.cpp's defaults (common/common.h:
# draft.n_max 3, ngram_simple/map_k/map_k4v size_m 48, ngram_mod n_max 64, ngram-cache 8;
# common_speculative_n_max): the target verifies 1 + that many tokens, each with its logits
DRAFT_TOKENS = {
    "draft-simple": 3,
    "draft-eagle3": 3,
    "draft-mtp": 3,
    "draft-dflash": 3,
    "draft-dspark": 3,
    "ngram-simple": 48,
    "ngram-map-k": 48,
    "ngram-map-k4v": 48,
    "ngram-mod": 64,
    "ngram-cache": 8,
}
# the shortest draft a method ever verifies, where that is long (ngram-mod's n_min): its output
# buffer grows from 1 + that to 1 + the longest, and the smaller buffer stays in the heap
MIN_DRAFT = {"ngram-mod": 48}
N_BATCH = 2048  # llama-server's -b: the most outputs one batch can ask for
# backend sampling (on for the draft context): logits + probs (floats) and candidates (tokens) per
# vocabulary entry per output, beside the logits (llama-context.cpp output_reserve)
SAMPLING_PER_ENTRY = 2 * 4 + 4
MMAP_THRESHOLD = 32 << 20  # glibc's largest mmap threshold: a freed block below it stays resident
# a budget must hold the estimate plus the tolerance it is checked to (benchmarks/bench_memory.py:
# within 5% of the measured peak RSS on every model and condition)
BUDGET_MARGIN = 0.05
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*$", re.I)


def type_name(cache_type: str) -> str:
    """A -ctk/-ctv value checked and in llama.cpp's spelling (lower case)."""
    type_size(cache_type)
    return cache_type.lower()


def parse_size(text: str) -> int:
    """'24GiB', '24G', '512MB', '1.5TiB', '123456' -> bytes (K/M/G/T: powers of 1024 with 'i' or alone)."""
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"--budget {text!r}: expected a size like 24GiB, 512MiB or a number of bytes")
    value, unit, binary = float(m.group(1)), m.group(2).upper(), m.group(3)
    base = 1024 if binary or not text.strip().upper().endswith("B") else 1000
    size = int(value * base ** "_KMGT".index(unit)) if unit else int(value)
    if size <= 0:
        raise UsageError(f"--budget {text!r}: must be more than 0, e.g. 24GiB or 512MiB")
    return size


def _row_bytes(n: int, cache_type: str) -> float:
    block, size = type_size(cache_type)
    return n * size / block


def kv_bytes(f: ModelFacts, s: ServeSettings) -> tuple[int, int, int | None]:
    """(bytes, cells of a full layer, cells of a SWA layer or None): K and V over every main layer
    (none for a recurrent model: recurrent_bytes)."""
    per_stream, streams = cells(s)
    full = per_stream * streams
    if f.recurrent_state:
        return 0, full, None
    swa_cells = None
    if any(f.swa):
        window = f.n_swa * (streams if s.kv_unified else 1) + s.n_ubatch
        swa_cells = (per_stream if s.swa_full else _pad(min(per_stream, window))) * streams
    total = 0.0
    for il in range(f.n_layer):
        n = swa_cells if f.swa[il] and swa_cells is not None else full
        kv = f.heads_kv[il] if il < len(f.heads_kv) else f.heads_kv[-1]
        total += n * (_row_bytes(kv * f.head_k, s.cache_type_k) + _row_bytes(kv * f.head_v, s.cache_type_v))
    return int(total), full, swa_cells


def recurrent_bytes(f: ModelFacts, s: ServeSettings) -> int:
    """The recurrent state buffer (llama_memory_recurrent: max(1, n_seq_max) rows, n_rs_seq 0)."""
    return f.recurrent_state * max(1, s.slots)


def draft_limit(s: ServeSettings) -> int:
    """The longest draft the method makes (common_speculative_n_max): --spec-draft-n-max for a
    model-drafted method, else the method's default."""
    if s.draft_n_max is not None and s.method in MODEL_DRAFTED:
        return s.draft_n_max
    return DRAFT_TOKENS.get(s.method or "", 0)


def longest_draft(served: Sequence[Served]) -> int | None:
    """The longest draft one verification step of these requests can have held: a request's
    drafts over all its steps (timings.draft_n), at most; None when a decoded request's drafts
    are not known (its steps are then taken as long as the method allows)."""
    decoded = [r for r in served if not r.refused]
    if not decoded or any(r.drafted is None for r in decoded):
        return None
    return max(r.drafted or 0 for r in decoded)


def _busy(s: ServeSettings, in_flight: int | None) -> int:
    """Slots one batch can hold together: every slot, or as many as the client keeps in flight."""
    return s.slots if in_flight is None else max(1, min(s.slots, in_flight))


def n_outputs(
    s: ServeSettings, new_tokens: int | None = None, drafted: int | None = None, in_flight: int | None = None
) -> int:
    """Outputs (logit rows) one batch of the target may ask for: the server's limit
    (server_output_limits: slots x (1 + the method's longest draft), at most -b). With
    `new_tokens`, what a request of that many new tokens can reach: the server drafts at most
    the request's remaining tokens less one (server-context.cpp get_n_draft_max); with
    `drafted` (`longest_draft`), what the requests served did draft; with `in_flight`, as many
    slots as were in one batch."""
    draft = draft_limit(s)
    if new_tokens is not None:
        draft = min(draft, max(0, new_tokens - 1))
    if drafted is not None:
        draft = min(draft, drafted)
    return min(N_BATCH, _busy(s, in_flight) * (1 + draft))


def output_bytes(
    f: ModelFacts,
    s: ServeSettings,
    draft: bool = False,
    new_tokens: int | None = None,
    drafted: int | None = None,
    in_flight: int | None = None,
) -> int:
    """The context's output buffer (zero-filled when reserved, so all of it resident): n_vocab
    floats per output, reserved for one output per slot (llama_context: output_reserve(n_seq_max))
    and grown when a batch asks for more (`n_outputs`: a verification batch); the draft context
    keeps one output per slot and its backend sampler's arrays beside the logits."""
    if draft:
        return f.n_vocab * s.slots * (4 + SAMPLING_PER_ENTRY) + s.slots * 4
    rows = max(n_outputs(s, new_tokens, drafted, in_flight), s.slots)
    shortest = MIN_DRAFT.get(s.method or "", 0)
    smaller = min(N_BATCH, _busy(s, in_flight) * (1 + shortest))
    grown_from = smaller if shortest and rows > smaller else 0
    if new_tokens is not None and f.n_vocab * grown_from * 4 >= _mmap_threshold(f, s):
        grown_from = 0  # a block that large was mapped on its own and is unmapped when freed
    return f.n_vocab * (rows + grown_from) * 4


def _mmap_threshold(f: ModelFacts, s: ServeSettings) -> int:
    """glibc's mmap threshold once the context is up: raised to the largest mapped block freed so
    far when that is at most 32 MiB - here the compute buffer the scheduler reserves and replaces;
    a freed block below it stays in the heap, resident (measured on 32k, 152k and 262k vocabularies)."""
    reserved = compute_bytes(f, s)
    return reserved if reserved <= MMAP_THRESHOLD else 0


def compute_bytes(
    f: ModelFacts,
    s: ServeSettings,
    tokens: int | None = None,
    kv_used: int | None = None,
    draft: bool = False,
    outputs: int | None = None,
) -> int:
    """Compute buffer of one context; `tokens`/`kv_used`/`outputs` narrow it to what one batch of a
    short request touches (default: the worst case llama.cpp reserves for)."""
    t = min(s.n_ubatch, tokens) if tokens is not None else s.n_ubatch
    per_stream, _ = cells(s)
    n_kv = min(per_stream, _pad(kv_used)) if kv_used is not None else per_stream
    # f32 activations per token at the graph's widest point, fitted to llama.cpp's own compute buffer
    # sizes over 9 shapes (n_embd 64..512, n_ff 128..1024): the FFN (3.5 n_ff + 2.5 n_embd) or the
    # attention block (7 n_embd), whichever is wider; within 15% of the logged size on all of them
    activations = t * 4 * max(int(3.5 * f.n_ff + 2.5 * f.n_embd), 7 * f.n_embd)
    mask = 0 if f.recurrent_state else n_kv * t * 2  # flash attention's f16 KQ mask (none: recurrent)
    if any(f.swa):  # an iSWA model has a second mask, over its sliding-window cache's cells
        swa_stream = per_stream if s.swa_full else _pad(min(per_stream, f.n_swa + s.n_ubatch))
        mask += min(swa_stream, n_kv) * t * 2
    # the logits of every output the batch asks for (f32, n_vocab each): a verification batch of
    # the target holds 1 + a full draft per slot (graph_reserve sizes for min(-ub, that))
    if outputs is None:
        outputs = s.slots if draft else min(s.n_ubatch, n_outputs(s))
    return activations + mask + min(t, outputs) * f.n_vocab * 4


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
    t = model_facts(target, rules)
    d = model_facts(draft, rules) if draft is not None else None
    return _estimate(t, d, settings)


def _estimate(t: ModelFacts, d: ModelFacts | None, settings: ServeSettings) -> MemoryEstimate:
    for ct in (settings.cache_type_k, settings.cache_type_v):
        type_size(ct)
    t_kv, full, swa = kv_bytes(t, settings)
    d_kv = kv_bytes(d, settings)[0] if d is not None else 0
    recurrent = recurrent_bytes(t, settings) + (recurrent_bytes(d, settings) if d is not None else 0)
    compute = compute_bytes(t, settings) + (compute_bytes(d, settings, draft=True) if d is not None else 0)
    overhead = PROCESS_OVERHEAD + (CONTEXT_OVERHEAD if d is not None else 0)
    method = METHOD_STATE.get(settings.method or "", 0)
    weights = t.weights + (d.weights if d is not None else 0)
    outputs = output_bytes(t, settings) + (output_bytes(d, settings, draft=True) if d is not None else 0)
    vocab = t.vocab_heap + (d.vocab_heap if d is not None else 0)
    prompt_cache, checkpoints, one_checkpoint = cache_bound(t, d, settings)
    http = http_bound(t, settings)
    total = overhead + method + weights + t_kv + d_kv + recurrent + compute + outputs + vocab
    total += prompt_cache + checkpoints + http
    vram = _offload(t, settings, t_kv) + (_offload(d, settings, d_kv) if d is not None else 0)
    if vram:
        vram += compute  # with any layer offloaded, the compute buffers live on the GPU
    notes = []
    if settings.method == "draft-mtp":
        notes.append("the MTP heads' own context (KV and compute of the next-n layers) is not counted")
    for role, f in (("target", t), ("draft", d)):
        if f is not None and f.recurrent and not f.recurrent_state:
            notes.append(
                f"{role} has recurrent (SSM) layers of a layout not sized ({f.arch}): their state is not counted"
            )
    if t.recurrent and d is not None:
        notes.append("the rollback checkpoints speculative decoding makes on a recurrent target are not counted")
    if settings.cache_ram_mib < 0:
        notes.append("--cache-ram -1: the prompt cache has no size limit, only -c tokens (counted)")
    if t.recurrent and not t.recurrent_state and settings.ctx_checkpoints:
        notes.append("the context checkpoints of the target's recurrent state are not counted")
    return MemoryEstimate(
        ctx_size=settings.ctx_size,
        slots=settings.slots,
        cache_type_k=settings.cache_type_k,
        cache_type_v=settings.cache_type_v,
        gpu_layers=settings.gpu_layers,
        target_weights_bytes=t.weights,
        draft_weights_bytes=d.weights if d is not None else 0,
        kv_bytes=t_kv + d_kv,
        target_kv_bytes=t_kv,
        draft_kv_bytes=d_kv,
        recurrent_bytes=recurrent,
        compute_bytes=compute,
        output_bytes=outputs,
        vocab_bytes=vocab,
        draft_vocab_bytes=d.vocab_heap if d is not None else 0,
        overhead_bytes=overhead,
        method_bytes=method,
        prompt_cache_bytes=prompt_cache,
        checkpoint_bytes=checkpoints,
        cache_ram_mib=settings.cache_ram_mib,
        ctx_checkpoints=settings.ctx_checkpoints,
        checkpoint_each_bytes=one_checkpoint,
        http_bytes=http,
        http_threads=http_threads(settings),
        total_bytes=total,
        vram_bytes=vram,
        host_bytes=total - vram,
        kv_cells=full,
        swa_cells=swa,
        notes=notes,
    )


def resident_bytes(
    target: GGUFFile,
    draft: GGUFFile | None,
    settings: ServeSettings,
    rules: RuleSet,
    tokens: int,
    kv_used: int,
    new_tokens: int | None = None,
    served: Sequence[Served] = (),
    in_flight: int | None = None,
) -> int:
    """Peak RSS to expect on CPU when the longest prompt has `tokens` tokens, a request fills at
    most `kv_used` cells and asks for at most `new_tokens`, after serving `served` with `in_flight`
    at a time (default -np; the prompt cache and checkpoints they leave: memory_served.served_growth,
    the HTTP threads' work: http_bytes); `tokens` 0: nothing decoded (every request refused).
    Weights, KV, output buffers and the
    tokenizer all resident (read each token, cleared at start, zero-filled, built at load); of the
    compute buffer (one buffer, reused by every batch) what the widest batch reaches - the prompt's,
    or the verification of the longest draft such a request allows (at most what the requests
    drafted, when `served` says: `longest_draft`), with one logit row per token."""
    t = model_facts(target, rules)
    d = model_facts(draft, rules) if draft is not None else None
    est = _estimate(t, d, settings)
    drafted = longest_draft(served)
    verify = n_outputs(settings, new_tokens, drafted, in_flight)
    touched = 0
    if tokens > 0:
        touched = max(
            compute_bytes(t, settings, tokens, kv_used, outputs=_busy(settings, in_flight)),
            compute_bytes(t, settings, verify, kv_used, outputs=verify),
        )
        if d is not None:
            touched += compute_bytes(d, settings, tokens, kv_used, draft=True)
    outputs = output_bytes(t, settings, new_tokens=new_tokens, drafted=drafted, in_flight=in_flight)
    if d is not None:
        outputs += output_bytes(d, settings, draft=True)
    grown = served_growth(t, d, settings, served, in_flight).peak_bytes + http_bytes(t, settings, served)
    fixed = est.total_bytes - est.prompt_cache_bytes - est.checkpoint_bytes - est.http_bytes
    full = fixed - est.compute_bytes - est.output_bytes - est.vram_bytes + touched + outputs + grown
    # the metadata freed after a load: what glibc returned is refilled by anything allocated later
    # before the peak rises (the peak is the load's or the end state's, whichever is higher);
    # what it kept serves a method's table (ngram-mod's 16 MiB) and the draft's own metadata copy
    # (loaded after the target's was freed) as far as it reaches
    kept = t.vocab_meta - t.vocab_returned
    method = min(est.method_bytes, kept)
    reused = min(d.vocab_meta, t.vocab_meta) if d is not None else 0
    if d is not None:  # the server builds part of the fitted heap over the target's vocabulary only
        reused += int(d.vocab_heap * (1 - DRAFT_VOCAB_SHARE))
    after = full - method - reused - t.vocab_returned
    at_load = PROCESS_OVERHEAD + t.weights + t.vocab_heap
    return max(at_load, after)


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


def prediction_exceeded(measured: float | None, predicted: float | None) -> float | None:
    """How far a measured peak is over its prediction (a fraction), when by more than the margin
    every estimate is held to (BUDGET_MARGIN); None when within it or either is unknown. `runs
    show`, the report and the audit flag such a condition."""
    if not measured or not predicted:
        return None
    over = (measured - predicted) / predicted
    return over if over > BUDGET_MARGIN else None


def exceeded_text(name: str, measured_mib: float, predicted_mib: float, over: float) -> str:
    """The one line that flags a condition whose measured peak passed its prediction's margin."""
    return (
        f"{name}: measured peak {measured_mib:,.1f} MiB is {over:.1%} over the predicted "
        f"{predicted_mib:,.1f} MiB (more than the {BUDGET_MARGIN:.0%} margin)"
    )


# the estimate's fields a memory check's evidence repeats (the served ones only on the host)
_SETTINGS_SHOWN = ("ctx_size", "slots", "cache_type_k", "cache_type_v", "gpu_layers", "total_bytes")
_SERVED_SHOWN = ("prompt_cache_bytes", "checkpoint_bytes", "cache_ram_mib", "ctx_checkpoints")


def budget_check(est: MemoryEstimate, budget: int, source: str) -> CheckResult:
    """`memory.budget`: the estimate, plus the prediction's tolerance, against a budget (VRAM when
    layers are offloaded, else host): a server that may exceed the budget never passes."""
    gpu = bool(est.gpu_layers)
    need = est.vram_bytes if gpu else est.total_bytes
    margin = int(need * BUDGET_MARGIN)
    where = "GPU" if gpu else "host"
    ev = {"budget_bytes": budget, "needed_bytes": need, "margin_bytes": margin, "budget_source": source, "on": where}
    ev |= {
        k: getattr(est, k) for k in ("ctx_size", "slots", "cache_type_k", "cache_type_v", "gpu_layers", "total_bytes")
    }
    needs = f"needs {size_text(need)} on the {where} (+{BUDGET_MARGIN:.0%}: {size_text(need + margin)})"
    if not gpu and (est.prompt_cache_bytes or est.checkpoint_bytes):
        ev |= {
            k: getattr(est, k) for k in ("prompt_cache_bytes", "checkpoint_bytes", "cache_ram_mib", "ctx_checkpoints")
        }
        parts = [f"prompt cache {size_text(est.prompt_cache_bytes)} (--cache-ram {est.cache_ram_mib})"]
        if est.checkpoint_bytes:
            parts.append(f"checkpoints {size_text(est.checkpoint_bytes)} (--ctx-checkpoints {est.ctx_checkpoints})")
        needs += ", of which " + " and ".join(parts)
    if need + margin > budget:
        msg = f"{needs}, more than the budget of {size_text(budget)} ({source})"
        return CheckResult(code="memory.budget", severity="error", message=msg, evidence=ev)
    msg = f"{needs}, within the budget of {size_text(budget)} ({source})"
    return CheckResult(code="memory.budget", severity="pass", message=msg, evidence=ev)


def cache_type_checks(
    target: GGUFFile, draft: GGUFFile | None, settings: ServeSettings, rules: RuleSet
) -> list[CheckResult]:
    """`memory.cache_type` when a cache type is set (`memory.budget`: memory_fit.judge_fit)."""
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
    return out
