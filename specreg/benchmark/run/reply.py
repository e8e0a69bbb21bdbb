"""A llama.cpp server's reply, read one untrusted event at a time into a `Completion`.

What a server sends is input like any other: every field is checked for its JSON type and a
plausible range before it is kept (`Malformed` otherwise, which the client turns into the row's
error), numbers must be finite, and lists are cut to what was asked for. Client timings come
from when each event reached the client: TTFT is the first event with generated text, and every
event is an arrival of as many tokens as its `tokens_predicted` grew by (the server holds back
text that ends inside a UTF-8 sequence, then sends several tokens' text in one event). Each
event carries only the id of the token that released its text, so a stream whose events covered
several tokens has an incomplete id list (`Completion.ids_complete`); the whole answer of a
non-streamed request holds every id (`read_answer`). The transport (HTTP, deadlines, size caps)
is client.py's.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from specreg.schemas.request_row import MAX_OUTPUT_TOKENS

_FINISH = {"limit": "length", "eos": "stop", "word": "stop"}  # /completion stop_type -> OpenAI names
_MAX_INT = 1 << 53  # counts and token ids from the server; beyond this they are not counts


class Malformed(ValueError):
    """An event whose fields have the wrong JSON types or impossible values."""


@dataclass(frozen=True)
class TokenProbs:
    """One generated token of a `completion_probabilities` answer: its id and log-probability and
    the top candidates at its position as (id, text, log-probability)."""

    id: int
    logprob: float
    top: list[tuple[int, str, float]]


@dataclass
class Completion:
    """One streamed request as the client saw it."""

    ok: bool = False
    error: str | None = None
    timed_out: bool = False
    ttft_ms: float | None = None
    total_ms: float | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    text: str = ""
    token_ids: list[int] | None = None  # the ids the stream carried, in order (None: chat)
    id_positions: list[int] = field(default_factory=list)  # each id's place among the generated tokens
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (ms since sent, tokens it brought)
    timings: dict[str, Any] = field(default_factory=dict)
    tokens_seen: int = 0  # tokens the events so far stood for
    first_text: int | None = None  # index in `arrivals` of the event with the first text
    # `record_ids(n_probs=...)`: per generated token, the server's top candidates before sampling
    # (the softmax over every logit, llama.cpp `get_token_probabilities`), best first
    probs: list[TokenProbs] = field(default_factory=list)

    @property
    def ids_complete(self) -> bool:
        """Did the stream carry the id of every token the server generated?"""
        n = self.output_tokens
        return self.token_ids is not None and n is not None and self.id_positions == list(range(n))

    @property
    def drafted(self) -> int | None:
        """Tokens the server drafted for this request: timings.draft_n, which it leaves out when
        0 (server-common.cpp); None without the timings (no answer, or one cut short)."""
        v = self.timings.get("draft_n")
        if isinstance(v, (int, float)):
            return int(v)
        return 0 if "predicted_n" in self.timings else None

    @property
    def tpot_ms(self) -> float | None:
        """Time per output token after the first text: (last arrival - TTFT) / tokens that arrived
        after the first text event (that event may have brought several)."""
        first = self.first_text
        if first is None or self.ttft_ms is None:
            return None
        later = self.arrivals[first + 1 :]
        n = sum(k for _, k in later)
        return (later[-1][0] - self.ttft_ms) / n if n else None


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def read_count(value: object, what: str) -> int:
    """A count or token id from the server: a non-negative JSON integer that is a plausible count."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _MAX_INT:
        raise Malformed(f"{what} is {str(value)[:40]!r}, not a count")
    return value


def _logprob(value: object, what: str) -> float:
    """A log-probability: a finite number <= 0 (llama.cpp writes the lowest float for p = 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1e39 < value <= 1e-6:
        raise Malformed(f"{what} is {str(value)[:40]!r}, not a log-probability")
    return min(float(value), 0.0)


def _probabilities(value: object, n_probs: int) -> list[TokenProbs]:
    """`completion_probabilities` (one entry per generated token: id, token, logprob, top_logprobs
    of id, token, logprob), each list no longer than the server was asked for."""
    if not isinstance(value, list):
        raise Malformed(f"completion_probabilities is a {type(value).__name__}, not a list")
    out: list[TokenProbs] = []
    for entry in value[:MAX_OUTPUT_TOKENS]:
        if not isinstance(entry, dict) or not isinstance(entry.get("top_logprobs"), list):
            raise Malformed("a completion_probabilities entry has no top_logprobs list")
        top = []
        for t in entry["top_logprobs"][:n_probs]:
            if not isinstance(t, dict):
                raise Malformed("a top_logprobs entry is not an object")
            tid, text = read_count(t.get("id"), "a token id"), _text(t.get("token"), "token")
            top.append((tid, text, _logprob(t.get("logprob"), "logprob")))
        tid = read_count(entry.get("id"), "a token id")
        out.append(TokenProbs(tid, _logprob(entry.get("logprob"), "logprob"), top))
    return out


def read_timings(value: object) -> dict[str, Any]:
    """llama.cpp's per-request `timings` object: numbers only, finite and in range."""
    if not isinstance(value, dict):
        raise Malformed(f"timings is a {type(value).__name__}, not an object")
    clean: dict[str, Any] = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not -_MAX_INT < v < _MAX_INT:
            raise Malformed(f"timings.{str(k)[:40]} is {str(v)[:40]!r}, not a number")
        clean[str(k)] = v
    return clean


