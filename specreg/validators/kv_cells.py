"""How llama.cpp lays out a KV cache's cells: the padding, the streams and the bytes of a cache type
(llama-kv-cache.cpp); shared by the load-time estimate and what serving adds over time."""

from __future__ import annotations

from dataclasses import dataclass

from specreg.errors import UsageError
from specreg.gguf import format as F
from specreg.schemas.memory import ServeSettings

KV_PAD = 256  # llama.cpp pads each stream's cells (and the SWA cache) to 256
_TYPE_IDS = {name: tid for tid, (name, _, _) in F.GGML_TYPES.items()}


def pad(n: int, to: int = KV_PAD) -> int:
    """`n` rounded up to a multiple of `to`."""
    return -(-n // to) * to


def type_size(cache_type: str) -> tuple[int, int]:
    """(block size, bytes per block) of a -ctk/-ctv type; UsageError for anything else."""
    name = cache_type.lower()
    if name not in F.KV_CACHE_TYPES:
        raise UsageError(f"unknown cache type {cache_type!r}; choose one of {', '.join(F.KV_CACHE_TYPES)}")
    _, block, size = F.GGML_TYPES[_TYPE_IDS[name.upper()]]
    return block, size


def cells(settings: ServeSettings) -> tuple[int, int]:
    """(cells per stream, streams): llama.cpp splits -c over -np slots unless the cache is unified."""
    if settings.kv_unified:
        return pad(settings.ctx_size), 1
    return pad(max(1, settings.ctx_size // settings.slots)), settings.slots


@dataclass(frozen=True)
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
    n_vocab: int = 0
    vocab_heap: int = 0  # the tokenizer's heap at load, metadata copy included (vocab_heap_bytes)
    vocab_meta: int = 0  # of that, the GGUF metadata's copy, freed when the load ends
    vocab_returned: int = 0  # of that, what the allocator gives back to the system
    tokenizer: str | None = None  # tokenizer.ggml.model (llama: SPM, gpt2: BPE, ...)
    # one sequence's recurrent state over every layer, bytes (mamba / mamba2: all layers recurrent,
    # no KV cache); 0: none, or a recurrent / hybrid layout not sized (`recurrent` says which)
    recurrent_state: int = 0
