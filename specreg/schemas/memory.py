"""Memory a llama-server needs for a pair, predicted from GGUF metadata (no loading)."""

from __future__ import annotations

from pydantic import Field

from specreg.schemas.base import BaseModel


class ServeSettings(BaseModel):
    """The server flags the memory depends on (llama-server's -c, -np, -ctk, -ctv, -ngl, -ub)."""

    ctx_size: int = Field(default=4096, ge=1)  # -c: total context over all slots
    slots: int = Field(default=1, ge=1)  # -np
    cache_type_k: str = "f16"  # -ctk
    cache_type_v: str = "f16"  # -ctv
    gpu_layers: int | None = None  # -ngl: None or 0 = CPU only; -1 = all layers
    n_ubatch: int = Field(default=512, ge=1)  # -ub
    kv_unified: bool = False  # --kv-unified
    method: str | None = None  # --spec-type: some methods keep state of their own (ngram-mod's table)


class MemoryEstimate(BaseModel):
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
    compute_bytes: int  # compute buffers of every context (worst case: a full micro-batch at full context)
    output_bytes: int = 0  # output buffers of every context (logits of as many outputs as a batch may ask)
    vocab_bytes: int = 0  # the tokenizers' heap (target + draft: each context loads its own)
    draft_vocab_bytes: int = 0
    overhead_bytes: int  # the server process itself (runtime, threads, libraries)
    method_bytes: int = 0  # the speculative method's own state (ngram-mod: a 4 Mi-entry table)
    total_bytes: int
    vram_bytes: int = 0  # the part offloaded with -ngl (0: CPU only)
    host_bytes: int = 0  # the rest
    kv_cells: int = 0  # cells per full-attention layer, over all slots
    swa_cells: int | None = None  # cells per sliding-window layer (None: no SWA layers)
    notes: list[str] = Field(default_factory=list)
