"""Hostile files against the reader: files that change while read, bombs, non-regular paths.

Each case runs the real console entry point in a fresh process (a crash such as SIGBUS must
show as an exit status, not kill pytest) and asserts one `error:` line and exit 2.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from _registry_helpers import model, one_line_error

from specreg.errors import GGUFError
from specreg.gguf.reader import open_gguf, read_gguf
from specreg.gguf.source import FileSource, HeaderWindow
from specreg.gguf.summary import summarize


def _python(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
    )


def test_file_truncated_while_read_is_one_line_not_sigbus(tmp_path: Path) -> None:
    """`cp` over a file being checked: the walk starts after the file shrank (was: SIGBUS, exit 135)."""
    path = model(tmp_path, "m.gguf", extra_tokens=4000)
    assert path.stat().st_size > 64 << 10
    proc = _python(
        f"""
        import os, sys
        import specreg.gguf.walk as walk
        from specreg.cli import main

        original = walk.Walker.header
        def header(self):
            os.truncate({str(path)!r}, 8192)  # after the file was opened and sized, before any byte is read
            return original(self)
        walk.Walker.header = header
        sys.exit(main(["inspect", {str(path)!r}]))
        """
    )
    line = one_line_error(proc)
    assert str(path) in line and "changed while being read" in line and "8192" in line


def test_file_truncated_between_window_reads(tmp_path: Path) -> None:
    """A header larger than the first read: the file shrinks after the first chunk; the second read is short."""
    path = model(tmp_path, "m.gguf", extra_tokens=4000)
    size = path.stat().st_size

    class Shrinking(FileSource):
        """Shrinks the file after the first read; only `read`, as a remote source has."""

        readinto = None  # type: ignore[assignment]

        def read(self, offset: int, n: int) -> bytes:
            if offset:
                Path(self.path).write_bytes(b"")
            return super().read(offset, n)

    src = Shrinking(path)
    win = HeaderWindow(src, first=4096, step=4096)
    win.ensure(10)
    assert win.end == 4096
    try:
        win.ensure(5000, "tokenizer.ggml.tokens")
    except GGUFError as exc:
        assert "changed while being read" in exc.message and f"{size} were expected" in exc.message
    else:
        raise AssertionError("a short read was accepted")
    finally:
        src.close()


def test_small_steps_read_the_same_header(tmp_path: Path) -> None:
    """The window grown 4 KiB at a time (as a slow remote source might) gives the same file."""
    path = model(tmp_path, "m.gguf", extra_tokens=4000)
    reads: list[tuple[int, int]] = []

    class Counting(FileSource):
        def read(self, offset: int, n: int) -> bytes:
            reads.append((offset, n))
            return super().read(offset, n)

        def readinto(self, offset: int, view: memoryview) -> int:
            reads.append((offset, len(view)))
            return super().readinto(offset, view)

    with Counting(path) as src:
        small = read_gguf(src, first=4096, step=4096)
    whole = open_gguf(path)
    assert len(reads) > 10 and all(n <= 4096 for _, n in reads)
    assert reads == sorted(reads) and sum(n for _, n in reads) < small.header_size + 4096
    assert summarize(small) == summarize(whole) and small.token_texts() == whole.token_texts()


def test_header_over_the_cap_is_refused(tmp_path: Path) -> None:
    path = model(tmp_path, "m.gguf", extra_tokens=4000)
    with FileSource(path) as src:
        try:
            read_gguf(src, cap=16 << 10)
        except GGUFError as exc:
            assert "header needs more than" in exc.message and exc.field
        else:
            raise AssertionError("a header over the cap was read")
