"""What a serving llama-server holds over time beyond its load: the host prompt cache and the
context checkpoints, as functions of the requests it has served.

Mirrors the bundled build's server (xllamacpp 2026.10.11549, tools/server/server-context.cpp
and server-task.cpp; llama-kv-cache*.cpp for the state sizes):
- a slot's state (llama_state_seq_get_size_ext): per stream a cell count, per cell its position
  and sequence (12 bytes), per layer a K and a V header and one row per cell; a sliding-window
  cache writes only its unmasked cells (the last n_swa), after the full-attention cache, with
  --swa-full too (the window cache is kept, full-size);
- the prompt cache (--cache-ram, default 8192 MiB): when a task takes a slot chosen by LRU, the
  slot's tokens (prompt and output) are saved with their state, the target's and the draft's,
  and their checkpoints, unless a cached entry already holds them; an entry the new prompt
  continues (>= 25% of it kept) is restored into the slot and dropped from the cache; the
  oldest entries go when the size limit would be passed (no size limit: -c tokens); with
  --cache-idle-slots (default on) every idle slot is saved too once a task has taken its slot
  (server-context.cpp process_single_task: prompt_save for each slot not processing, cleared
  after with --kv-unified), which matters when fewer requests are in flight than -np slots
  (a benchmark with as many slots as requests in flight has none idle);
- context checkpoints (--ctx-checkpoints, default 32 per slot) of what cannot be rolled back:
  made when the target has sliding-window layers (not with --swa-full) or recurrent ones,
  before the batch that ends 4 tokens short of the prompt's end and before the one ending
  4 + -ub short (server-context.cpp's checkpoint_offsets), each holding the target's partial
  state (its sliding-window cache) and the draft's (all of a plain cache: llama_kv_cache
  ignores the partial flag); they move with the slot's tokens into the prompt cache.
- a request the server refuses before its first batch (its prompt as long as the slot's context:
  server-context.cpp update_slots, exceed_context_size_error) still takes a slot, by LRU, so
  that slot is saved and the best cached entry restored into it (get_available_slot), and the
  idle slots are saved; it decodes nothing and leaves no state of its own;
- the HTTP worker threads (server-http.cpp: max(-np + 4, CPUs - 1) of them, --threads-http):
  each tokenizes the prompts it receives (the tokenizer runs in the HTTP thread), in its own
  glibc arena, which keeps its high-water mark (the mmap and trim thresholds are raised by then:
  freed chunks stay). Per thread: a base plus a share per byte of the longest prompt's text
  (llm_tokenizer_spm's symbol and bigram per character, the text's copies), fitted per
  tokenizer kind on the bundled server (`HTTP_PER_TEXT_BYTE`: the factory's SPM model and
  SmolLM2's BPE); and the server's code first run when serving (its pages of libllama / the
  server, `SERVE_CODE_BYTES`).
All of it is std::vector<uint8_t> resized (zero-filled), so resident while held.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specreg.schemas.memory import ServeSettings
from specreg.units import MIB
from specreg.validators.kv_cells import cells, type_size

if TYPE_CHECKING:
    from specreg.validators.kv_cells import ModelFacts

CELL_META = 12  # pos, n_seq_id, seq_id per cell (llama_kv_cache::state_write_meta)
LAYER_HEADER = 2 * (4 + 8)  # K and V: type and row size
STREAM_HEADER = 16  # v_trans, n_layer, n_rot_k, n_rot_v
TOKEN_BYTES = 4  # the cached entry's copy of its tokens (llama_token)
KEEP_MIN = 0.25  # server_prompt_cache::load: an entry is restored only if this share of it is kept
# an HTTP worker thread's arena: its base and bytes per byte of the longest prompt text it
# tokenized, by tokenizer.ggml.model (measured, see the module docstring; others: SPM's, the larger)
HTTP_THREAD_BASE = 112 << 10
HTTP_PER_TEXT_BYTE = {"llama": 64, "gpt2": 40}
HTTP_PER_TEXT_BYTE_OTHER = 64
HTTP_CALLS_PER_REQUEST = 3  # a client's calls around one completion (tokenize, template, completion)
SERVE_CODE_BYTES = 128 << 10  # code pages first touched when serving (RssFile growth, measured)
BOUND_TEXT_PER_TOKEN = 4  # a prompt's text per token where unknown, and in the bound


def _row(n: int, cache_type: str) -> float:
    block, size = type_size(cache_type)
    return n * size / block


def _layers_bytes(f: ModelFacts, s: ServeSettings, swa: bool) -> float:
    """Bytes per cell over the layers of one cache (the sliding-window ones or the others)."""
    total = 0.0
    for il in range(f.n_layer):
        if bool(f.swa[il]) != swa:
            continue
        kv = f.heads_kv[il] if il < len(f.heads_kv) else f.heads_kv[-1]
        total += _row(kv * f.head_k, s.cache_type_k) + _row(kv * f.head_v, s.cache_type_v)
    return total


def _cache_state(f: ModelFacts, s: ServeSettings, n: int, swa: bool) -> int:
    layers = sum(1 for il in range(f.n_layer) if bool(f.swa[il]) == swa)
    _, streams = cells(s)
    head = 4 + 4 * streams  # n_stream, then a cell count per stream
    if n <= 0:
        return head
    # a cache with no layers of its kind (a draft whose every layer is windowed) still writes
    # its cells' positions and sequences
    return int(head + STREAM_HEADER + layers * LAYER_HEADER + n * (CELL_META + _layers_bytes(f, s, swa)))


def _iswa(f: ModelFacts) -> bool:
    """Does llama.cpp build a separate sliding-window cache (iSWA) for this model? It does with
    --swa-full too (llama-kv-cache-iswa.cpp: the window cache is then as large as the other), and
    that cache's state still writes only its unmasked cells."""
    return any(f.swa)


