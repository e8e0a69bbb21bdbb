"""Every HTTP exchange specreg makes with another machine, bounded in time and in size: one owner.

A hub, a CDN or a server on the other end is untrusted: it may answer slowly, never finish,
trickle a byte every few seconds (which resets any per-read timeout), announce or send more
than its caller can use, or link a listing's "next page" to itself. So:

- an *operation* (a hub search, a remote header, a download) has one overall deadline, from
  the command's `--timeout` (or `SPECREG_TIMEOUT`, else the default: `allowance.py`), counted from its
  first request (the imports and local work before it are not the server's); every request in
  it gets only the time left, and a watchdog shuts the operation's sockets when it runs out,
  so a read blocked on a silent or trickling server returns at the deadline, not after it;
- each reply has a byte cap sized by what its caller can use (`expect`): a listing of --limit
  entries, a model's file list, a file of the size the hub declares; an announced
  Content-Length past the cap is refused before any body byte, a body past it at that byte;
- a listing's pages are capped, and a "next" link to a page already read is a loop;
- replies come uncompressed (`Accept-Encoding: identity`), so the cap counts what is kept.

Breaking any bound is one `RemoteLimit` line naming the host, the limit and how to change it.
specreg's own clients (`client()`) and huggingface_hub's (its client factory gets `hooks()`)
go through the same request and response hooks, so one set of rules holds for every exchange;
callers keep their own redirect rules. The llama-server client and the `/health` probe make
their clients here too, each request an operation of its own. The hooks work on whichever
httpx-shaped module made the client (huggingface_hub's is httpx2); httpx itself is imported
only where `client()` makes one.
"""

from __future__ import annotations

import contextvars
import heapq
import math
import re
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

from specreg.allowance import DEFAULT_TIMEOUT_S, allowance, allowed_seconds
from specreg.errors import RemoteError, RemoteLimit
from specreg.text import escape_control
from specreg.units import size_text

DEFAULT_REPLY_BYTES = 16 << 20  # a reply whose caller declared no cap of its own
MAX_PAGES = 10  # pages of one listing (the hub answers a --limit of up to 200 in one)
_PHASES = ("connect", "read", "write", "pool")
_T = TypeVar("_T")


# -- operations and their deadline ---------------------------------------------------------------


