"""Hostile files against the reader: files that change while read, bombs, non-regular paths.

Each case runs the real console entry point in a fresh process (a crash such as SIGBUS must
show as an exit status, not kill pytest) and asserts one `error:` line and exit 2.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _cli_helpers import run_specreg
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


# -- amplification: a small (or sparse) file must not buy much time or memory -------------------

MB = 1 << 20


def _s(text: str | bytes) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def _kv(key: str, vtype: int, payload: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + payload


def _gguf(kvs: list[bytes], n_kv: int | None = None, tail: bytes = b"") -> bytes:
    return b"GGUF" + struct.pack("<IqQ", 3, 0, len(kvs) if n_kv is None else n_kv) + b"".join(kvs) + tail


STR, U32, U64, ARR = 8, 4, 10, 9
BASE_KVS = [_kv("general.architecture", STR, _s("llama")), _kv("tokenizer.ggml.model", STR, _s("llama"))]


def _refused(path: Path, *needles: str, limit_s: float = 10, limit_mb: int = 200) -> None:
    from _hostile_helpers import measured

    rc, out, err, wall, rss = measured("inspect", str(path), timeout=60)
    proc = subprocess.CompletedProcess([], rc, out, err)
    line = one_line_error(proc)
    assert str(path) in line and all(n in line for n in needles), line
    assert wall < limit_s and rss < limit_mb * MB, (wall, rss // MB)


def test_a_million_keys_is_refused_quickly(tmp_path: Path) -> None:
    """Was: 45 s and 970 MB to read 1M key/values (here ~24 MB of file)."""
    n = 1_000_000
    path = tmp_path / "kv.gguf"
    path.write_bytes(_gguf([*BASE_KVS, *(_kv(f"k.{i}", U32, struct.pack("<I", i)) for i in range(n))]))
    _refused(path, "1000002 key/values, more than the 65536 specreg reads")


def test_two_to_the_thirty_empty_tokens_in_a_sparse_file(tmp_path: Path) -> None:
    """Was: 13 GB of memory. 8 GiB of zero length prefixes, allocated sparsely (4 KiB on disk)."""
    path = tmp_path / "sparse.gguf"
    n = 1 << 30
    with open(path, "wb") as f:
        f.write(_gguf([*BASE_KVS, _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, n)], n_kv=3))
        f.truncate(f.tell() + 8 * n)
    _refused(path, "header needs more than 256 MiB")


def test_three_million_tokens_are_refused_before_decoding(tmp_path: Path) -> None:
    """24 MB of empty tokens: within the header cap, but decoding them would be 3M Python strings."""
    n = 3_000_000
    path = tmp_path / "tokens.gguf"
    arr = _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, n) + struct.pack("<Q", 0) * n
    path.write_bytes(_gguf([*BASE_KVS, arr]))
    _refused(path, "3000000 entries, more than the 2097152 specreg reads")


def test_mtp_header_bomb_is_a_verdict_not_a_memory_error(tmp_path: Path) -> None:
    """block_count = nextn_predict_layers = 10^12 in a file of a few hundred bytes (was: MemoryError)."""
    from _hostile_helpers import measured

    from specreg.validators.ruleset import load_rule_set

    arch = load_rule_set().mtp.architectures[0]
    big = struct.pack("<Q", 10**12)
    tokens = _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, 3) + _s("<unk>") + _s("<s>") + _s("</s>")
    path = tmp_path / "mtp.gguf"
    path.write_bytes(
        _gguf(
            [
                _kv("general.architecture", STR, _s(arch)),
                _kv("tokenizer.ggml.model", STR, _s("llama")),
                tokens,
                _kv(f"{arch}.block_count", U64, big),
                _kv(f"{arch}.nextn_predict_layers", U64, big),
            ]
        )
    )
    assert path.stat().st_size < 1000
    db = tmp_path / "r.db"
    rc, out, err, wall, rss = measured("check", "pair", str(path), "--method", "draft-mtp", "--json", db=db, timeout=60)
    assert rc == 1, err[-2000:]
    assert wall < 20 and rss < 300 * MB, (wall, rss // MB)
    checks = {c["code"]: c for c in json.loads(out)["checks"]}
    assert checks["mtp.tensors"]["severity"] == "error" and "the file holds only 0" in checks["mtp.tensors"]["message"]


# -- paths that are not regular files ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_fifo_and_device_paths_are_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    from _hostile_helpers import measured

    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    db = tmp_path / "r.db"
    wl = tmp_path / "wl.jsonl"
    for args, needle in (
        (("inspect", str(path)), "not a regular file"),
        (("audit", "--policy", str(path)), "cannot read policy file: not a regular file"),
    ):
        rc, out, err, wall, rss = measured(*args, db=db, timeout=30)
        one_line_error(subprocess.CompletedProcess([], rc, out, err))
        assert needle in err and wall < 15 and rss < 200 * MB, (args, err, wall)
    from specreg.benchmark.workloads.jsonl import load_workload
    from specreg.errors import PolicyError

    with pytest.raises(PolicyError, match=r"neither a built-in name nor a file|not a regular file"):
        load_workload(str(path))
    assert not wl.exists()


def test_deep_nesting_in_policy_and_workload_is_one_line(tmp_path: Path) -> None:
    from specreg.benchmark.workloads.jsonl import parse_jsonl
    from specreg.errors import PolicyError

    policy = tmp_path / "deep.toml"
    policy.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    proc = run_specreg(
        ["audit", "--policy", str(policy)], timeout=60, env=dict(os.environ, SPECREG_DB=str(tmp_path / "r.db"))
    )
    assert "nested too deeply" in one_line_error(proc)
    with pytest.raises(PolicyError, match=r"wl\.jsonl:1: not valid JSON \(nested too deeply\)"):
        parse_jsonl('{"id": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "wl.jsonl")