def _text(value: object, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Malformed(f"{what} is a {type(value).__name__}, not a string")
    return value


def _arrive(out: Completion, t0: float, tokens: int, text: str) -> None:
    """One event that brought `tokens` generated tokens and `text`: an arrival, and TTFT at the
    first event with text."""
    if tokens <= 0 and not text:
        return
    t = (time.perf_counter() - t0) * 1000.0
    if tokens > 0:
        out.arrivals.append((t, tokens))
    if text and out.ttft_ms is None:
        out.ttft_ms = t
        out.first_text = len(out.arrivals) - 1 if out.arrivals else None


def completion_event(out: Completion, ev: dict[str, Any], t0: float) -> None:
    content = _text(ev.get("content"), "content")
    tokens = ev.get("tokens") or []
    if not isinstance(tokens, list):
        raise Malformed(f"tokens is a {type(tokens).__name__}, not a list")
    ids = [read_count(t, "a token id") for t in tokens]
    stop = bool(ev.get("stop"))
    if stop:
        out.timings = read_timings(ev.get("timings") or {})
    n = ev.get("tokens_predicted", out.timings.get("predicted_n") if stop else None)
    # tokens this event stands for: its `tokens_predicted` less the count before it; a server
    # without the count: its ids, or one token for text without ids
    if n is not None:
        n = read_count(n, "tokens_predicted")
        if n < out.tokens_seen:
            raise Malformed(f"tokens_predicted went back from {out.tokens_seen} to {n}")
        new = n - out.tokens_seen
    else:
        new = len(ids) or (1 if content and not stop else 0)
    if len(ids) > new:
        raise Malformed(f"{len(ids)} token ids for {new} new token(s)")
    # the ids are the event's last tokens: each event carries the token that released its text
    start = out.tokens_seen + new - len(ids)
    out.tokens_seen += new
    _arrive(out, t0, new, content)
    out.text += content
    if out.token_ids is not None and ids:
        out.token_ids.extend(ids)
        out.id_positions.extend(range(start, start + len(ids)))
    if stop:
        out.finish_reason = _FINISH.get(str(ev.get("stop_type")), str(ev.get("stop_type"))[:40])
        out.output_tokens = n if n is not None else out.tokens_seen


def chat_event(out: Completion, ev: dict[str, Any], t0: float) -> None:
    choices = ev.get("choices") or []
    if not isinstance(choices, list):
        raise Malformed(f"choices is a {type(choices).__name__}, not a list")
    text = ""
    for choice in choices:
        if not isinstance(choice, dict):
            raise Malformed("a choice is not an object")
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise Malformed("delta is not an object")
        text += _text(delta.get("content"), "delta.content")
        if choice.get("finish_reason"):
            out.finish_reason = str(choice["finish_reason"])[:40]
    timings = read_timings(ev["timings"]) if ev.get("timings") else None
    if timings is not None:
        out.timings = timings  # per chunk (timings_per_token): the last one is the request's
    # a chunk's tokens: how far its `timings.predicted_n` moved; a chunk without: one for text
    n = timings.get("predicted_n") if timings is not None else None
    if n is not None:
        n = read_count(n, "timings.predicted_n")
        new = max(0, n - out.tokens_seen)
        out.tokens_seen = max(out.tokens_seen, n)
    else:
        new = 1 if text else 0
        out.tokens_seen += new
    _arrive(out, t0, new, text)
    out.text += text
    usage = ev.get("usage") or {}
    if not isinstance(usage, dict):
        raise Malformed(f"usage is a {type(usage).__name__}, not an object")
    n = usage.get("completion_tokens", out.timings.get("predicted_n") if out.timings else None)
    if n is not None:
        out.output_tokens = read_count(n, "completion_tokens")


def parse_json(data: bytes) -> object:
    """One event or answer as JSON: finite numbers only (NaN, Infinity and out-of-range numbers
    raise ValueError, as malformed JSON does; RecursionError past the parser's depth)."""
    return json.loads(data, parse_float=_finite, parse_constant=_no_constant)


def read_answer(out: Completion, ev: object, n_probs: int | None) -> None:
    """A whole (non-streamed) `/completion` answer with `return_tokens` into `out`: its text,
    every generated id, its timings and, when asked for (`n_probs`), the top candidates."""
    if not isinstance(ev, dict):
        raise Malformed("the answer is not an object")
    out.text = _text(ev.get("content"), "content")
    tokens = ev.get("tokens") or []
    if not isinstance(tokens, list):
        raise Malformed(f"tokens is a {type(tokens).__name__}, not a list")
    out.token_ids = [read_count(t, "a token id") for t in tokens]
    out.id_positions = list(range(len(out.token_ids)))
    out.timings = read_timings(ev.get("timings") or {})
    n = ev.get("tokens_predicted", out.timings.get("predicted_n"))
    out.output_tokens = read_count(n, "tokens_predicted") if n is not None else None
    out.finish_reason = _FINISH.get(str(ev.get("stop_type")), str(ev.get("stop_type"))[:40])
    if n_probs is not None:
        out.probs = _probabilities(ev.get("completion_probabilities"), n_probs)
