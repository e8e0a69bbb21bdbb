"""HTTP client for llama.cpp's native API: streamed completions with client-side timing.

TTFT is measured by the client (first streamed content), the server's own `timings` come from
the final event. Every failure mode becomes data on the outcome (error text, timed_out) so a
bad request never loses the rows around it; only `/tokenize` and `/metrics` raise ServerError.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from specreg.errors import ServerError
from specreg.schemas.bench import WorkloadItem

_FINISH = {"limit": "length", "eos": "stop", "word": "stop"}  # /completion stop_type -> OpenAI names
# One SSE line is one JSON event: a token or two, or the final event with timings and settings
# (llama.cpp echoes the prompt there: tens of KiB for long contexts). A line past the cap, or a
# response past the total cap, is a request error, not memory the client keeps growing.
MAX_LINE_BYTES = 4 << 20
MAX_RESPONSE_BYTES = 64 << 20
_MAX_INT = 1 << 53  # counts and token ids from the server; beyond this they are not counts


class _StreamLimit(Exception):
    """The stream broke a client limit (deadline, line length, total size)."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class _Malformed(ValueError):
    """An event whose fields have the wrong JSON types or impossible values."""


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
    token_ids: list[int] | None = None
    timings: dict[str, Any] = field(default_factory=dict)

    @property
    def tpot_ms(self) -> float | None:
        """(total - TTFT) / (n - 1): time per output token after the first."""
        n = self.output_tokens
        if self.total_ms is None or self.ttft_ms is None or not n or n < 2:
            return None
        return (self.total_ms - self.ttft_ms) / (n - 1)


