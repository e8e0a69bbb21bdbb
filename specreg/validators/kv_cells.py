"""How llama.cpp lays out a KV cache's cells: the padding, the streams and the bytes of a cache type
(llama-kv-cache.cpp); shared by the load-time estimate and what serving adds over time."""

from __future__ import annotations

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
