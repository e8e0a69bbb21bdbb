"""`specreg watch` against servers that misbehave: one line or an `unknown` window, bounded in time
and memory per scrape, nothing wrong stored.

Real llama.cpp cannot be made to send an endless or poisoned `/metrics`, so these answers come
from a loopback stand-in (the only fake here); the checks of the counters themselves run on
text. Also the parts that need no server: the drift test on known ratios, a restart, the argv
forms a server runs under, the listen address.
"""

from __future__ import annotations

import functools
import math
import random
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from _audit_world import specreg

from specreg.benchmark.run.client import LlamaClient
from specreg.errors import ServerError, UsageError
from specreg.schemas.audit import WatchPolicy
from specreg.validators.ruleset import load_rule_set
from specreg.watch.drift import DriftTest
from specreg.watch.exporter import parse_listen
from specreg.watch.identify import server_flags
from specreg.watch.scrape import MAX_REPLY_BYTES, Counters, read_counters, read_props, read_slots, scrape

NAMES = load_rule_set().server.metrics
SLOT = load_rule_set().server.slot_speculative
GOOD = """\
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 640
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 1.5
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 400
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 300
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 100
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 90
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 70
"""
PROPS = '{"model_path": "m.gguf", "build_info": "b11434-abc1234", "total_slots": 1}'


def test_good_counters_are_read() -> None:
    c = read_counters(GOOD, NAMES)
    assert (c.generated, c.generating_s, c.drafted, c.accepted, c.drafts) == (640, 1.5, 400, 300, 100)
    assert c.per_position == (90, 70) and c.processing == 1
    later = Counters(generated=10, generating_s=0.1, drafted=4, accepted=3, drafts=1)
    assert later.went_back(c) == "generated tokens went from 640 to 10"  # a restart, in words
    assert c.went_back(later) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (GOOD.replace(" 640", " NaN"), "is nan, not a number"),
        (GOOD.replace(" 400", " -4"), "is negative"),
        (GOOD.replace(" 300", " +Inf"), "is inf, not a number"),
        (GOOD.replace(" 640", " 6.5"), "is 6.5, not a count"),
        (GOOD.replace(" 640", " abc"), "malformed Prometheus text"),
        (GOOD.replace("predicted_total counter", "predicted_total gauge"), "declared a gauge, not a counter"),
        (GOOD + "llamacpp:tokens_predicted_total 7\n", "appears more than once"),
        (GOOD.replace('position="1"', 'position="x"'), "unexpected position"),
        (GOOD.replace('position="1"', 'position="5"'), "skips a position"),
        ("<html><body>It works!</body></html>\n", "malformed Prometheus text"),
        ("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n", "not llama-server's metrics"),
        ("metric_a 1\n" * 6000, "6,000 lines"),
    ],
    ids=str.split("nan negative inf fraction not-a-number wrong-type twice label gap html other lines"),
)
def test_hostile_metrics_text_is_one_line(text: str, says: str) -> None:
    with pytest.raises(ServerError) as err:
        read_counters(text, NAMES)
    assert says in err.value.message and "\n" not in err.value.message


def test_props_and_slots_of_wrong_types_are_refused_or_dropped() -> None:
    with pytest.raises(ServerError, match="not llama-server's"):
        read_props(["model_path"])
    with pytest.raises(ServerError, match="not llama-server's"):
        read_props({"model_path": 3})
    p = read_props({"model_path": "m.gguf", "total_slots": "2", "build_info": 7, "default_generation_settings": 5})
    assert (p.total_slots, p.build_info, p.sampler, p.build) == (None, None, {}, None)
    p = read_props({"model_path": "m", "default_generation_settings": {"params": {"temperature": 1e999, "top_k": 4}}})
    assert p.sampler == {"top_k": 4}
    with pytest.raises(ServerError):
        read_slots([{"speculative": "yes"}], SLOT)
    with pytest.raises(ServerError):
        read_slots({"speculative": True}, SLOT)
    assert read_slots([{"speculative": True}, {"speculative": False}], SLOT) == [True, False]


# ---- a loopback server that misbehaves ---------------------------------------------------------------


@functools.cache
def _million() -> bytes:
    return b"".join(b'llamacpp:s{i="%d"} 1\n' % i for i in range(1_000_000))


class _Hostile(BaseHTTPRequestHandler):
    mode = "ok"

    def log_message(self, fmt: str, *args: object) -> None:
        pass

    def _send(self, body: bytes, ctype: str = "text/plain") -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        mode = type(self).mode
        try:
            if self.path == "/props":
                self._send(PROPS.encode(), "application/json")
            elif self.path == "/slots":
                self._send(b'[{"id": 0, "speculative": true}]', "application/json")
            elif self.path != "/metrics":
                self.send_error(404)
            elif mode == "endless":  # no length, never ends
                self.send_response(200)
                self.end_headers()
                while True:
                    self.wfile.write(b"llamacpp:x 1\n" * 4096)
            elif mode == "slow":
                time.sleep(30)
            elif mode == "trickle":  # a byte at a time, forever: no read timeout ever fires
                self.send_response(200)
                self.end_headers()
                while True:
                    self.wfile.write(b"l")
                    self.wfile.flush()
                    time.sleep(0.05)
            elif mode == "million":  # 10^6 series, announced
                self._send(_million())
            elif mode == "nan":
                self._send(GOOD.replace(" 640", " NaN").encode())
            elif mode == "html":
                self._send(b"<html>It works!</html>", "text/html")
            else:
                self._send(GOOD.encode())
        except (BrokenPipeError, ConnectionResetError):
            pass


