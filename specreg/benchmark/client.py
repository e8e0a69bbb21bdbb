"""HTTP client for llama.cpp's native API: streamed completions with client-side timing.

Client timings come from when each token reached the client: TTFT is the first event with
generated text, and every event is an arrival of as many tokens as its `tokens_predicted` grew
by (the server holds back text that ends inside a UTF-8 sequence, then sends several tokens'
text in one event). The server's own `timings` come from the final event. Each event carries
only the id of the token that released its text (llama.cpp `process_token` /
`send_partial_response`, b11434 and the bundled build alike), so a stream whose events covered
several tokens has an incomplete id list; `record_ids` asks the same server again without
streaming and with `return_tokens`, the one answer that holds every generated id. Every
failure mode becomes data on the outcome (error text, timed_out) so a bad request never loses
the rows around it; only `/tokenize` and `/metrics` raise ServerError.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import field
from typing import Any

import httpx

from specreg.errors import ServerError
from specreg.lazyclass import dataclass
from specreg.schemas.bench import MAX_OUTPUT_TOKENS, WorkloadItem
from specreg.units import size_text

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


class LlamaClient:
    """One server's HTTP API; thread-safe (one pooled httpx client)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 120.0,
        max_connections: int = 16,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes  # a plain answer's cap (`specreg watch`: far below a run's)
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
                    deadline = time.perf_counter() + timeout_s
                    return r.status_code, _capped_body(r, deadline, timeout_s, self.max_response_bytes)
            except _StreamLimit as exc:
                raise ServerError(f"{path}: {exc}") from None
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

    def detokenize(self, ids: list[int]) -> str:
        """The text of token ids as the server's own vocabulary spells it."""
        data = self._json("POST", "/detokenize", {"tokens": ids})
        content = data.get("content") if isinstance(data, dict) else None
        if not isinstance(content, str):
            raise ServerError(f"/detokenize: unexpected answer {str(data)[:200]!r}")
        return content

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

    def get(self, path: str) -> tuple[int, bytes]:
        """(status, body) of a GET, bounded like every plain call; ServerError when nothing answered."""
        return self._get("GET", path)

    def get_json(self, path: str) -> Any:
        """A GET endpoint's JSON answer (`/props`, `/slots`), bounded like every plain call; the
        caller checks its shape."""
        return self._json("GET", path)

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
        sampling: dict[str, float | int] | None = None,
        cache_prompt: bool = False,
        timeout_s: float | None = None,
    ) -> Completion:
        """Stream one request (`/completion` for a prompt, `/v1/chat/completions` for messages);
        `sampling` (temperature, top_p, top_k, min_p: schemas/sampling.py) overrides `temperature`."""
        common = {"temperature": temperature, **(sampling or {}), "seed": seed, "stream": True}
        common["cache_prompt"] = cache_prompt
        if item.prompt is not None:
            path = "/completion"
            body: dict[str, Any] = {"prompt": item.prompt, "n_predict": max_tokens, **common}
        else:
            path = "/v1/chat/completions"
            body = {
                "messages": [m.model_dump() for m in item.messages or []],
                "max_tokens": max_tokens,
                "stream_options": {"include_usage": True},
                "timings_per_token": True,  # each chunk's predicted_n: how many tokens it brought
                **common,
            }
        return self._stream(path, body, timeout_s or self.timeout_s, chat=item.prompt is None)

    def record_ids(
        self,
        prompt: str,
        *,
        max_tokens: int,
        seed: int,
        temperature: float = 0.0,
        sampling: dict[str, float | int] | None = None,
        timeout_s: float | None = None,
        n_probs: int = 0,
    ) -> Completion:
        """The same `/completion` without streaming and with `return_tokens`: the server's answer
        then holds every generated id (`slot.generated_tokens`, kept before the UTF-8 check that
        holds text back), with the text and the token count. Not timed: a record, not a measurement.
        `n_probs` > 0 also asks for each token's top candidates (`Completion.probs`)."""
        body = {
            "prompt": prompt, "n_predict": max_tokens, "temperature": temperature, "seed": seed,
            "stream": False, "cache_prompt": False, "return_tokens": True, **(sampling or {}),
        }  # fmt: skip
        if n_probs > 0:  # pre-sampling log-probabilities ("logprob", "top_logprobs"): server-task.cpp
            body |= {"n_probs": n_probs, "post_sampling_probs": False}
        out = Completion()
        timeout_s = timeout_s or self.timeout_s
        t0 = time.perf_counter()
        with _transport(out, timeout_s, t0):
            self._record(out, body, timeout_s, t0)
        if out.error is None:
            out.ok = True
        return out

    def _record(self, out: Completion, body: dict[str, Any], timeout_s: float, t0: float) -> None:
        """`record_ids`' request and the answer's fields; a malformed answer is the row's error."""
        try:
            with self._http.stream(
                "POST", "/completion", json=body, timeout=httpx.Timeout(timeout_s, connect=5.0)
            ) as r:
                data = _capped_body(r, t0 + timeout_s, timeout_s)
                if r.status_code != 200:
                    out.error = f"HTTP {r.status_code}: {data[:300].decode('utf-8', 'replace')}"
                    return
            ev = json.loads(data, parse_float=_finite, parse_constant=_no_constant)
            if not isinstance(ev, dict):
                raise _Malformed("the answer is not an object")
            out.text = _text(ev.get("content"), "content")
            tokens = ev.get("tokens") or []
            if not isinstance(tokens, list):
                raise _Malformed(f"tokens is a {type(tokens).__name__}, not a list")
            out.token_ids = [_count(t, "a token id") for t in tokens]
            out.id_positions = list(range(len(out.token_ids)))
            out.timings = _timings(ev.get("timings") or {})
            n = ev.get("tokens_predicted", out.timings.get("predicted_n"))
            out.output_tokens = _count(n, "tokens_predicted") if n is not None else None
            out.finish_reason = _FINISH.get(str(ev.get("stop_type")), str(ev.get("stop_type"))[:40])
            if "n_probs" in body:
                out.probs = _probabilities(ev.get("completion_probabilities"), int(body["n_probs"]))
        except (_Malformed, TypeError, ValueError, OverflowError, RecursionError) as exc:
            why = "nested too deep" if isinstance(exc, RecursionError) else exc  # past the parser's depth
            out.error = f"malformed answer from server ({why})"[:300]

    def _stream(self, path: str, body: dict[str, Any], timeout_s: float, *, chat: bool) -> Completion:
        out = Completion(token_ids=None if chat else [])
        t0 = time.perf_counter()
        deadline = t0 + timeout_s
        with (
            _transport(out, timeout_s, t0),
            self._http.stream("POST", path, json=body, timeout=httpx.Timeout(timeout_s, connect=5.0)) as r,
        ):
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
        if out.error is not None:
            return out
        if out.finish_reason is None:
            out.error = "stream ended without a final event"
            return out
        out.ok = True
        return out


