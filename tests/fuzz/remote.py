"""Surfaces on loopback HTTP: what a llama-server answers, range reads of a remote GGUF, hub API replies.

One server per child process (started on first use) answers whatever the current case scripts:
status, headers, a body that is cut, endless, trickled, non-UTF-8 or of the wrong shape. The
functions here are what the oracle's `Case.call` names:

- `llama(endpoint, reply)`: specreg's client of llama-server (benchmark/run/client.py) asks
  `/tokenize`, `/apply-template`, `/metrics` (then parses it as the runner does) or streams
  `/completion` / `/v1/chat/completions`; it must return (a completion that is an error row
  is a result) or raise SpecregError. `/health` is read for its status code only. `watch`:
  one scrape of `specreg watch` (`/metrics` checked counter by counter, then `/slots` and
  `/props`, which get the same scripted answer).
- `range_read(reply)`: `specreg inspect http://.../f.gguf` against a server whose range answers
  lie (Content-Range, status, redirects, an endless or short body).
- `hub(edit)`: `specreg inspect hf://...` against tests/hubserver.py's loopback hub whose
  model_info answer was rewritten.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class CliResult:
    """A CLI outcome from inside a call case: the oracle judges it as it judges an argv case, and
    adds `violations`: the properties the call measured itself that the outcome broke."""

    code: int
    stdout: str
    stderr: str
    violations: list[str] = field(default_factory=list)


# the current case's reply: (status, headers, body pieces, mode); mode: "plain", "endless", "cut", "trickle"
_REPLY: dict[str, Any] = {}
_SERVER: list[ThreadingHTTPServer] = []
GGUF: dict[str, bytes] = {}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(min(n, 1 << 20))
        self._answer()

    def do_HEAD(self) -> None:
        self._answer()

    def _answer(self) -> None:
        reply = _REPLY.get("fn")
        status, headers, body, mode = reply(self) if callable(reply) else (200, {}, [b""], "plain")
        try:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            if mode == "plain":
                self.send_header("Content-Length", str(sum(len(b) for b in body)))
            else:
                self.send_header("Connection", "close")
            self.end_headers()
            if mode == "endless":
                deadline = time.monotonic() + 8
                while time.monotonic() < deadline:
                    self.wfile.write(body[0] if body else b"x" * 65536)
            elif mode == "trickle":
                for piece in body:
                    for i in range(0, len(piece), 7):
                        self.wfile.write(piece[i : i + 7])
                        self.wfile.flush()
                        time.sleep(0.01)
            else:
                for piece in body:
                    self.wfile.write(piece)
            if mode == "cut":
                self.wfile.flush()
                self.connection.shutdown(2)
        except OSError:
            pass
        self.close_connection = mode != "plain"


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up mid-answer is what these cases are about; stderr is the oracle's


def _base() -> str:
    if not _SERVER:
        srv = _QuietServer(("127.0.0.1", 0), _Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        _SERVER.append(srv)
    return f"http://127.0.0.1:{_SERVER[0].server_address[1]}"


# -- llama-server ------------------------------------------------------------------------------

_GOOD_EVENTS = [
    {"content": "He", "tokens": [5], "stop": False},
    {"content": "llo", "tokens": [6], "stop": False},
    {"content": "", "tokens": [], "stop": True, "stop_type": "limit", "tokens_predicted": 2,
     "timings": {"prompt_n": 3, "predicted_n": 2, "predicted_ms": 1.5, "draft_n": 2, "draft_n_accepted": 1}},
]  # fmt: skip
_GOOD_CHAT = [
    {"choices": [{"delta": {"content": "Hi"}, "finish_reason": None}]},
    {"choices": [{"delta": {}, "finish_reason": "length"}], "usage": {"completion_tokens": 1},
     "timings": {"predicted_n": 1}},
]  # fmt: skip
_GOOD_METRICS = (
    "# HELP llamacpp:n_drafted_total drafted\n# TYPE llamacpp:n_drafted_total counter\n"
    "llamacpp:n_drafted_total 12\n# TYPE llamacpp:n_drafted_accepted_total counter\n"
    "llamacpp:n_drafted_accepted_total 7\nllamacpp:prompt_tokens_total 30\n"
)
HOSTILE_VALUES: list[object] = [
    None, -1, 10**30, 1e308, "x", [], {}, True, [None], {"a": [1]}, "\udcff", "9" * 5000, [10**20],
]  # fmt: skip


_ONE_TOKEN = 'data: {"content": "x", "tokens": [1]}\n\n'
_NAN_FINAL = 'data: {"content": "", "stop": true, "timings": {"predicted_n": NaN}}\n\n'


def sse(events: list[object]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode("utf-8", "surrogatepass") + b"\n\n" for e in events)


def llama_replies(rng: random.Random, n: int) -> list[tuple[str, str, dict]]:
    """(name, endpoint, reply) cases: each good answer with one field made hostile, plus damage."""
    out: list[tuple[str, str, dict]] = []
    for endpoint, good in (("completion", _GOOD_EVENTS), ("chat", _GOOD_CHAT)):
        out.append((f"{endpoint}-good", endpoint, {"body": sse(good).decode()}))
        for k in range(n):
            events = json.loads(json.dumps(good))
            ev = rng.choice(events)
            target = ev
            if "timings" in ev and rng.random() < 0.5:
                target = ev["timings"]
            elif "choices" in ev and rng.random() < 0.5:
                target = ev["choices"][0] if rng.random() < 0.5 else ev["choices"][0]["delta"]
            key = rng.choice([*target.keys(), "stop", "tokens", "usage", "choices"])
            target[key] = rng.choice(HOSTILE_VALUES)
            body = sse(events)
            mode = rng.choice(["plain", "plain", "cut", "trickle"])
            if mode == "cut":
                body = body[: rng.randrange(len(body))]
            out.append((f"{endpoint}-{k}", endpoint, {"body": body.decode("utf-8", "surrogateescape"), "mode": mode}))
        out += [
            (f"{endpoint}-endless", endpoint, {"body": _ONE_TOKEN, "mode": "endless"}),
            (f"{endpoint}-noline", endpoint, {"body": "data: " + "x" * 65536, "mode": "endless"}),
            (f"{endpoint}-nonutf8", endpoint, {"body_hex": (b"data: \xff\xfe{\n\n" * 3).hex()}),
            (f"{endpoint}-status", endpoint, {"status": 500, "body": "x" * 100_000}),
            (f"{endpoint}-nan", endpoint, {"body": _NAN_FINAL}),
            (f"{endpoint}-deep", endpoint, {"body": "data: " + "[" * 50_000 + "]" * 50_000 + "\n\n"}),
        ]  # fmt: skip
    for name, body in {
        "good": _GOOD_METRICS,
        "cut": _GOOD_METRICS[:57],
        "huge": "llamacpp:n_drafted_total 1e999\n",
        "nan": "llamacpp:n_drafted_total NaN\nllamacpp:n_drafted_accepted_total -5\n",
        "labels": 'x{a="' + "b" * 100_000 + '"} 1\n',
        "garbage": "\x00\xff{{{ 1 2 3\n",
        "many": "".join(f"m{i} {i}\n" for i in range(50_000)),
        "types": "# TYPE x counter\n# TYPE x gauge\nx 1\n",
    }.items():
        out.append((f"metrics-{name}", "metrics", {"body": body}))
        out.append((f"watch-{name}", "watch", {"body": body, "content_type": "text/plain"}))
    out.append(("watch-endless", "watch", {"body": "llamacpp:x 1\n", "mode": "endless"}))
    for endpoint, good in (("tokenize", {"tokens": [1, 2, 3]}), ("apply-template", {"prompt": "<s>hi"})):
        out.append((f"{endpoint}-good", endpoint, {"body": json.dumps(good)}))
        for vi, v in enumerate(HOSTILE_VALUES):
            key = next(iter(good))
            out.append((f"{endpoint}-{vi}", endpoint, {"body": json.dumps({key: v}, ensure_ascii=True)}))
        out.append((f"{endpoint}-notjson", endpoint, {"body": "{"}))
        out.append((f"{endpoint}-endless", endpoint, {"body": "[", "mode": "endless"}))
    return out


def _scripted(reply: dict) -> None:
    body = (
        bytes.fromhex(reply["body_hex"])
        if "body_hex" in reply
        else reply.get("body", "").encode("utf-8", "surrogateescape")
    )
    status, mode = reply.get("status", 200), reply.get("mode", "plain")
    headers = {"Content-Type": reply.get("content_type", "text/event-stream")}
    _REPLY["fn"] = lambda handler: (status, headers, [body], mode)


def llama(endpoint: str, reply: dict) -> object:
    from specreg.benchmark.run.client import LlamaClient
    from specreg.schemas.bench import WorkloadItem
    from specreg.servers.metrics import parse_metrics, spec_counters

    _scripted(reply)
    timeout_s = float(reply.get("timeout_s", 3.0))
    if endpoint == "watch":
        from specreg.validators.ruleset import load_rule_set
        from specreg.watch.scrape import MAX_REPLY_BYTES, scrape

        rules = load_rule_set().server
        with LlamaClient(_base(), timeout_s=timeout_s, max_response_bytes=MAX_REPLY_BYTES) as client:
            s = scrape(client, rules.metrics, rules.slot_speculative)
        if s.problem is not None:
            raise s.problem  # the window's `unknown`, as one line
        return s.counters
    with LlamaClient(_base(), timeout_s=timeout_s) as client:
        if endpoint == "metrics":
            snap = parse_metrics(client.metrics_text())
            return spec_counters({}, snap)
        if endpoint == "tokenize":
            return client.tokenize("hello")
        if endpoint == "apply-template":
            return client.apply_template([{"role": "user", "content": "hi"}])
        if endpoint == "completion":
            item = WorkloadItem(id="p", stratum="s", prompt="hello", max_tokens=8)
        else:
            item = WorkloadItem(id="c", stratum="s", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
        done = client.complete(item, max_tokens=8, seed=1, timeout_s=timeout_s)
        assert done.ok or done.error, "a completion that neither finished nor says why"
        return (done.ok, done.error)


# -- range reads -------------------------------------------------------------------------------

RANGE_LIES = [
    "good", "status-200", "status-500", "status-404", "status-416", "no-content-range", "range-wrong-start",
    "range-total-huge", "range-total-small", "range-total-negative", "range-garbage", "endless-body",
    "short-body", "cut-body", "redirect-loop", "redirect-file-scheme", "redirect-elsewhere", "total-changes",
    "body-longer", "slow",
]  # fmt: skip


def _range_reply(lie: str, data: bytes) -> Any:
    calls = {"n": 0}

    def answer(handler: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], list[bytes], str]:
        calls["n"] += 1
        spec = handler.headers.get("Range", "bytes=0-")
        a, _, b = spec.removeprefix("bytes=").partition("-")
        start, end = int(a or 0), min(int(b or len(data) - 1), len(data) - 1)
        part = data[start : end + 1]
        total = len(data)
        cr = f"bytes {start}-{end}/{total}"
        h = {"Content-Type": "application/octet-stream", "Content-Range": cr}
        mode = "plain"
        if lie == "status-200":
            return 200, {}, [data], "plain"
        if lie.startswith("status-"):
            return int(lie[7:]), {"Content-Range": f"bytes */{total}"}, [b"no"], "plain"
        if lie == "no-content-range":
            del h["Content-Range"]
        elif lie == "range-wrong-start":
            h["Content-Range"] = f"bytes {start + 1}-{end}/{total}"
        elif lie == "range-total-huge":
            h["Content-Range"] = f"bytes {start}-{end}/{10**30}"
        elif lie == "range-total-small":
            h["Content-Range"] = f"bytes {start}-{end}/3"
        elif lie == "range-total-negative":
            h["Content-Range"] = f"bytes {start}-{end}/-5"
        elif lie == "range-garbage":
            h["Content-Range"] = "bytes \xff\x00"
        elif lie == "endless-body":
            return 206, h, [b"\0" * 65536], "endless"
        elif lie == "short-body":
            part = part[: len(part) // 2]
        elif lie == "cut-body":
            return 206, h, [part[: len(part) // 2]], "cut"
        elif lie == "redirect-loop":
            return 302, {"Location": handler.path}, [b""], "plain"
        elif lie == "redirect-file-scheme":
            return 302, {"Location": "file:///etc/passwd"}, [b""], "plain"
        elif lie == "redirect-elsewhere":
            return 302, {"Location": "http://127.0.0.1:9/x.gguf"}, [b""], "plain"
        elif lie == "total-changes" and calls["n"] > 1:
            h["Content-Range"] = f"bytes {start}-{end}/{total + 1}"
        elif lie == "body-longer":
            part = part + b"\0" * 4096
        elif lie == "slow":
            return 206, h, [part[:512]], "trickle"
        return 206, h, [part], mode

    return answer


def range_read(lie: str, gguf_path: str, mutate_seed: int | None = None) -> CliResult:
    data = Path(gguf_path).read_bytes()
    if mutate_seed is not None:
        from fuzz.fuzz_common import mutate

        data = mutate(random.Random(mutate_seed), data, [data])
    _REPLY["fn"] = _range_reply(lie, data)
    return _cli(["inspect", f"{_base()}/f.gguf", "--json"])


def _cli(argv: list[str]) -> CliResult:
    from specreg.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return CliResult(code, out.getvalue(), err.getvalue())


# -- hub API replies ---------------------------------------------------------------------------

HUB_EDITS = [
    "good", "sha-int", "sha-dots", "siblings-dict", "siblings-strings", "sibling-no-name", "lfs-size-huge",
    "lfs-size-negative", "lfs-sha-short", "lfs-string", "size-string", "not-json", "json-list", "deep",
    "huge-siblings", "gated-int",
]  # fmt: skip


def _hub_edit(name: str) -> Any:
    def edit(body: dict) -> object:
        sib = next((s for s in body["siblings"] if s["rfilename"].endswith(".gguf")), body["siblings"][0])
        if name == "sha-int":
            body["sha"] = 12
        elif name == "sha-dots":
            body["sha"] = "../../../../tmp/x"
        elif name == "siblings-dict":
            body["siblings"] = {"a": 1}
        elif name == "siblings-strings":
            body["siblings"] = ["tiny.gguf"]
        elif name == "sibling-no-name":
            sib.pop("rfilename")
        elif name == "lfs-size-huge" and "lfs" in sib:
            sib["lfs"]["size"] = 10**30
        elif name == "lfs-size-negative" and "lfs" in sib:
            sib["lfs"]["size"] = -1
        elif name == "lfs-sha-short" and "lfs" in sib:
            sib["lfs"]["sha256"] = "abc"
        elif name == "lfs-string":
            sib["lfs"] = "x"
        elif name == "size-string":
            sib["size"] = "big"
        elif name == "not-json":
            return b"{"
        elif name == "json-list":
            return b"[1, 2]"
        elif name == "deep":
            return b"[" * 5000 + b"]" * 5000
        elif name == "huge-siblings":
            body["siblings"] += [{"rfilename": f"f{i}.bin"} for i in range(100_000)]
        elif name == "gated-int":
            body["gated"] = 5
        return None

    return edit


_HUB: list[Any] = []


def hub(edit: str, gguf_path: str) -> CliResult:
    from hubserver import FakeHub
    from huggingface_hub import constants

    if not _HUB:
        h = FakeHub().__enter__()
        h.add_commit("acme/tiny-GGUF", {"tiny.gguf": Path(gguf_path).read_bytes(), "README.md": b"# tiny\n"})
        _HUB.append(h)
    h = _HUB[0]
    h.repos["acme/tiny-GGUF"].info_edit = _hub_edit(edit)
    os.environ.update(HF_ENDPOINT=h.endpoint, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_ETAG_TIMEOUT="3")
    os.environ.pop("HF_HUB_OFFLINE", None)
    constants.HF_HUB_OFFLINE = False
    return _cli(["inspect", "hf://acme/tiny-GGUF/tiny.gguf", "--json"])