def _split(f: ModelFacts, s: ServeSettings) -> bool:
    """Does the server treat the model as windowed (checkpoints)? Not with --swa-full
    (server-context.cpp: n_swa 0 "to simulate a non-SWA model")."""
    return _iswa(f) and not s.swa_full


def _recurrent_state(f: ModelFacts, s: ServeSettings) -> int:
    """One slot's recurrent state as written (llama_memory_recurrent::state_write): its one cell
    and the R and S rows of every layer, whatever the tokens."""
    _, streams = cells(s)
    return 4 + 4 * streams + STREAM_HEADER + f.n_layer * LAYER_HEADER + CELL_META + f.recurrent_state


def state_bytes(f: ModelFacts, s: ServeSettings, n_tokens: int) -> int:
    """One slot's full state with `n_tokens` cells (what the prompt cache copies)."""
    if f.recurrent_state:
        return _recurrent_state(f, s)
    if not _iswa(f):
        return _all_layers_state(f, s, n_tokens)
    return _cache_state(f, s, n_tokens, swa=False) + _cache_state(f, s, min(n_tokens, f.n_swa), swa=True)


def _all_layers_state(f: ModelFacts, s: ServeSettings, n: int) -> int:
    _, streams = cells(s)
    head = 4 + 4 * streams
    if n <= 0 or not f.n_layer:
        return head
    per_cell = _layers_bytes(f, s, swa=False) + _layers_bytes(f, s, swa=True)
    return int(head + STREAM_HEADER + f.n_layer * LAYER_HEADER + n * (CELL_META + per_cell))


def partial_bytes(f: ModelFacts, s: ServeSettings, n_tokens: int) -> int:
    """The part a checkpoint holds (LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY): the sliding-window cache
    of an iSWA model, all of a plain cache (its state_write ignores the flag)."""
    if f.recurrent_state:
        return _recurrent_state(f, s)
    if _iswa(f):
        return _cache_state(f, s, min(n_tokens, f.n_swa), swa=True)
    return _all_layers_state(f, s, n_tokens)


def checkpoints_apply(t: ModelFacts, s: ServeSettings) -> bool:
    """Does the server make context checkpoints for this target? (n_swa > 0 without --swa-full, or
    a recurrent state; one of a layout not sized has none counted: see the estimate's notes)."""
    return s.ctx_checkpoints > 0 and (_split(t, s) or t.recurrent_state > 0)


def checkpoint_positions(prompt_tokens: int, n_ubatch: int, n_batch: int = 2048, chat: bool = False) -> list[int]:
    """Tokens already in the cache when each of a fresh prompt's checkpoints is made: before the
    batch that ends 4 + -ub short of the end (when another batch came before it) and before the
    last one, 4 short (server-context.cpp: checkpoint_offsets, pos_min >= 0); a chat request's
    batches also break at its last user message, where one more is made (the template's tokens
    before it are not known without rendering it: counted as 1, the least)."""
    out = [1] if chat and prompt_tokens > 5 else []
    for offset in (4 + n_ubatch, 4):
        at = prompt_tokens - min(n_batch, offset)
        if at > 0 and at not in out:
            out.append(at)
    return sorted(out)


def checkpoint_bytes(t: ModelFacts, d: ModelFacts | None, s: ServeSettings, at: int) -> int:
    """One checkpoint with `at` tokens in the slot: the target's partial state and the draft's."""
    return partial_bytes(t, s, at) + (partial_bytes(d, s, at) if d is not None else 0)