@contextmanager
def _transport(out: Completion, timeout_s: float, t0: float) -> Iterator[None]:
    """What every request turns into its row's error instead of raising (a limit of ours, a
    timeout, any HTTP failure), and the request's total time, however it ended."""
    try:
        yield
    except _StreamLimit as exc:
        out.timed_out, out.error = exc.timed_out, str(exc)
    except httpx.TimeoutException:
        out.timed_out, out.error = True, f"timed out after {timeout_s:g}s"
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        out.total_ms = (time.perf_counter() - t0) * 1000.0


def _sse_lines(r: httpx.Response, deadline: float, timeout_s: float) -> Iterator[bytes]:
    """Lines of an SSE body as bytes, as they arrive, checking the deadline on every chunk (a
    server that never sends a newline, or trickles bytes, still times out) and bounding a line
    and the whole body. Raw bytes, no text/line decoders and no content decoding: each event is
    JSON, decoded once (the client's overhead is on every request's measured time), and a
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


def _capped_body(r: httpx.Response, deadline: float, timeout_s: float, cap: int = MAX_RESPONSE_BYTES) -> bytes:
    """A whole (non-streamed) answer, bounded in size (decoded bytes) and in time like a stream,
    however long the server keeps sending (a read timeout alone never fires on an endless answer)."""
    parts: list[bytes] = []
    total = 0
    for chunk in r.iter_bytes():
        if time.perf_counter() > deadline:
            raise _StreamLimit(f"the answer did not end within {timeout_s:g}s", timed_out=True)
        total += len(chunk)
        if total > cap:
            raise _StreamLimit(f"server sent more than {size_text(cap)} for one request")
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


def _logprob(value: object, what: str) -> float:
    """A log-probability: a finite number <= 0 (llama.cpp writes the lowest float for p = 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1e39 < value <= 1e-6:
        raise _Malformed(f"{what} is {str(value)[:40]!r}, not a log-probability")
    return min(float(value), 0.0)


def _probabilities(value: object, n_probs: int) -> list[TokenProbs]:
    """`completion_probabilities` (one entry per generated token: id, token, logprob, top_logprobs
    of id, token, logprob), each list no longer than the server was asked for."""
    if not isinstance(value, list):
        raise _Malformed(f"completion_probabilities is a {type(value).__name__}, not a list")
    out: list[TokenProbs] = []
    for entry in value[:MAX_OUTPUT_TOKENS]:
        if not isinstance(entry, dict) or not isinstance(entry.get("top_logprobs"), list):
            raise _Malformed("a completion_probabilities entry has no top_logprobs list")
        top = []
        for t in entry["top_logprobs"][:n_probs]:
            if not isinstance(t, dict):
                raise _Malformed("a top_logprobs entry is not an object")
            tid, text = _count(t.get("id"), "a token id"), _text(t.get("token"), "token")
            top.append((tid, text, _logprob(t.get("logprob"), "logprob")))
        out.append(TokenProbs(_count(entry.get("id"), "a token id"), _logprob(entry.get("logprob"), "logprob"), top))
    return out


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


def _completion_event(out: Completion, ev: dict[str, Any], t0: float) -> None:
    content = _text(ev.get("content"), "content")
    tokens = ev.get("tokens") or []
    if not isinstance(tokens, list):
        raise _Malformed(f"tokens is a {type(tokens).__name__}, not a list")
    ids = [_count(t, "a token id") for t in tokens]
    stop = bool(ev.get("stop"))
    if stop:
        out.timings = _timings(ev.get("timings") or {})
    n = ev.get("tokens_predicted", out.timings.get("predicted_n") if stop else None)
    # tokens this event stands for: its `tokens_predicted` less the count before it; a server
    # without the count: its ids, or one token for text without ids
    if n is not None:
        n = _count(n, "tokens_predicted")
        if n < out.tokens_seen:
            raise _Malformed(f"tokens_predicted went back from {out.tokens_seen} to {n}")
        new = n - out.tokens_seen
    else:
        new = len(ids) or (1 if content and not stop else 0)
    if len(ids) > new:
        raise _Malformed(f"{len(ids)} token ids for {new} new token(s)")
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


def _chat_event(out: Completion, ev: dict[str, Any], t0: float) -> None:
    choices = ev.get("choices") or []
    if not isinstance(choices, list):
        raise _Malformed(f"choices is a {type(choices).__name__}, not a list")
    text = ""
    for choice in choices:
        if not isinstance(choice, dict):
            raise _Malformed("a choice is not an object")
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise _Malformed("delta is not an object")
        text += _text(delta.get("content"), "delta.content")
        if choice.get("finish_reason"):
            out.finish_reason = str(choice["finish_reason"])[:40]
    timings = _timings(ev["timings"]) if ev.get("timings") else None
    if timings is not None:
        out.timings = timings  # per chunk (timings_per_token): the last one is the request's
    # a chunk's tokens: how far its `timings.predicted_n` moved; a chunk without: one for text
    n = timings.get("predicted_n") if timings is not None else None
    if n is not None:
        n = _count(n, "timings.predicted_n")
        new = max(0, n - out.tokens_seen)
        out.tokens_seen = max(out.tokens_seen, n)
    else:
        new = 1 if text else 0
        out.tokens_seen += new
    _arrive(out, t0, new, text)
    out.text += text
    usage = ev.get("usage") or {}
    if not isinstance(usage, dict):
        raise _Malformed(f"usage is a {type(usage).__name__}, not an object")
    n = usage.get("completion_tokens", out.timings.get("predicted_n") if out.timings else None)
    if n is not None:
        out.output_tokens = _count(n, "completion_tokens")
