"""The memory estimate next to what a benchmark measures, and the memory a budget can be taken from.

`predict_rss` gives each condition's predicted peak RSS (stored beside the measured one, so a
report shows the error); it never fails a benchmark: a file it cannot read gives None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from specreg.errors import SpecregError, UsageError
from specreg.schemas.memory import ServeSettings
from specreg.validators.memory_served import Served

if TYPE_CHECKING:
    from specreg.gguf.reader import GGUFFile
    from specreg.schemas.bench import ConditionSpec, WorkloadItem
    from specreg.schemas.request_row import RequestRow


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
    served: Sequence[Served] | None = None,
    settings: ServeSettings | None = None,
    in_flight: int | None = None,
) -> int | None:
    """Predicted peak RSS of one condition's server: its files, flags, the workload's longest
    request and what its requests leave held (the prompt cache, the checkpoints).

    Prompt length: the target vocabulary's greedy longest-match count (`_greedy_tokens`), at most
    the prompt's UTF-8 bytes (+2 specials); it sizes the part of the compute buffer a request
    touches. Only requests the server decoded touch the compute buffer (one it refused, longer
    than a slot's context, is only tokenized).

    Args:
        spec: the condition (method, draft, draft length).
        target_path: the target's file; its header gives the facts the model needs.
        ctx_size: the server's -c.
        slots: the server's -np.
        gpu_layers: the server's -ngl (None: CPU only).
        items: the workload; its longest request sizes the compute buffer.
        max_tokens: the output length where `served` does not say it (None: the item's own).
        cache_type_k: the server's -ctk.
        cache_type_v: the server's -ctv.
        served: the requests as the server counted them, in the order they took slots, with
            the tokens each drafted (a benchmark knows them: `served_requests`); without it,
            each item once, its prompt counted as above, its output at `max_tokens` and every
            step drafting as much as the method allows.
        settings: the flags beyond the arguments (e.g. --cache-ram), completed with them.
        in_flight: requests the client keeps in flight (default: -np).

    Returns:
        Bytes, or None when the flags or the files cannot be read.
    """
    from specreg.gguf.reader import open_gguf
    from specreg.validators.memory_budget import resident_bytes
    from specreg.validators.ruleset import load_rule_set

    try:
        settings = replace(
            settings or ServeSettings(),
            ctx_size=ctx_size,
            slots=slots,
            gpu_layers=parse_layers(gpu_layers),
            method=spec.method,
            draft_n_max=spec.draft_n_max,
            cache_type_k=cache_type_k,
            cache_type_v=cache_type_v,
        )
    except UsageError:
        return None
    new = max((max_tokens or it.max_tokens for it in items), default=0)
    try:
        target = open_gguf(target_path)
        draft = open_gguf(spec.draft_path) if spec.draft_path else None
        count = _greedy_tokens(target)
        # a chat message also gets its template's role markers: 16 tokens each is generous
        sizes = [
            count(it.prompt) if it.prompt is not None else sum(count(m.content) + 16 for m in it.messages or [])
            for it in items
        ]
        texts = {it.id: text_bytes(it) for it in items}
        if served is None:
            tokens = max(sizes, default=0) + 2
            served = [
                Served(it.id, n + 2, n + 2 + max(0, (max_tokens or it.max_tokens) - 1), it.messages is not None)
                for it, n in zip(items, sizes, strict=True)
            ]
        else:
            tokens = max((r.prompt_tokens for r in served if not r.refused), default=0)
        served = [r if r.text_bytes else replace(r, text_bytes=texts.get(r.key, 0)) for r in served]
        rules = load_rule_set()
        return resident_bytes(target, draft, settings, rules, tokens, tokens + new, new, served, in_flight)
    except SpecregError:
        return None


CHAT_MESSAGE_BYTES = 32  # a chat message's role markers in the text the template renders


def text_bytes(item: WorkloadItem) -> int:
    """UTF-8 bytes of the text the server tokenizes for an item (a chat: its messages' contents
    and role markers)."""
    if item.prompt is not None:
        return len(item.prompt.encode("utf-8", "surrogatepass"))
    return sum(len(m.content.encode("utf-8", "surrogatepass")) + CHAT_MESSAGE_BYTES for m in item.messages or [])


_MAX_PIECE = 32  # longest token text tried (characters)
_MARKERS = str.maketrans({"\u2581": " ", "\u0120": " ", "\u010a": "\n", "\u0109": "\t"})  # SPM / byte-level BPE


def _greedy_tokens(gf: GGUFFile) -> Callable[[str], int]:
    """A token counter for the file's vocabulary: greedy longest match over its token texts (SPM's
    and byte-level BPE's space and newline markers read as such), unmatched characters one token
    per UTF-8 byte; never more than the text's bytes. Close to what llama.cpp's tokenizer gives on
    prose (it is a prediction, not the tokenizer); without a vocabulary, the bytes."""
    from specreg.gguf.reader import GGUFArray

    tokens = gf.metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, GGUFArray):
        return lambda text: len(text.encode())
    pieces = {t.translate(_MARKERS) for t in tokens.to_list() if 0 < len(t) <= _MAX_PIECE}

    def count(text: str) -> int:
        n, i = 0, 0
        while i < len(text):
            for width in range(min(_MAX_PIECE, len(text) - i), 0, -1):
                if text[i : i + width] in pieces:
                    i += width
                    n += 1
                    break
            else:
                n += len(text[i].encode("utf-8", "surrogatepass"))
                i += 1
        return min(n, len(text.encode("utf-8", "surrogatepass")))

    return count


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


def served_requests(
    rows: Sequence[RequestRow],
    input_tokens: dict[str, int | None],
    chat: set[str],
    warmup: Sequence[tuple[str, int, int | None]] = (),
) -> list[Served] | None:
    """The requests one server start served, in the order they finished (the order slots were
    freed and taken again), as the prompt cache saw them: each prompt's tokens on this server,
    its output less the last token (sampled, never decoded into the cache) and the tokens it
    drafted. `warmup`: (prompt id, output tokens, drafted) of the warm-up requests sent first;
    `chat`: the ids sent as chat messages. None when a prompt's token count is unknown. A
    request answered with an error and no token (not a time-out) was refused before its first
    batch: `refused`."""
    out = []
    rows_in = [
        (r.prompt_id, r.output_tokens or 0, row_drafted(r), not r.ok and not r.timed_out and not r.output_tokens)
        for r in rows
    ]
    for pid, n_out, drafted, refused in [*((p, n, d, False) for p, n, d in warmup), *rows_in]:
        n = input_tokens.get(pid)
        if n is None:
            return None
        out.append(Served(pid, n, n + max(0, n_out - 1), pid in chat, refused=refused, drafted=drafted))
    return out


def row_drafted(r: RequestRow) -> int | None:
    """A stored request's drafted tokens (client.Completion.drafted: draft_n, left out by the
    server when 0; the row's prompt_n says the timings came)."""
    if r.draft_n is not None:
        return r.draft_n
    return 0 if r.prompt_n is not None else None