@dataclass(frozen=True)
class Served:
    """One request as the server saw it: which prompt (same key, same tokens), its prompt tokens,
    and the tokens its slot held at the end (prompt + output)."""

    key: str
    prompt_tokens: int
    total_tokens: int
    chat: bool = False  # /v1/chat/completions: the server knows where the user's message starts
    text_bytes: int = 0  # the prompt's text as sent (UTF-8 bytes; 0: unknown, taken from its tokens)
    refused: bool = False  # answered with an error before its first batch (longer than a slot's context)
    # tokens the server drafted for it over all its steps (timings.draft_n, absent when 0);
    # None: not known (a step's draft is then taken as long as the method allows)
    drafted: int | None = None


@dataclass
class _Entry:
    key: str
    tokens: int
    state: int
    checkpoints: list[int] = field(default_factory=list)

    @property
    def size(self) -> int:
        return self.state + sum(self.checkpoints)


@dataclass
class Growth:
    """What the serving added at its peak (bytes), and the parts of that peak."""

    peak_bytes: int = 0
    prompt_cache_bytes: int = 0  # held by the prompt cache at the peak
    checkpoint_bytes: int = 0  # held by the slots' checkpoints at the peak
    entries: int = 0  # prompts in the cache at the peak
    checkpoints: int = 0  # checkpoints made over the workload
    trace: list[int] = field(default_factory=list)  # the cache's size after each request's update


def served_growth(
    t: ModelFacts, d: ModelFacts | None, s: ServeSettings, requests: Sequence[Served], in_flight: int | None = None
) -> Growth:
    """Replay the server's prompt cache and checkpoints over `requests`, in the order they took
    slots (request i takes slot i mod -np: the least recently used, or the one a finished request
    frees); the peak of what they hold together.

    Args:
        t: the target's facts.
        d: the draft's facts; None without a draft model.
        s: the server's settings (slots, context, cache types, --cache-ram, --swa-full).
        requests: the requests served, in the order they took slots.
        in_flight: requests the client keeps in flight (default -np); with fewer, the other
            slots are idle when a task starts and --cache-idle-slots saves them.
    """
    n_slots = max(1, s.slots)
    slots: list[_Entry | None] = [None] * n_slots
    cache: list[_Entry] = []
    limit = s.cache_ram_mib * MIB if s.cache_ram_mib > 0 else 0
    limit_tokens = s.ctx_size
    ckpt_on = checkpoints_apply(t, s)
    busy = max(1, min(n_slots, in_flight or n_slots))
    out = Growth()

    def state(n: int) -> int:
        return state_bytes(t, s, n) + (state_bytes(d, s, n) if d is not None else 0) + TOKEN_BYTES * n

    def cache_size() -> int:
        return sum(e.size for e in cache)

    def save(e: _Entry | None) -> None:
        if e is None or e.tokens <= 0:
            return
        if any(c.key == e.key and c.tokens >= e.tokens for c in cache):
            return  # server_prompt_cache::alloc: already in the cache
        if limit and e.size > limit:
            return
        cache[:] = [c for c in cache if not (c.key == e.key and c.tokens <= e.tokens)]
        while limit and cache and cache_size() + e.size > limit:
            cache.pop(0)
        cache.append(_Entry(e.key, e.tokens, e.state, list(e.checkpoints)))

    def update() -> None:
        while limit and cache and cache_size() > limit:
            cache.pop(0)
        per_token = max(1.0, cache_size() / max(1, sum(c.tokens for c in cache)))
        cap = max(limit_tokens, int(limit / per_token)) if limit else limit_tokens
        while limit_tokens and cache and sum(c.tokens for c in cache) > cap:
            cache.pop(0)

    def held() -> tuple[int, int]:
        return cache_size(), sum(sum(e.checkpoints) for e in slots if e is not None)

    def record() -> None:
        c, ck = held()
        out.trace.append(c)
        if c + ck > out.peak_bytes:
            out.peak_bytes, out.prompt_cache_bytes, out.checkpoint_bytes, out.entries = c + ck, c, ck, len(cache)

    def save_idle(k: int) -> None:
        """--cache-idle-slots: once a task has its slot, every slot not processing is saved."""
        if s.cache_ram_mib == 0 or not s.cache_idle_slots or busy >= n_slots:
            return
        running = {(k - j) % n_slots for j in range(busy)}  # this task's and those still in flight
        for j in range(n_slots):
            if j not in running:
                save(slots[j])
                update()
                if s.kv_unified:
                    slots[j] = None  # [TAG_IDLE_SLOT_CLEAR]: a unified cache's room is freed

    for i, r in enumerate(requests):
        k = i % n_slots
        slot = slots[k]
        restored: _Entry | None = None
        if s.cache_ram_mib != 0:
            if slot is not None and slot.key == r.key:
                # picked by prompt similarity: a slot about to lose half its tokens is copied first
                if r.prompt_tokens / max(1, slot.tokens) < 0.5:
                    save(slot)
            else:  # picked as the least recently used: saved, then the best cached entry restored
                save(slot)
                best = [c for c in cache if c.key == r.key and r.prompt_tokens / max(1, c.tokens) >= KEEP_MIN]
                if best:
                    restored = best[0]
                    cache.remove(restored)
            update()
        if r.refused:  # nothing decoded: the slot keeps what was restored (LRU saved and cleared it)
            if slot is None or slot.key != r.key or s.cache_ram_mib == 0:
                slots[k] = restored if s.cache_ram_mib != 0 else slot
            save_idle(k)
            record()
            continue
        kept = restored if restored is not None else (slot if slot is not None and slot.key == r.key else None)
        ckpts = list(kept.checkpoints) if kept is not None else []
        if ckpt_on and kept is None:
            for at in checkpoint_positions(r.prompt_tokens, s.n_ubatch, chat=r.chat):
                ckpts.append(checkpoint_bytes(t, d, s, at))
                out.checkpoints += 1
            ckpts = ckpts[-s.ctx_checkpoints :]
        slots[k] = _Entry(r.key, r.total_tokens, state(r.total_tokens), ckpts)
        save_idle(k)
        record()
    return out