class Operation:
    """One remote operation: a deadline every request in it shares, and the sockets it has open
    (the watchdog shuts them at the deadline; thread-safe, a pool of workers may share one)."""

    def __init__(self, what: str, seconds: float, flag: str) -> None:
        self.what = what
        self.seconds = seconds
        self.flag = flag
        self.deadline = math.inf  # set by the first request
        self.host = "?"  # the last host asked: where an overrun is reported when no request names one
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._watched = False
        self._closed = False

    def left(self) -> float:
        return self.seconds if self.deadline == math.inf else self.deadline - time.monotonic()

    def over(self) -> bool:
        return self.left() <= 0

    def overtime(self, host: str | None = None) -> RemoteLimit:
        return RemoteLimit(
            f"{host or self.host}: {self.what} did not finish within {self.seconds:g} s ({self.flag} allows more)",
            hint="the server is slow, stalled or sending without end; nothing was kept",
        )

    def check(self, host: str) -> float:
        """The seconds left for a request to `host`; past the deadline, the one-line error."""
        self.host = host
        if self.deadline == math.inf:
            with self._lock:
                if self.deadline == math.inf:
                    self.deadline = time.monotonic() + self.seconds
        left = self.left()
        if left <= 0:
            raise self.overtime(host)
        return left

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if self._closed:
                return
            self._socks.add(sock)
            first, self._watched = not self._watched, True
        if first:
            _WATCHDOG.add(self)

    def unwatch(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.discard(sock)

    def expire(self) -> None:
        """The deadline passed (the watchdog): shut every socket still open, which wakes a read
        blocked on it; the reader then sees the operation is over and says so."""
        with self._lock:
            socks, self._socks = list(self._socks), set()
            if self._closed:
                return
        for sock in socks:
            _shut(sock)

    def close(self) -> None:
        """The operation ended: its sockets go back to their pool and are no longer watched."""
        with self._lock:
            self._closed = True
            self._socks.clear()


def _shut(sock: socket.socket) -> None:
    # socket.socket's own shutdown, also on a TLS socket: ssl.SSLSocket.shutdown first drops its
    # TLS state, which a read blocked in another thread may still be using; a plain shutdown of
    # the descriptor wakes that read with end-of-file, and the TLS layer reports it as an error.
    with suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watchdog:
    """One daemon thread for every operation: at each one's deadline, `expire` it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, weakref.ref[Operation]]] = []  # an ended operation may go
        self._thread: threading.Thread | None = None

    def add(self, op: Operation) -> None:
        with self._cond:
            heapq.heappush(self._heap, (op.deadline, id(op), weakref.ref(op)))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="specreg-remote-deadlines", daemon=True)
                self._thread.start()
            if self._heap[0][2]() is op:  # the earliest now: the thread waits for it instead
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                _, _, ref = heapq.heappop(self._heap)
            op = ref()
            if op is not None:
                op.expire()


_WATCHDOG = _Watchdog()
_OPERATION: contextvars.ContextVar[Operation | None] = contextvars.ContextVar("specreg_remote_operation", default=None)


@contextmanager
def operation(
    what: str,
    *,
    seconds: float | None = None,
    default: float = DEFAULT_TIMEOUT_S,
    flag: str | None = None,
    join: bool = True,
) -> Iterator[Operation]:
    """One remote operation with its deadline (`seconds`, else `allowed_seconds(default)`; `flag`
    says how to change it, else the command's --timeout). Inside another one it is part of that
    one, the outer deadline holding, unless `join` is false (a request with a deadline of its own)."""
    outer = _OPERATION.get()
    if outer is not None and join:
        yield outer
        return
    op = Operation(what, seconds if seconds is not None else allowed_seconds(default), flag or allowance().flag)
    token = _OPERATION.set(op)
    try:
        yield op
    finally:
        _OPERATION.reset(token)
        op.close()


def _implicit(host: str) -> Operation:
    """A request made outside any operation (a caller that opened none) is an operation alone."""
    return Operation(f"the request to {host}", allowed_seconds(), allowance().flag)


# -- what a reply may hold -----------------------------------------------------------------------


@dataclass
class Expect:
    """What the caller of the requests inside `expect` can use from each reply."""

    what: str  # "the hub's model list"
    max_bytes: int
    why: str = ""  # "--limit 20 entries need less", said when the cap is hit
    max_pages: int = MAX_PAGES
    pages: set[str] = field(default_factory=set)  # listing pages read, for the loop check

    def too_big(self, host: str, *, announced: int | None = None) -> RemoteLimit:
        got = f"announces {size_text(announced)}, more" if announced is not None else "sent more"
        why = f" ({self.why})" if self.why else ""
        return RemoteLimit(
            f"{host}: {self.what} {got} than its cap of {size_text(self.max_bytes)}{why}",
            hint="the server is not answering what was asked; nothing was kept",
        )


_EXPECT: contextvars.ContextVar[Expect | None] = contextvars.ContextVar("specreg_remote_expect", default=None)


@contextmanager
def expect(what: str, max_bytes: int, *, why: str = "", max_pages: int = MAX_PAGES) -> Iterator[Expect]:
    """Each reply to a request made inside may hold at most `max_bytes` (and a listing at most
    `max_pages` pages); `why` says in the error what the cap is sized by."""
    exp = Expect(what, max(0, int(max_bytes)), why, max_pages)
    token = _EXPECT.set(exp)
    try:
        yield exp
    finally:
        _EXPECT.reset(token)


def carried(fn: Callable[..., _T]) -> Callable[..., _T]:
    """`fn` to be run in another thread with this thread's operation, allowance and caps (a pool's
    workers do not inherit them)."""
    ctx = contextvars.copy_context()
    return lambda *args: ctx.copy().run(fn, *args)


# -- the hooks every client gets -----------------------------------------------------------------


def host_of(url: Any) -> str:
    """'host:port' of an httpx(-shaped) URL or a URL string, safe to print."""
    from urllib.parse import urlsplit

    if isinstance(url, str):
        parts = urlsplit(url)
        host, port = parts.hostname or "?", parts.port
    else:
        host, port = url.host or "?", url.port
    return escape_control(f"{host}:{port}" if port else host, limit=120)


def hooks(httpx_module: Any, *, retries: bool = False) -> dict[str, list[Callable[[Any], None]]]:
    """Request and response event hooks that put a client's every request under the bounds above
    (`httpx_module`: httpx, or huggingface_hub's httpx2 - the same API). `retries`: the client's
    owner waits and asks again after a 408, 429 or 5xx (huggingface_hub does, as long as the
    server's Retry-After says): such an answer with less time left than that wait ends here."""
    stream_class = _stream_class(httpx_module.SyncByteStream)

    def on_request(request: Any) -> None:
        host = host_of(request.url)
        op = _OPERATION.get()
        left = (op or _implicit(host)).check(host)
        given = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {p: left if given.get(p) is None else min(given[p], left) for p in _PHASES}
        request.headers["Accept-Encoding"] = "identity"
        if op is not None:  # every new connection's socket is watched from its start (headers included)
            request.extensions["trace"] = _tracer(op, request.extensions.get("trace"))

    def on_response(response: Any) -> None:
        request = response.request
        host = host_of(request.url)
        op = _OPERATION.get() or _implicit(host)
        exp = _EXPECT.get() or Expect("the answer", DEFAULT_REPLY_BYTES)
        sock = None
        if _OPERATION.get() is op:  # a kept-alive connection was not seen connecting: watch it now
            net = response.extensions.get("network_stream")
            sock = net.get_extra_info("socket") if net is not None else None
            if isinstance(sock, socket.socket):
                op.watch(sock)
            else:
                sock = None
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            raise RemoteError(
                f"{host}: the server sent a {escape_control(encoding, limit=20)}-compressed answer, which "
                "specreg did not ask for (its size could not be bounded); refused"
            )
        if retries and response.status_code in _RETRIED:
            wait = _retry_wait(response.headers)
            if wait >= op.left():
                raise RemoteLimit(
                    f"{host}: answered HTTP {response.status_code}, to be asked again in {round(wait):,} s, past the "
                    f"deadline of {op.what} ({op.seconds:g} s; {op.flag} allows more)",
                    hint="the server is busy or limits its rate; try again later",
                )
        _check_pages(response, exp, host)
        length = response.headers.get("content-length", "").strip()
        announced = int(length) if length.isdigit() and request.method != "HEAD" else None
        response.stream = stream_class(response.stream, op, exp, announced, host, sock)

    return {"request": [on_request], "response": [on_response]}


_RETRIED = frozenset((408, 429, 500, 502, 503, 504))  # what huggingface_hub retries
_BACKOFF_S = 8.0  # its longest wait between tries when the server names none
_RATELIMIT_RESET = re.compile(r";\s*t\s*=\s*(\d{1,12})")  # IETF RateLimit: "api";r=0;t=55


def _retry_wait(headers: Any) -> float:
    """The longest a retrying client may wait before asking again: the server's Retry-After
    (seconds) or RateLimit reset, else its own longest backoff."""
    wait = _BACKOFF_S
    after = headers.get("retry-after", "").strip()
    if after.isdigit() and len(after) <= 12:
        wait = max(wait, float(after) + 1)
    reset = _RATELIMIT_RESET.search(headers.get("ratelimit", ""))
    if reset:
        wait = max(wait, float(reset.group(1)) + 1)
    return wait


def _tracer(op: Operation, chained: Any) -> Callable[[str, dict[str, Any]], None]:
    """httpcore's `trace` extension: register each socket the request connects."""

    def trace(event: str, info: dict[str, Any]) -> None:
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                op.watch(sock)
        if chained is not None:
            chained(event, info)

    return trace


def _check_pages(response: Any, exp: Expect, host: str) -> None:
    """A listing's `Link: <...>; rel="next"`: a page already read is a loop, and pages are capped."""
    target = (response.links.get("next") or {}).get("url")
    if not target:
        return
    here = str(response.request.url)
    following = str(response.request.url.join(target))
    exp.pages.add(here)
    if following in exp.pages:
        raise RemoteLimit(
            f"{host}: {exp.what} links its next page to a page already read (a loop of {len(exp.pages)}); stopped",
            hint="the server's pagination is broken; nothing was kept",
        )
    if len(exp.pages) >= exp.max_pages:
        why = f" ({exp.why})" if exp.why else ""
        raise RemoteLimit(
            f"{host}: {exp.what} goes on past {exp.max_pages} pages{why}; stopped",
            hint="a hub answers that many entries in one page; nothing was kept",
        )


def _stream_class(base: type) -> type:
    return _STREAM_CLASSES.get(base) or _STREAM_CLASSES.setdefault(base, _make_stream_class(base))


_STREAM_CLASSES: dict[type, type] = {}


def _make_stream_class(base: type) -> type:
    class BoundedStream(base):
        """A response body read under its operation's deadline and its reply cap. An announced
        Content-Length past the cap is refused at the first read, not with the headers: the
        caller looks at the status first (a server that ignores a Range says so in its own words)."""

        def __init__(
            self, inner: Any, op: Operation, exp: Expect, announced: int | None, host: str, sock: socket.socket | None
        ) -> None:
            self._inner, self._op, self._exp, self._announced = inner, op, exp, announced
            self._host, self._sock = host, sock

        def __iter__(self) -> Iterator[bytes]:
            exp, host = self._exp, self._host
            if self._announced is not None and self._announced > exp.max_bytes:
                raise exp.too_big(host, announced=self._announced)
            yield from _bounded_chunks(self._inner, self._op, exp.max_bytes, lambda: exp.too_big(host), host)

        def close(self) -> None:
            if self._sock is not None:
                self._op.unwatch(self._sock)
            self._inner.close()

    return BoundedStream


def _bounded_chunks(
    chunks: Iterable[bytes], op: Operation, cap: int, too_big: Callable[[], RemoteLimit], host: str
) -> Iterator[bytes]:
    """`chunks` (a body as it arrives) while the operation has time and the bytes stay within
    `cap`. A read that fails or ends because the deadline shut the socket is the deadline's error:
    what arrived is not the whole answer."""
    total = 0
    try:
        for chunk in chunks:
            total += len(chunk)
            if total > cap:
                raise too_big()
            if op.over():
                raise op.overtime(host)
            yield chunk
    except RemoteLimit:
        raise
    except Exception:
        if op.over():
            raise op.overtime(host) from None
        raise
    if op.over():
        raise op.overtime(host)


def failure(exc: BaseException, host: str | None = None) -> RemoteLimit | None:
    """The deadline's error when `exc` came from an operation that ran out (the watchdog shut its
    socket, or a timeout set to the time left fired), else None: let the caller say what failed."""
    if isinstance(exc, RemoteLimit):
        return exc
    op = _OPERATION.get()
    return op.overtime(host) if op is not None and op.over() else None


def client(httpx_module: Any = None, **kwargs: Any) -> Any:
    """An httpx client whose requests are bounded here; redirects are the caller's to follow."""
    if httpx_module is None:
        import httpx as httpx_module
    kwargs.setdefault("timeout", None)  # no per-read timeout of its own: each read gets the time left
    return httpx_module.Client(event_hooks=hooks(httpx_module), follow_redirects=False, **kwargs)


def hub_client(httpx_module: Any, check_response: Callable[[Any], None]) -> Any:
    """The client huggingface_hub shares, installed through its public client factory: redirects
    followed and no library timeout, as huggingface_hub's own default, every request bounded here,
    and `check_response` run on each response before the bounds' own hook."""
    ours = hooks(httpx_module, retries=True)
    ours["response"].insert(0, check_response)
    return httpx_module.Client(event_hooks=ours, follow_redirects=True, timeout=None)
