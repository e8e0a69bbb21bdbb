"""HTTP client for llama.cpp's native API: streamed completions with client-side timing.

The transport: one pooled connection per server, every request bounded by a deadline checked on
each chunk, a cap per line and per answer, and every failure (a limit of ours, a timeout, any
HTTP error, a malformed reply) turned into data on the `Completion` (error text, timed_out) so a
bad request never loses the rows around it; only `/tokenize`, `/detokenize`, `/apply-template`
and `/metrics` raise ServerError. Each request is one specreg.remote operation: its timeout is an
overall deadline (however the server trickles or stalls) and its answer is capped at
MAX_RESPONSE_BYTES; SSE lines are bounded here. Reading what the server sent, field by field, is reply.py's.
`record_ids` asks the same server again without streaming and with `return_tokens`, the one
answer that holds every generated id.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import httpx

from specreg import remote
from specreg.benchmark.run.reply import (
    Completion,
    Malformed,
    chat_event,
    completion_event,
    parse_json,
    read_answer,
    read_count,
    read_timings,
)
from specreg.errors import RemoteLimit, ServerError
from specreg.schemas.bench import WorkloadItem

# One SSE line is one JSON event: a token or two, or the final event with timings and settings
# (llama.cpp echoes the prompt there: tens of KiB for long contexts). A line past the cap, or a
# response past the total cap, is a request error, not memory the client keeps growing.
MAX_LINE_BYTES = 4 << 20
MAX_RESPONSE_BYTES = 64 << 20


class _StreamLimit(Exception):
    """The stream broke a client limit of its own (a line's length)."""


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
        self._http = remote.client(
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
            with self._bounded(path, timeout_s) as op:
                try:
                    with self._http.stream(method, path, json=body, timeout=timeout_s) as r:
                        return r.status_code, r.read()
                except RemoteLimit as exc:
                    raise ServerError(f"{path}: {_limit_text(exc, op, timeout_s)}") from None
                except (httpx.RemoteProtocolError, httpx.ConnectError) as exc:
                    if op.over():  # the deadline's watchdog shut the socket: say so, not how it looked
                        raise ServerError(f"{path}: timed out after {timeout_s:g}s") from None
                    if attempt == 2:
                        raise ServerError(f"{path}: {type(exc).__name__}: {exc}") from exc
                except httpx.TimeoutException:  # httpx's own per-read clock can fire before the deadline's
                    raise ServerError(f"{path}: timed out after {timeout_s:g}s") from None
                except httpx.HTTPError as exc:
                    raise ServerError(f"{path}: {type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    def _bounded(self, path: str, timeout_s: float) -> AbstractContextManager[remote.Operation]:
        """One request as a remote operation of its own: `timeout_s` in all, the answer capped."""
        return _bounded_request(f"the answer to {path}", timeout_s, self.max_response_bytes)

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        status, data = self._get(method, path, body)
        text = data[:200].decode("utf-8", "replace")
        if status != 200:
            raise ServerError(f"{path}: HTTP {status}: {text}")
        try:
            return parse_json(data)
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting past the parser's depth
            raise ServerError(f"{path}: malformed JSON from server: {text!r}") from exc

    def tokenize(self, text: str) -> list[int]:
        """Token ids as the server's own tokenizer produces them (with BOS, as a completion would)."""
        data = self._json("POST", "/tokenize", {"content": text, "add_special": True})
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise ServerError(f"/tokenize: unexpected answer {str(data)[:200]!r}")
        try:
            return [read_count(t, "a token id") for t in tokens]
        except Malformed as exc:
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

    def timings(self, prompt: list[int], *, max_tokens: int, ignore_eos: bool = False) -> dict[str, Any]:
        """llama.cpp's own `timings` (prompt_n, prompt_ms, predicted_n, predicted_ms) of one greedy,
        uncached `/completion` of these token ids: the machine probe's measurement, not streamed
        (the server's clock, not the client's, times it)."""
        body = {
            "prompt": prompt, "n_predict": max_tokens, "cache_prompt": False, "temperature": 0.0, "seed": 42,
            "ignore_eos": ignore_eos, "stream": False,
        }  # fmt: skip
        data = self._json("POST", "/completion", body)
        try:
            if not isinstance(data, dict):
                raise Malformed("the answer is not an object")
            return read_timings(data.get("timings") or {})
        except Malformed as exc:
            raise ServerError(f"/completion: unexpected answer ({exc})") from None

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
        ignore_eos: bool = False,
    ) -> Completion:
        """Stream one request (`/completion` for a prompt, `/v1/chat/completions` for messages);
        `sampling` (temperature, top_p, top_k, min_p: schemas/sampling.py) overrides `temperature`;
        `ignore_eos` generates `max_tokens` whatever the model would end on (the pair probe)."""
        common = {"temperature": temperature, **(sampling or {}), "seed": seed, "stream": True}
        common["cache_prompt"] = cache_prompt
        if ignore_eos:
            common["ignore_eos"] = True
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
        with self._bounded("/completion", timeout_s) as op, _transport(out, timeout_s, t0, op):
            self._record(out, body, timeout_s)
        if out.error is None:
            out.ok = True
        return out

    def _record(self, out: Completion, body: dict[str, Any], timeout_s: float) -> None:
        """`record_ids`' request and the answer's fields; a malformed answer is the row's error."""
        try:
            with self._http.stream(
                "POST", "/completion", json=body, timeout=httpx.Timeout(timeout_s, connect=5.0)
            ) as r:
                data = r.read()
                if r.status_code != 200:
                    out.error = f"HTTP {r.status_code}: {data[:300].decode('utf-8', 'replace')}"
                    return
            read_answer(out, parse_json(data), int(body["n_probs"]) if "n_probs" in body else None)
        except (Malformed, TypeError, ValueError, OverflowError, RecursionError) as exc:
            why = "nested too deep" if isinstance(exc, RecursionError) else exc  # past the parser's depth
            out.error = f"malformed answer from server ({why})"[:300]

    def _stream(self, path: str, body: dict[str, Any], timeout_s: float, *, chat: bool) -> Completion:
        out = Completion(token_ids=None if chat else [])
        t0 = time.perf_counter()
        with (
            self._bounded(path, timeout_s) as op,
            _transport(out, timeout_s, t0, op),
            self._http.stream("POST", path, json=body, timeout=httpx.Timeout(timeout_s, connect=5.0)) as r,
        ):
            if r.status_code != 200:
                r.read()
                out.error = f"HTTP {r.status_code}: {r.text[:300]}"
                return out
            on_event = chat_event if chat else completion_event
            for line in _sse_lines(r):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                try:
                    event = parse_json(payload)
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
                except (Malformed, TypeError, ValueError, AttributeError, OverflowError) as exc:
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
def _bounded_request(what: str, timeout_s: float, cap: int = MAX_RESPONSE_BYTES) -> Iterator[remote.Operation]:
    with (
        remote.operation(what, seconds=timeout_s, flag="--request-timeout SECONDS", join=False) as op,
        remote.expect(what, cap),
    ):
        yield op


def _limit_text(exc: RemoteLimit, op: remote.Operation, timeout_s: float) -> str:
    """A row's error for a broken bound: the request's deadline reads as it always has."""
    return f"timed out after {timeout_s:g}s" if op.over() else exc.message


@contextmanager
def _transport(out: Completion, timeout_s: float, t0: float, op: remote.Operation) -> Iterator[None]:
    """What every request turns into its row's error instead of raising (a limit of ours, a
    timeout, any HTTP failure), and the request's total time, however it ended."""
    try:
        yield
    except _StreamLimit as exc:
        out.error = str(exc)
    except RemoteLimit as exc:  # the request's deadline, or the answer past its cap (specreg.remote)
        out.timed_out, out.error = op.over(), _limit_text(exc, op, timeout_s)
    except httpx.TimeoutException:
        out.timed_out, out.error = True, f"timed out after {timeout_s:g}s"
    except httpx.HTTPError as exc:
        if op.over():  # the deadline shut the connection
            out.timed_out, out.error = True, f"timed out after {timeout_s:g}s"
        else:
            out.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        out.total_ms = (time.perf_counter() - t0) * 1000.0


def _sse_lines(r: httpx.Response) -> Iterator[bytes]:
    """Lines of an SSE body as bytes, as they arrive, each bounded (the deadline and the whole
    body's cap are specreg.remote's, on every chunk: a server that never sends a newline, or
    trickles bytes, still times out). Raw bytes, no text/line decoders and no content decoding:
    each event is JSON, decoded once, and the client's overhead is on every request's measured time."""
    pending: list[bytes] = []  # pieces of the unfinished line, joined once when it ends
    pending_n = 0
    for chunk in r.iter_raw():
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