@contextmanager
def hostile(mode: str) -> Iterator[str]:
    if mode == "million":
        _million()  # made before the clock starts: the server's own slowness is not under test
    handler = type("Handler", (_Hostile,), {"mode": mode})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("endless", f"more than its cap of {MAX_REPLY_BYTES >> 20}.0 MiB"),
        ("slow", "timed out after 1.5s"),
        ("trickle", "timed out after 1.5s"),
        ("million", f"more than its cap of {MAX_REPLY_BYTES >> 20}.0 MiB"),
        ("nan", "is nan, not a number"),
        ("html", "malformed Prometheus text"),
    ],
)
def test_a_scrape_of_a_hostile_server_is_bounded_and_unknown(mode: str, says: str) -> None:
    timeout = 1.5
    with hostile(mode) as url, LlamaClient(url, timeout_s=timeout, max_response_bytes=MAX_REPLY_BYTES) as client:
        tracemalloc.start()
        t0 = time.monotonic()
        s = scrape(client, NAMES, SLOT)
        took = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert s.counters is None and s.problem is not None and says in s.problem.message, s.problem
    assert "\n" not in s.problem.message
    assert took < 2 * timeout + 2, took  # the deadline, plus /slots and /props answering at once
    assert peak < 16 << 20, peak  # a reply cap, not what the server sends


def test_the_command_on_a_hostile_server_says_one_line_and_keeps_no_numbers(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    from _bench_helpers import admit
    from _registry_helpers import model

    from specreg.registry.store import Registry

    with Registry(db, show_progress=False) as reg:  # a pair to hold the server to, never benchmarked
        pid = admit(reg, model(tmp_path, "t.gguf"), model(tmp_path, "d.gguf", name="d"))
    with hostile("nan") as url:
        t0 = time.monotonic()
        code, out, err = specreg("watch", url, "--once", "--interval", "0.3s", "--timeout", "2", db=db)
        code2, out2, _ = specreg("watch", url, "--pair", str(pid), "--windows", "1", "--interval", "0.3s", db=db)
    assert time.monotonic() - t0 < 60
    assert code == 2 and "Traceback" not in out + err, out + err
    assert "unknown: /metrics: llamacpp:tokens_predicted_total is nan, not a number" in " ".join(out.split())
    assert "identified through /props" in out, out  # not on this machine's process table: /props names it
    assert code2 == 2 and "no audit to compare with" in out2  # the pair has no run to compare with
    with Registry(db, show_progress=False) as reg:
        rows = reg.conn.execute("SELECT state, generated, drafted, counters_json FROM watch_windows").fetchall()
    assert rows == [("unknown", None, None, None)]  # kept against the pair, no numbers


def test_bad_options_are_one_line(tmp_path: Path) -> None:
    for args, says in [
        (("--interval", "soon"), "--interval 'soon': expected a duration"),
        (("--once", "--windows", "2"), "give --once or --windows N, not both"),
        (("--listen", "here"), "--listen 'here': expected HOST:PORT"),
        (("--timeout", "0"), "--timeout: give seconds above 0"),
    ]:
        code, _, err = specreg("watch", "http://127.0.0.1:9", *args, db=tmp_path / "none.db")
        assert code == 2 and says in err and "Traceback" not in err, err
    code, _, err = specreg("watch", "file:///etc/passwd", "--once", db=tmp_path / "none.db")
    assert code == 2 and "expected an http:// or https:// URL" in err


# ---- what needs no server -----------------------------------------------------------------------------


def test_the_drift_test_decides_a_clear_drift_and_not_noise() -> None:
    policy = WatchPolicy()
    rng = random.Random(7)
    aa = DriftTest(policy)  # the audited workload replayed: live / audited scattered around 1
    for _ in range(200):
        aa.add((0.74 * math.exp(rng.gauss(0, 0.1)), 0.74), (40 * math.exp(rng.gauss(0, 0.2)), 40.0))
    assert not aa.drifted and aa.windows == 200
    drift = DriftTest(policy)  # acceptance at half the audit's
    for _ in range(40):
        drift.add((0.37 * math.exp(rng.gauss(0, 0.1)), 0.74), None)
        if drift.drifted:
            break
    assert drift.drifted and drift.decided_after is not None and drift.decided_after <= 15
    assert "acceptance at most" in (drift.why or "")
    slow = DriftTest(policy)  # the decode rate alone
    for _ in range(40):
        slow.add((0.74, 0.74), (20.0, 40.0))
    assert slow.drifted and "decode rate" in (slow.why or "") and "acceptance" not in (slow.why or "")
    empty = DriftTest(policy)
    empty.add(None, None)
    assert empty.windows == 0  # a window with nothing to compare is not a test window


def test_server_argv_forms_and_listen_addresses() -> None:
    flags = ["-m", "t.gguf", "--port", "8080"]
    assert server_flags(["/usr/bin/llama-server", *flags]) == ("/usr/bin/llama-server", flags, False)
    py = ["/v/bin/python3", "/v/bin/specreg-llama-server", *flags]
    assert server_flags(py) == ("specreg-llama-server", flags, True)
    mod = ["python", "-m", "specreg.servers.bundled_server", *flags]
    assert server_flags(mod) == ("specreg-llama-server", flags, True)
    assert parse_listen("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_listen(":9464") == parse_listen("9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    with pytest.raises(UsageError):
        parse_listen("127.0.0.1:99999")
