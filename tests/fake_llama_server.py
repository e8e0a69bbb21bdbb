"""A loopback stand-in for llama-server, ONLY for faults real llama.cpp cannot be made to show.

Modes (env FAKE_LLAMA_MODE): `hang` (a stream that sends one event, then nothing),
`badjson` (a malformed SSE event), `badmetrics` (unparseable /metrics), `never` (never
answers /health: prints a line and sleeps), `ok` (well-formed answers). Hostile ones:
`nonewline` (an endless line), `trickle` (a byte every 0.2 s, never a newline), `badtokens`,
`badtimings`, `hugenumber` (events with wrong JSON types / 1e999), `spewversion` (--version
never stops printing), `spewlog` (logs SPEW_BYTES before it serves, whatever the machine's
speed, then as fast as it can while serving), `daemon` (double-forks
a process that outlives it; its pid goes to $FAKE_LLAMA_DAEMON_PIDFILE). It accepts
llama-server's argv, binds --host/--port itself (the launcher checks that its child owns the
port) and stops on SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = os.environ.get("FAKE_LLAMA_MODE", "hang")
SPEW_BYTES = 24 << 20  # spewlog's output before it serves: well past what a log keeps
METRICS_OK = (
    "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\nllamacpp:spec_decode_num_draft_tokens_total 0\n"
)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt: str, *args: object) -> None:
        sys.stderr.write("fake: " + (fmt % args) + "\n")

    def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, '{"status": "ok"}')
        elif self.path == "/metrics":
            self._send(
                200,
                "llamacpp:spec_decode_num_draft_tokens_total {{{ nope\n" if MODE == "badmetrics" else METRICS_OK,
                "text/plain",
            )
        else:
            self._send(404, "{}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path == "/tokenize":
            self._send(200, '{"tokens": [1, 2, 3]}')
            return
        if self.path == "/apply-template":
            self._send(200, '{"prompt": "x"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if MODE == "badjson":
            self.wfile.write(b'data: {"content": "a", "stop": fal\n\n')
            self.wfile.flush()
            return
        if MODE in ("nonewline", "trickle"):
            self._endless(b"a" * 65536 if MODE == "nonewline" else b"a", 0.0 if MODE == "nonewline" else 0.2)
            return
        event = {"content": "a", "tokens": ["x"] if MODE == "badtokens" else [5], "stop": False}
        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.flush()
        if MODE == "hang":
            time.sleep(60)
            return
        timings: object = [1, 2] if MODE == "badtimings" else {"predicted_n": 1}
        final = {"content": "", "stop": True, "stop_type": "limit", "tokens_predicted": 1, "timings": timings}
        text = json.dumps(final)
        if MODE == "hugenumber":
            text = text.replace('"tokens_predicted": 1', '"tokens_predicted": 1e999')
        self.wfile.write(f"data: {text}\n\n".encode())

    def _endless(self, piece: bytes, pause: float) -> None:
        """`data: {"content": "` and then never a newline, for up to two minutes."""
        end = time.monotonic() + 120
        try:
            self.wfile.write(b'data: {"content": "')
            while time.monotonic() < end:
                self.wfile.write(piece)
                self.wfile.flush()
                if pause:
                    time.sleep(pause)
        except OSError:
            pass


def _spew(limit: int | None = None) -> None:
    """Log lines into stderr: `limit` bytes (blocking on the pipe while the reader is behind), or forever."""
    block = (b"srv  log: " + b"x" * 100 + b"\n") * 600
    written = 0
    while limit is None or written < limit:
        written += os.write(2, block if limit is None else block[: limit - written])


def _daemon() -> None:
    """Fork, new session, fork again: a grandchild outside our process group that sleeps."""
    if os.fork():
        os.wait()
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    path = os.environ.get("FAKE_LLAMA_DAEMON_PIDFILE")
    if path:
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    time.sleep(300)
    os._exit(0)


def main(argv: list[str]) -> int:
    if "--version" in argv:
        if MODE == "spewversion":
            while True:
                sys.stdout.write("version: 0 (fake) " * 100 + "\n")
        print("version: 0 (fake)\nbuilt with nothing for tests")
        return 0
    host = argv[argv.index("--host") + 1] if "--host" in argv else "127.0.0.1"
    port = int(argv[argv.index("--port") + 1])
    print(f"fake llama-server mode={MODE} port={port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if MODE == "never":
        print("loading model forever", flush=True)
        time.sleep(300)
        return 1
    if MODE == "daemon":
        _daemon()
    if MODE == "spewlog":
        _spew(SPEW_BYTES)
        threading.Thread(target=_spew, daemon=True).start()
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
