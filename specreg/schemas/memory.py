"""Memory a llama-server needs for a pair, predicted from GGUF metadata (no loading)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from specreg.schemas.checks import CheckResult

# llama.cpp's defaults for what a serving server keeps over time (common/common.h of the bundled
# build, xllamacpp 2026.10.11549; tests/validators/test_memory_served.py pins them against the wheel): the
# host prompt cache's size limit (--cache-ram, MiB; -1 no size limit, 0 off) and the context
# checkpoints kept per slot (--ctx-checkpoints). `specreg deploy` pins both, so a production
# server holds what the prediction assumed whatever a later build defaults to.
DEFAULT_CACHE_RAM_MIB = 8192
DEFAULT_CTX_CHECKPOINTS = 32


@dataclass(kw_only=True)
class ServeSettings:
    """The server flags the memory depends on (llama-server's -c, -np, -ctk, -ctv, -ngl, -ub,
    --cache-ram, --ctx-checkpoints, --swa-full)."""

    ctx_size: int = 4096  # -c: total context over all slots
    slots: int = 1  # -np
    cache_type_k: str = "f16"  # -ctk
    cache_type_v: str = "f16"  # -ctv
    gpu_layers: int | None = None  # -ngl: None or 0 = CPU only; -1 = all layers
    n_ubatch: int = 512  # -ub
    kv_unified: bool = False  # --kv-unified
    method: str | None = None  # --spec-type: some methods keep state of their own (ngram-mod's table)
    # --spec-draft-n-max (a model-drafted method's longest draft; None: llama.cpp's default, 3):
    # the target's verification batch, and so its output buffer, holds 1 + that many logits per slot
    draft_n_max: int | None = None
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB  # --cache-ram
    ctx_checkpoints: int = DEFAULT_CTX_CHECKPOINTS  # --ctx-checkpoints
    swa_full: bool = False  # --swa-full: a full-size SWA cache, no checkpoints
    cache_idle_slots: bool = True  # --cache-idle-slots (llama.cpp's default): idle slots saved to the cache
    http_threads: int | None = None  # --threads-http (None: max(-np + 4, CPUs - 1))

    def __post_init__(self) -> None:
        for name, low in _LOWEST.items():
            value = getattr(self, name)
            if value is not None and value < low:
                raise ValueError(f"{name}: {value} is below {low}")


# the smallest value llama-server takes for each flag (ServeSettings checks them when made)
_LOWEST = {"ctx_size": 1, "slots": 1, "n_ubatch": 1, "draft_n_max": 0, "cache_ram_mib": -1, "ctx_checkpoints": 0,
           "http_threads": 1}  # fmt: skip


@dataclass(kw_only=True)
class MemoryEstimate:
    """Bytes by purpose; `total_bytes` is what must fit (every buffer llama.cpp reserves)."""

    ctx_size: int
    slots: int
    cache_type_k: str
    cache_type_v: str
    gpu_layers: int | None = None
    target_weights_bytes: int
    draft_weights_bytes: int = 0
    kv_bytes: int  # target + draft KV caches
    target_kv_bytes: int = 0
    draft_kv_bytes: int = 0
    recurrent_bytes: int = 0  # recurrent (SSM) state of every context: a row per slot (mamba, mamba2)
    compute_bytes: int  # compute buffers of every context (worst case: a full micro-batch at full context)
    output_bytes: int = 0  # output buffers of every context (logits of as many outputs as a batch may ask)
    vocab_bytes: int = 0  # the tokenizers' heap (target + draft: each context loads its own)
    draft_vocab_bytes: int = 0
    overhead_bytes: int  # the server process itself (runtime, threads, libraries)
    method_bytes: int = 0  # the speculative method's own state (ngram-mod: a 4 Mi-entry table)
    # what a serving server adds over time, at most (validators.memory_served): the host prompt
    # cache (--cache-ram's limit, or -c tokens' state without one) and the context checkpoints
    # each slot keeps of its sliding-window / recurrent state (--ctx-checkpoints per slot)
    prompt_cache_bytes: int = 0
    checkpoint_bytes: int = 0
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB
    ctx_checkpoints: int = DEFAULT_CTX_CHECKPOINTS
    checkpoint_each_bytes: int = 0  # one checkpoint at its largest (target + draft)
    # the HTTP worker threads' arenas (each tokenizes the prompts it receives) and the code first
    # run when serving, at most: every thread with a prompt as long as a slot's context
    http_bytes: int = 0
    http_threads: int = 0
    total_bytes: int
    vram_bytes: int = 0  # the part offloaded with -ngl (0: CPU only)
    host_bytes: int = 0  # the rest
    kv_cells: int = 0  # cells per full-attention layer, over all slots
    swa_cells: int | None = None  # cells per sliding-window layer (None: no SWA layers)
    notes: list[str] = field(default_factory=list)


def config_key(s: ServeSettings) -> str:
    """The serving configuration a memory fit is judged for, as llama-server's flags: the ones
    that size what the server holds whatever it serves (-c, -np, -ctk, -ctv, -ngl, --swa-full).
    The caps on what may grow (--cache-ram, --ctx-checkpoints) are the fit's answer, not its key."""
    key = f"-c {s.ctx_size} -np {s.slots} -ctk {s.cache_type_k} -ctv {s.cache_type_v} -ngl {s.gpu_layers or 0}"
    return key + (" --swa-full" if s.swa_full else "")


@dataclass(kw_only=True)
class MemoryFit:
    """A serving configuration of a pair judged against a memory budget (`check pair --budget`),
    kept apart from the pair's verdict: whether two files can speculate together does not depend
    on the machine, whether one configuration of them fits its memory does. `cache_ram_mib` and
    `ctx_checkpoints` are what `deploy` pins for this configuration: the caps asked for when they
    fit, else the largest that fit (None: not even with both at 0)."""

    target_sha256: str
    draft_sha256: str | None = None
    method: str
    config: str  # config_key(settings)
    settings: ServeSettings  # as asked: the caps given, or llama.cpp's defaults
    fits: bool  # at the caps asked for; when they were not given, at the largest that fit
    on: Literal["host", "GPU"] = "host"
    budget_bytes: int | None = None  # None: judged without a budget (a cache type alone)
    budget_source: str | None = None
    resident_bytes: int  # held from the start and while serving, before anything grows to its cap
    needed_bytes: int  # what the budget was held to (at the caps judged; the GPU's part with -ngl)
    cache_ram_mib: int | None = None
    ctx_checkpoints: int | None = None
    lowered: bool = False  # the caps were lowered below what was asked (llama.cpp's defaults) to fit
    checks: list[CheckResult] = field(default_factory=list)  # memory.cache_type, memory.budget
    created_at: datetime | None = None