def cache_bound(t: ModelFacts, d: ModelFacts | None, s: ServeSettings) -> tuple[int, int, int]:
    """(prompt cache, slots' checkpoints, one checkpoint) at most, whatever is served: the cache
    up to --cache-ram (without a size limit, -c tokens of state and their checkpoints); each slot
    up to --ctx-checkpoints checkpoints of its largest partial state."""
    per_stream, _ = cells(s)
    one = checkpoint_bytes(t, d, s, per_stream) if checkpoints_apply(t, s) else 0
    slots_ckpt = s.slots * s.ctx_checkpoints * one
    if s.cache_ram_mib == 0:
        cache = 0
    elif s.cache_ram_mib > 0:
        cache = s.cache_ram_mib * MIB
    else:
        n = s.ctx_size
        cache = state_bytes(t, s, n) + (state_bytes(d, s, n) if d is not None else 0) + TOKEN_BYTES * n
        cache += s.ctx_checkpoints * one
    return cache, slots_ckpt, one


def online_cpus() -> int:
    """What std::thread::hardware_concurrency() gives the server: libstdc++ (the system's, which
    the bundled build links) asks glibc's get_nprocs(), the machine's online CPUs, whatever the
    process is pinned to (glibc 2.36, pinned to one of two CPUs: 2; tests/validators/test_memory_served.py
    calls it pinned). sysconf(_SC_NPROCESSORS_ONLN) is that count; os.sched_getaffinity(0) is
    the pinned set, which the server does not use, and os.cpu_count() may be overridden
    (PYTHON_CPU_COUNT from Python 3.13)."""
    try:
        n = os.sysconf("SC_NPROCESSORS_ONLN")
    except (ValueError, OSError):
        n = os.cpu_count() or 1
    return max(1, n)


def http_threads(s: ServeSettings) -> int:
    """The server's HTTP worker threads: --threads-http, else max(-np + 4, CPUs - 1)
    (server-http.cpp, from std::thread::hardware_concurrency: `online_cpus`)."""
    if s.http_threads:
        return s.http_threads
    return max(s.slots + 4, online_cpus() - 1)


def _per_text_byte(f: ModelFacts) -> int:
    return HTTP_PER_TEXT_BYTE.get(f.tokenizer or "", HTTP_PER_TEXT_BYTE_OTHER)


def http_bytes(t: ModelFacts, s: ServeSettings, requests: Sequence[Served]) -> int:
    """What the HTTP threads and the serving code hold after `requests` (refused ones too: a prompt
    is tokenized before it is refused): the threads a client's calls reach (httplib's pool wakes
    its workers in turn), each holding the longest prompt's tokenizer work."""
    if not requests:
        return 0
    longest = max(r.text_bytes or BOUND_TEXT_PER_TOKEN * r.prompt_tokens for r in requests)
    threads = min(http_threads(s), HTTP_CALLS_PER_REQUEST * len(requests))
    return SERVE_CODE_BYTES + threads * (HTTP_THREAD_BASE + _per_text_byte(t) * longest)


def http_bound(t: ModelFacts, s: ServeSettings) -> int:
    """`http_bytes` at most, whatever is served: every HTTP thread with a prompt as long as a slot's
    context (BOUND_TEXT_PER_TOKEN bytes a token; a longer text is refused, but only after it was
    tokenized: the bound is for prompts a slot can hold)."""
    per_stream, _ = cells(s)
    longest = BOUND_TEXT_PER_TOKEN * per_stream
    return SERVE_CODE_BYTES + http_threads(s) * (HTTP_THREAD_BASE + _per_text_byte(t) * longest)