class LlamaClient:
    """One server's HTTP API; thread-safe (one pooled httpx client)."""

    def __init__(self, base_url: str, *, timeout_s: float = 120.0, max_connections: int = 16) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            # No keep-alive: a pooled connection the server is closing fails the next request with
            # "disconnected without sending a response" - a spurious error row. A fresh loopback
            # connection costs ~0.1 ms.
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=0),
            trust_env=False,  # loopback only: never through a proxy from the environment
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> LlamaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plain endpoints ------------------------------------------------------------------------

    def _get(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
        """(status, body) of one plain call; idempotent calls get one retry on a dropped connection,
        never on a timeout. The body is read up to MAX_RESPONSE_BYTES and within the timeout, however
        long the server keeps sending (a read timeout alone never fires on an endless answer)."""
        timeout_s = min(self.timeout_s, 30.0)
        for attempt in (1, 2):
            try:
                with self._http.stream(method, path, json=body, timeout=timeout_s) as r:
                    return r.status_code, _bounded_body(r, time.perf_counter() + timeout_s, path, timeout_s)
            except (httpx.RemoteProtocolError, httpx.ConnectError) as exc:
                if attempt == 2:
                    raise ServerError(f"{path}: {type(exc).__name__}: {exc}") from exc
            except httpx.HTTPError as exc:
                raise ServerError(f"{path}: {type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        status, data = self._get(method, path, body)
        text = data[:200].decode("utf-8", "replace")
        if status != 200:
            raise ServerError(f"{path}: HTTP {status}: {text}")
        try:
            return json.loads(data, parse_float=_finite, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting past the parser's depth
            raise ServerError(f"{path}: malformed JSON from server: {text!r}") from exc

    def tokenize(self, text: str) -> list[int]:
        """Token ids as the server's own tokenizer produces them (with BOS, as a completion would)."""
        data = self._json("POST", "/tokenize", {"content": text, "add_special": True})
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise ServerError(f"/tokenize: unexpected answer {str(data)[:200]!r}")
        try:
            return [_count(t, "a token id") for t in tokens]
        except _Malformed as exc:
            raise ServerError(f"/tokenize: unexpected answer ({exc})") from None

    def apply_template(self, messages: list[dict[str, str]]) -> str:
        """The prompt text the chat template makes of `messages`."""
        data = self._json("POST", "/apply-template", {"messages": messages})
        prompt = data.get("prompt") if isinstance(data, dict) else None
        if not isinstance(prompt, str):
            raise ServerError(f"/apply-template: unexpected answer {str(data)[:200]!r}")
        return prompt

    def input_tokens(self, item: WorkloadItem) -> int:
        """Input token count of a workload item on this server."""
        if item.prompt is not None:
            return len(self.tokenize(item.prompt))
        messages = [m.model_dump() for m in item.messages or []]
        return len(self.tokenize(self.apply_template(messages)))

    def metrics_text(self) -> str:
        status, data = self._get("GET", "/metrics")
        if status != 200:
            raise ServerError(f"/metrics: HTTP {status} (was the server started with --metrics?)")
        return data.decode("utf-8", "replace")

    # -- streamed generation --------------------------------------------------------------------

    def complete(
        self,
        item: WorkloadItem,
        *,
        max_tokens: int,
        seed: int,
        temperature: float = 0.0,
        cache_prompt: bool = False,
        timeout_s: float | None = None,
    ) -> Completion:
        """Stream one request (`/completion` for a prompt, `/v1/chat/completions` for messages)."""
        common = {"temperature": temperature, "seed": seed, "stream": True, "cache_prompt": cache_prompt}
        if item.prompt is not None:
            path = "/completion"
            body: dict[str, Any] = {"prompt": item.prompt, "n_predict": max_tokens, **common}
        else:
            path = "/v1/chat/completions"
            body = {
                "messages": [m.model_dump() for m in item.messages or []],
                "max_tokens": max_tokens,
                "stream_options": {"include_usage": True},
                **common,
            }
        return self._stream(path, body, timeout_s or self.timeout_s, chat=item.prompt is None)

    def _stream(self, path: str, body: dict[str, Any], timeout_s: float, *, chat: bool) -> Completion:
        out = Completion(token_ids=None if chat else [])
        t0 = time.perf_counter()
        deadline = t0 + timeout_s
        try:
            with self._http.stream("POST", path, json=body, timeout=httpx.Timeout(timeout_s, connect=5.0)) as r:
                if r.status_code != 200:
                    r.read()
                    out.error = f"HTTP {r.status_code}: {r.text[:300]}"
                    return out
                on_event = _chat_event if chat else _completion_event
                for line in _sse_lines(r, deadline, timeout_s):
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        break
                    try:
                        event = json.loads(payload, parse_float=_finite, parse_constant=_no_constant)
                    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
                        event = None
                    if not isinstance(event, dict):
                        out.error = f"malformed event from server: {payload[:200].decode('utf-8', 'replace')!r}"
                        return out
                    if "error" in event:
                        out.error = f"server error: {json.dumps(event['error'])[:300]}"
                        return out
                    try:
                        on_event(out, event, t0)
                    except (_Malformed, TypeError, ValueError, AttributeError, OverflowError) as exc:
                        out.error = f"malformed event from server ({exc}): {payload[:200].decode('utf-8', 'replace')!r}"
                        return out
        except _StreamLimit as exc:
            out.timed_out, out.error = exc.timed_out, str(exc)
            return out
        except httpx.TimeoutException:
            out.timed_out, out.error = True, f"timed out after {timeout_s:g}s"
            return out
        except httpx.HTTPError as exc:
            out.error = f"{type(exc).__name__}: {exc}"[:300]
            return out
        finally:
            out.total_ms = (time.perf_counter() - t0) * 1000.0
        if out.finish_reason is None:
            out.error = "stream ended without a final event"
            return out
        out.ok = True
        return out


def _sse_lines(r: httpx.Response, deadline: float, timeout_s: float) -> Iterator[bytes]:
    """Lines of an SSE body as bytes, as they arrive, checking the deadline on every chunk (a
    server that never sends a newline, or trickles bytes, still times out) and bounding a line
    and the whole body. Raw bytes, no text/line decoders and no content decoding: each event is
    JSON, decoded once (~0.5 ms off the median per-request overhead, 32 tokens), and a
    compressed answer cannot expand past the caps."""
    pending: list[bytes] = []  # pieces of the unfinished line, joined once when it ends
    pending_n = total = 0
    for chunk in r.iter_raw():
        if time.perf_counter() > deadline:
            raise _StreamLimit(f"timed out after {timeout_s:g}s", timed_out=True)
        total += len(chunk)
        if total > MAX_RESPONSE_BYTES:
            raise _StreamLimit(f"server sent more than {MAX_RESPONSE_BYTES >> 20} MiB for one request")
        if b"\n" not in chunk:
            pending.append(chunk)
            pending_n += len(chunk)
            if pending_n > MAX_LINE_BYTES:
                raise _StreamLimit(f"server sent a line longer than {MAX_LINE_BYTES >> 20} MiB")
            continue
        first, *lines, rest = chunk.split(b"\n")
        if pending_n + len(first) > MAX_LINE_BYTES or any(len(x) > MAX_LINE_BYTES for x in lines):
            raise _StreamLimit(f"server sent a line longer than {MAX_LINE_BYTES >> 20} MiB")
        yield b"".join((*pending, first)) if pending else first
        yield from lines
        pending, pending_n = ([rest], len(rest)) if rest else ([], 0)
    if pending:
        yield b"".join(pending)


def _bounded_body(r: httpx.Response, deadline: float, path: str, timeout_s: float) -> bytes:
    """A plain answer's body, at most MAX_RESPONSE_BYTES and only until `deadline`."""
    parts: list[bytes] = []
    total = 0
    for chunk in r.iter_bytes():
        total += len(chunk)
        if total > MAX_RESPONSE_BYTES:
            raise ServerError(f"{path}: server sent more than {MAX_RESPONSE_BYTES >> 20} MiB")
        if time.perf_counter() > deadline:
            raise ServerError(f"{path}: the answer did not end within {timeout_s:g}s")
        parts.append(chunk)
    return b"".join(parts)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _count(value: object, what: str) -> int:
    """A count or token id from the server: a non-negative JSON integer that is a plausible count."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _MAX_INT:
        raise _Malformed(f"{what} is {str(value)[:40]!r}, not a count")
    return value


def _timings(value: object) -> dict[str, Any]:
    """llama.cpp's per-request `timings` object: numbers only, finite and in range."""
    if not isinstance(value, dict):
        raise _Malformed(f"timings is a {type(value).__name__}, not an object")
    clean: dict[str, Any] = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not -_MAX_INT < v < _MAX_INT:
            raise _Malformed(f"timings.{str(k)[:40]} is {str(v)[:40]!r}, not a number")
        clean[str(k)] = v
    return clean


def _text(value: object, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Malformed(f"{what} is a {type(value).__name__}, not a string")
    return value


def _first(out: Completion, t0: float) -> None:
    if out.ttft_ms is None:
        out.ttft_ms = (time.perf_counter() - t0) * 1000.0


def _completion_event(out: Completion, ev: dict[str, Any], t0: float) -> None:
    content = _text(ev.get("content"), "content")
    tokens = ev.get("tokens") or []
    if not isinstance(tokens, list):
        raise _Malformed(f"tokens is a {type(tokens).__name__}, not a list")
    if content or tokens:
        _first(out, t0)
        out.text += content
        if out.token_ids is not None:
            out.token_ids.extend(_count(t, "a token id") for t in tokens)
    if ev.get("stop"):
        out.finish_reason = _FINISH.get(str(ev.get("stop_type")), str(ev.get("stop_type"))[:40])
        out.timings = _timings(ev.get("timings") or {})
        n = ev.get("tokens_predicted", out.timings.get("predicted_n"))
        out.output_tokens = _count(n, "tokens_predicted") if n is not None else None


def _chat_event(out: Completion, ev: dict[str, Any], t0: float) -> None:
    choices = ev.get("choices") or []
    if not isinstance(choices, list):
        raise _Malformed(f"choices is a {type(choices).__name__}, not a list")
    for choice in choices:
        if not isinstance(choice, dict):
            raise _Malformed("a choice is not an object")
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise _Malformed("delta is not an object")
        content = _text(delta.get("content"), "delta.content")
        if content:
            _first(out, t0)
            out.text += content
        if choice.get("finish_reason"):
            out.finish_reason = str(choice["finish_reason"])[:40]
    if ev.get("timings"):
        out.timings = _timings(ev["timings"])
    usage = ev.get("usage") or {}
    if not isinstance(usage, dict):
        raise _Malformed(f"usage is a {type(usage).__name__}, not an object")
    n = usage.get("completion_tokens", out.timings.get("predicted_n") if out.timings else None)
    if n is not None:
        out.output_tokens = _count(n, "completion_tokens")
