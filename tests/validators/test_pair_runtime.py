"""specreg's draft-simple verdict agrees with the real llama.cpp server (xllamacpp) on tiny pairs.

Admitted <=> llama.cpp drafts tokens (/metrics spec_decode_num_draft_tokens_total > 0 after a
completion); rejected <=> llama.cpp logs that the vocabs are not compatible (and then serves
without speculation). Each server runs in its own subprocess, so a crash cannot take pytest down.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from _pair_helpers import BASE, codes, errors, run_pair
from prometheus_client.parser import text_string_to_metric_families

from specreg.testing.vocab import build_vocab

pytest.importorskip("xllamacpp")

_SERVE = """
import signal, sys, time
import xllamacpp as x
target, draft, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = x.CommonParams()
p.model.path = target
p.port = port
p.hostnames = ["127.0.0.1"]
p.endpoint_metrics = True
p.n_ctx = 256
p.n_parallel = 1
p.cpuparams.n_threads = 1
p.cpuparams_batch.n_threads = 1
p.sampling.seed = 1
p.speculative.types = [x.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
p.speculative.draft.mparams.path = draft
server = x.Server(p)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(0.2)
"""
INCOMPATIBLE = "the target and draft vocabs are not compatible"
SPM_TEXTS = tuple(enumerate(build_vocab(BASE).texts))
N_BASE = len(SPM_TEXTS)

CASES = [
    ("identical", BASE, BASE),
    ("token text swapped at id 300", BASE, BASE.but(token_edits=((300, "\u2581zzz"),))),
    ("token text swapped at id 3 (not compared by llama.cpp)", BASE, BASE.but(token_edits=((3, "<0xZZ>"),))),
    ("add_bos differs", BASE, BASE.but(add_bos=False)),
    ("target +100 padding tokens", BASE.but(pad_tokens=100), BASE),
    ("target +200 padding tokens", BASE.but(pad_tokens=200), BASE),
    ("other vocab type, same texts", BASE, BASE.but(vocab_type="gpt2", pre="gpt-2", token_edits=SPM_TEXTS)),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(target: Path, draft: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start a server for the pair and wait for /health; (process, base URL)."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE, str(target), str(draft), str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "GGML_NO_BACKTRACE": "1"},
        )  # an abort skips gdb
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}: {log_path.read_text(errors='replace')[-2000:]}")
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("server did not become healthy within 60 s")
            time.sleep(0.05)
    except BaseException:
        _stop(proc)
        raise
    return proc, base


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _drafted(target: Path, draft: Path, log_path: Path) -> tuple[float, str]:
    """Serve the pair, run one greedy completion; (draft tokens from /metrics, server log).

    Ids beyond the base vocabulary are banned for the target's sampler: an id the draft lacks
    aborts the server (see test_an_id_the_draft_lacks_aborts_the_server), which is not what
    this test measures.
    """
    proc, base = _serve(target, draft, log_path)
    try:
        ban = [[i, False] for i in range(N_BASE, N_BASE + 256)]
        r = httpx.post(
            base + "/completion",
            timeout=60,
            json={
                "prompt": "the of and to in is that",
                "n_predict": 24,
                "temperature": 0,
                "seed": 1,
                "logit_bias": ban,
            },
        )
        r.raise_for_status()
        metrics = httpx.get(base + "/metrics", timeout=10).text
    finally:
        _stop(proc)
    drafted = 0.0
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "llamacpp:spec_decode_num_draft_tokens_total":
                drafted = sample.value
    return drafted, log_path.read_text(errors="replace")


@pytest.mark.parametrize("target,draft", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_verdict_matches_llama_cpp(tmp_path: Path, target, draft) -> None:
    admitted = not errors(run_pair(tmp_path, target, draft, "draft-simple"))
    drafted, log = _drafted(tmp_path / "target.gguf", tmp_path / "draft.gguf", tmp_path / "server.log")
    assert admitted == (drafted > 0), f"specreg admitted={admitted}, llama.cpp drafted {drafted} tokens"
    assert admitted == (INCOMPATIBLE not in log)


def test_an_id_the_draft_lacks_aborts_the_server(tmp_path: Path) -> None:
    """Why `vocab.extra_ids` warns: llama.cpp admits the pair, then dies on a token the draft lacks."""
    checks = run_pair(tmp_path, BASE.but(pad_tokens=100), BASE, "draft-simple")
    assert not errors(checks) and "vocab.extra_ids" in codes(checks, "warn")
    log_path = tmp_path / "server.log"
    proc, base = _serve(tmp_path / "target.gguf", tmp_path / "draft.gguf", log_path)
    try:
        with pytest.raises(httpx.TransportError):  # the server process dies mid-request
            httpx.post(
                base + "/completion",
                timeout=60,
                json={"prompt": [1, 300, N_BASE + 10], "n_predict": 4, "temperature": 0},
            )
        proc.wait(30)
    finally:
        _stop(proc)
    assert proc.returncode != 0
    assert "failed to add token" in log_path.read_text(errors="replace")
