"""specreg.remote, the one owner of every HTTP exchange: an overall deadline however the server
trickles or stalls, a byte cap per reply (announced or sent), a page cap and a loop check, no
compressed answers; one line naming the host, the limit and the flag. In-process, short deadlines,
against a loopback server scripted per test (the hub-shaped inputs are tests/fuzz/hostile.py's)."""

from __future__ import annotations

import contextlib
import gzip
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specreg import remote
from specreg.errors import RemoteError, RemoteLimit

Answer = Callable[[BaseHTTPRequestHandler], None]


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up mid-answer is what these tests are about


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], str]]:
    """`serve(answer)` -> the URL of a loopback server whose every GET runs `answer`."""
    servers: list[ThreadingHTTPServer] = []

    def start(answer: Answer) -> str:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with contextlib.suppress(OSError):  # the client hung up: what these tests do on purpose
                    answer(self)

        srv = _Quiet(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/x"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _headers(h: BaseHTTPRequestHandler, length: int | None, **extra: str) -> None:
    h.send_response(200)
    if length is not None:
        h.send_header("Content-Length", str(length))
    for k, v in extra.items():
        h.send_header(k.replace("_", "-"), v)
    h.end_headers()


def trickle(h: BaseHTTPRequestHandler) -> None:
    _headers(h, 1000)
    for _ in range(1000):
        h.wfile.write(b"x")
        h.wfile.flush()
        time.sleep(0.2)


def stall(h: BaseHTTPRequestHandler) -> None:
    """Half the body at once, then nothing: a per-read timeout set at the start would let the
    read wait its full length again from here."""
    _headers(h, 1000)
    h.wfile.write(b"x" * 500)
    h.wfile.flush()
    time.sleep(10)


def endless(h: BaseHTTPRequestHandler) -> None:
    _headers(h, None, Connection="close")
    while True:
        h.wfile.write(b"x" * 65536)


def _get(url: str, *, seconds: float = 0.3, cap: int = 1 << 20) -> tuple[float, RemoteLimit]:
    t0 = time.monotonic()
    with (
        remote.client() as http,
        remote.operation("the test read", seconds=seconds),
        remote.expect("the answer", cap),
        pytest.raises(RemoteLimit) as err,
    ):
        http.get(url)
    return time.monotonic() - t0, err.value


@pytest.mark.parametrize("answer", [trickle, stall], ids=["trickle", "stall"])
def test_the_deadline_holds_however_the_server_sends(serve: Callable[[Answer], str], answer: Answer) -> None:
    took, err = _get(serve(answer), seconds=0.3)
    assert 0.3 <= took < 2.3, took  # the deadline + 2 s (a loaded machine's scheduling)
    assert err.message.startswith("127.0.0.1:") and "did not finish within 0.3 s" in err.message
    assert "SPECREG_TIMEOUT=SECONDS allows more" in err.message  # no command option here: the variable


def test_an_endless_body_stops_at_the_cap(serve: Callable[[Answer], str]) -> None:
    took, err = _get(serve(endless), seconds=30, cap=256 << 10)
    assert took < 5 and "the answer sent more than its cap of 256 KiB" in err.message


def test_an_announced_length_past_the_cap_is_refused_before_any_body_byte(serve: Callable[[Answer], str]) -> None:
    def huge(h: BaseHTTPRequestHandler) -> None:
        _headers(h, 10 * 10**9)
        h.wfile.write(b"x" * 1000)

    _, err = _get(serve(huge), cap=1 << 20)
    assert "announces 9.3 GiB, more than its cap of 1.0 MiB" in err.message


def test_a_compressed_answer_is_refused(serve: Callable[[Answer], str]) -> None:
    body = gzip.compress(b"x" * 100_000)

    def gzipped(h: BaseHTTPRequestHandler) -> None:
        assert h.headers["Accept-Encoding"] == "identity"
        _headers(h, len(body), Content_Encoding="gzip")
        h.wfile.write(body)

    with remote.client() as http, remote.operation("x"), pytest.raises(RemoteError, match="gzip-compressed"):
        http.get(serve(gzipped))


@pytest.mark.parametrize("kind", ["self", "cycle", "endless"])
def test_pages_a_loop_and_a_cap(serve: Callable[[Answer], str], kind: str) -> None:
    base: list[str] = []

    def pages(h: BaseHTTPRequestHandler) -> None:
        n = int(h.path.rpartition("p=")[2] or 0) if "p=" in h.path else 0
        nxt = {"self": n, "cycle": (n + 1) % 2, "endless": n + 1}[kind]
        _headers(h, 2, Link=f'<{base[0]}?p={nxt}>; rel="next"')
        h.wfile.write(b"[]")

    base.append(serve(pages))
    seen = 0
    with remote.client() as http, remote.operation("x"), remote.expect("the list", 1 << 10, max_pages=5):
        url = base[0] + "?p=0"
        with pytest.raises(RemoteLimit) as err:
            while True:
                seen += 1
                url = http.get(url).links["next"]["url"]
    want = "goes on past 5 pages" if kind == "endless" else "links its next page to a page already read"
    assert want in err.value.message and seen <= 5


def test_worker_threads_share_the_operation(serve: Callable[[Answer], str]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    url = serve(trickle)
    t0 = time.monotonic()
    with remote.client() as http, remote.operation("the reads", seconds=0.3):

        def read(_: int) -> str:
            try:
                http.get(url)
            except RemoteLimit as exc:
                return exc.message
            return "finished"

        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(remote.carried(read), range(4)))
    assert time.monotonic() - t0 < 2.3
    assert all("the reads did not finish within 0.3 s" in g for g in got), got


def test_the_clock_starts_at_the_first_request(serve: Callable[[Answer], str]) -> None:
    def quick(h: BaseHTTPRequestHandler) -> None:
        _headers(h, 2)
        h.wfile.write(b"ok")

    url = serve(quick)
    with remote.client() as http, remote.operation("x", seconds=0.2) as op:
        time.sleep(0.25)  # local work before the first request (imports, a walk) is not the server's
        assert http.get(url).content == b"ok"
        assert 0 < op.left() <= 0.2


def test_httpx_clients_live_in_one_place() -> None:
    """Every httpx client of the package is made by specreg.remote (huggingface_hub's is bound
    there through its factory, sources/hub.py), and remote itself imports httpx only where it makes a client."""
    import re
    from pathlib import Path

    import specreg

    root = Path(specreg.__file__).parent
    made = re.compile(r"\b(?:httpx2?|httpx_module)\.Client\(")
    found = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if made.search(p.read_text("utf-8")))
    assert found == ["remote.py"], found
    assert not re.search(r"^(?:import|from) httpx", (root / "remote.py").read_text("utf-8"), re.M)


