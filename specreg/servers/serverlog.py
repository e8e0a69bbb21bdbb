"""Reading a llama.cpp server log: its tail, its error lines, the lines proving speculation never ran.

One owner for what a log line means, so the launcher (a server that would not start), the
condition runner (a server that died) and the judge (a draft the server dropped) quote the same
lines. llama.cpp logs a draft it cannot use and keeps serving without it (PROTOCOL §8), so a
refusal is found only here, never in the HTTP answers.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

LOG_SCAN_BYTES = 8 << 20  # a refusal is logged at start-up: the head of the log is enough
# Log lines (from common/speculative.cpp and tools/server) that mean the draft was not used.
REFUSAL_MARKERS = (
    "vocabs are not compatible",
    "must match target model to use speculation",
    "failed to initialize speculative decoding",
    "failed to load draft model",
    "failed to create mtp context",
    "speculative decoding not supported by this context",
    "synthetic speculative acceptance is enabled",  # never ours: its output is not model output
)
BIND_FAILURE_MARKERS = ("couldn't bind", "address already in use", "failed to bind")
_ERROR_WORDS = ("error", "abort", "failed")
_SPECULATION_WORDS = ("specul", "draft", "ngram", "spec ")
_OUR_LINES = ("#", "specreg-llama-server")  # the wrapper's own lines, not the server's


def tail_text(path: Path, n_lines: int = 40, max_bytes: int = 64 * 1024) -> str:
    """The last lines of a log file (bounded read), '' when it does not exist."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-n_lines:])


def head_text(path: Path, max_bytes: int = LOG_SCAN_BYTES) -> str:
    """The start of a log file (bounded read), '' when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return ""


def error_lines(text: str) -> list[str]:
    """The lines that look like errors: llama.cpp's ` E ` level, or an error word."""
    return [ln.rstrip() for ln in text.splitlines() if " E " in ln or any(w in ln.lower() for w in _ERROR_WORDS)]


_ABORT = re.compile(r"^\S+\.(?:c|cc|cpp|h|hpp):\d+: ")  # GGML_ABORT / GGML_ASSERT: "file.cpp:606: message"


def abort_lines(text: str) -> list[str]:
    """Why a server aborted: ggml's `file:line: message` lines and llama.cpp's error-level (` E `)
    lines, never the debugger backtrace a crash prints after them."""
    return [ln.rstrip() for ln in text.splitlines() if _ABORT.match(ln) or " E " in ln]


def last_lines(text: str, n: int) -> list[str]:
    """The last `n` non-blank lines: what to quote when no line looks like an error."""
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()][-n:]


def bind_failed(text: str) -> bool:
    """Did the server say it could not bind its port (someone else holds it)?"""
    low = text.lower()
    return any(m in low for m in BIND_FAILURE_MARKERS)


def refusal_lines(text: str) -> list[str]:
    """The exact log lines showing the server refused or dropped speculation (empty: none)."""
    return [ln.rstrip() for ln in text.splitlines() if any(m in ln.lower() for m in REFUSAL_MARKERS)]


def speculation_lines(text: str, limit: int = 10) -> list[str]:
    """The server's lines about drafting: what to show when a condition drafted nothing."""
    lines = [
        ln.rstrip()
        for ln in text.splitlines()
        if any(k in ln.lower() for k in _SPECULATION_WORDS) and not ln.startswith(_OUR_LINES)
    ]
    return lines[:limit]
