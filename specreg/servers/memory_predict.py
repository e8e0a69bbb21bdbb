"""The memory estimate next to what a benchmark measures, and the memory a budget can be taken from.

`predict_rss` gives each condition's predicted peak RSS (stored beside the measured one, so a
report shows the error); it never fails a benchmark: a file it cannot read gives None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from specreg.errors import SpecregError, UsageError
from specreg.schemas.memory import ServeSettings

if TYPE_CHECKING:
    from specreg.schemas.bench import ConditionSpec, WorkloadItem


def parse_layers(value: str | int | None) -> int | None:
    """-ngl as llama-server takes it: a number, 'all' or 'auto' (-1: every layer); None: CPU only."""
    if value is None or isinstance(value, int):
        return value
    if value in ("all", "auto"):
        return -1
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"--gpu-layers {value!r}: expected a number, 'all' or 'auto'") from None


def resolve_budget(text: str | None, gpu: bool) -> tuple[int, str] | None:
    """--budget: a size ('24GiB'), 'auto' (the detected GPU or host memory), or None (no budget check)."""
    if text is None:
        return None
    if text.strip().lower() == "auto":
        return detect_budget(gpu)
    from specreg.validators.memory_budget import parse_size

    return parse_size(text), f"--budget {text.strip()}"


def predict_rss(
    spec: ConditionSpec,
    target_path: str,
    *,
    ctx_size: int,
    slots: int,
    gpu_layers: str | None,
    items: Sequence[WorkloadItem],
    max_tokens: int | None,
    cache_type_k: str = "f16",
    cache_type_v: str = "f16",
) -> int | None:
    """Predicted peak RSS of one condition's server: its files, flags and the workload's longest request.

    Prompt length is bounded by its UTF-8 bytes (+2 specials): exact for byte-level vocabularies, an
    upper bound for others; it only sizes the small part of the compute buffer a request touches.
    """
    from specreg.gguf.reader import open_gguf
    from specreg.validators.memory_budget import resident_bytes
    from specreg.validators.ruleset import load_rule_set

    try:
        settings = ServeSettings(
            ctx_size=ctx_size,
            slots=slots,
            gpu_layers=parse_layers(gpu_layers),
            method=spec.method,
            cache_type_k=cache_type_k,
            cache_type_v=cache_type_v,
        )
    except UsageError:
        return None
    # a chat message also gets its template's role markers: 16 tokens each is generous
    sizes = [
        len(it.prompt.encode())
        if it.prompt is not None
        else sum(len(m.content.encode()) + 16 for m in it.messages or [])
        for it in items
    ]
    tokens = max(sizes, default=0) + 2
    new = max((max_tokens or it.max_tokens for it in items), default=0)
    try:
        target = open_gguf(target_path)
        draft = open_gguf(spec.draft_path) if spec.draft_path else None
        return resident_bytes(target, draft, settings, load_rule_set(), tokens, tokens + new, new)
    except SpecregError:
        return None


def detect_budget(gpu: bool) -> tuple[int, str]:
    """(bytes, where from): the first GPU's total memory with offloaded layers, else the host's RAM."""
    if gpu:
        from specreg.servers.memory import GpuProbe

        probe = GpuProbe()
        try:
            devices = probe.observation().devices
        finally:
            probe.close()
        if devices and devices[0].memory_total_bytes:
            return devices[0].memory_total_bytes, f"detected: {devices[0].name}"
        raise SpecregError(
            f"--budget auto: no GPU memory to compare with ({probe.reason or 'no device'})",
            hint="give --budget a size, e.g. --budget 24GiB",
        )
    import psutil

    return int(psutil.virtual_memory().total), "detected: host RAM"