def test_a_hub_answer_that_trickles_is_cut_through_huggingface_hubs_own_client(
    serve: Callable[[Answer], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hubserver import set_online

    from specreg.sources.hub import HubSettings, hub_errors

    url = serve(trickle)
    set_online(monkeypatch, url.rsplit("/", 1)[0])
    from huggingface_hub import HfApi

    settings = HubSettings.from_env()
    t0 = time.monotonic()
    with (
        remote.operation("asking the hub", seconds=0.3),
        pytest.raises(RemoteLimit, match=r"asking the hub did not finish within 0\.3 s"),
        hub_errors(settings, "acme/x", None, None),
    ):
        HfApi(endpoint=settings.endpoint).model_info("acme/x")
    assert time.monotonic() - t0 < 2.3


def test_a_retry_after_past_the_deadline_ends_huggingface_hubs_wait(
    serve: Callable[[Answer], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """huggingface_hub sleeps as long as a 503's Retry-After says before asking again: a hostile
    hub's 11 days would hold the command; the answer ends the operation instead."""
    from hubserver import set_online
    from huggingface_hub import HfApi

    from specreg.sources.hub import HubSettings, hub_errors

    def busy(h: BaseHTTPRequestHandler) -> None:
        h.send_response(503)
        h.send_header("Retry-After", "1000000")
        h.send_header("Content-Length", "0")
        h.end_headers()

    set_online(monkeypatch, serve(busy).rsplit("/", 1)[0])
    settings = HubSettings.from_env()
    t0 = time.monotonic()
    with (
        remote.operation("asking the hub", seconds=30),
        pytest.raises(RemoteLimit, match=r"HTTP 503, to be asked again in 1,000,001 s, past the deadline"),
        hub_errors(settings, "acme/x", None, None),
    ):
        HfApi(endpoint=settings.endpoint).model_info("acme/x")
    assert time.monotonic() - t0 < 5
