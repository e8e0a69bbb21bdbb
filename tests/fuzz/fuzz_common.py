"""Shared by the CI fuzz test and the long fuzz run: seeds, mutations and the oracle.

The oracle: reading a file either succeeds or raises GGUFError - never any other exception,
never a hang, never an allocation driven by a count in the file.
"""

from __future__ import annotations

import atexit
import os
import random
import re
import shutil
import struct
from pathlib import Path

from specreg.errors import GGUFError
from specreg.gguf.reader import GGUFArray, open_gguf
from specreg.gguf.summary import summarize
from specreg.schemas.gguf import summary_to_json
from specreg.testing import ModelSpec, write_model

INTERESTING = [
    0,
    1,
    2,
    3,
    7,
    8,
    9,
    12,
    13,
    31,
    32,
    63,
    64,
    255,
    256,
    (1 << 30) + 1,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 40,
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 1,
]


def scratch_dir(prefix: str = "specreg-fuzz-") -> Path:
    """A fresh folder for the files under test, in RAM (/dev/shm) when there is one: fuzzing
    rewrites one file thousands of times and ext4 flushes on truncate-and-rewrite."""
    import tempfile

    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    atexit.register(shutil.rmtree, path, ignore_errors=True)  # RAM-backed: never leave it behind
    return path


def write_case(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    path.write_bytes(data)


def seed_files(directory: Path) -> list[bytes]:
    """Valid files to mutate: the malformed corpus's base and two tiny vocab/model files."""
    from malformed import make_corpus

    directory.mkdir(parents=True, exist_ok=True)
    seeds = [make_corpus.encode(make_corpus.base())]
    for name, spec in {
        "spm": ModelSpec(vocab_only=True, n_words=20),
        "bpe": ModelSpec(vocab_type="gpt2", pre="qwen2", n_words=20, vocab_only=True, chat_template="{{x}}"),
        "eagle3": ModelSpec(
            architecture="eagle3",
            eagle3_target_layers=(0, 1, 2),
            eagle3_target_hidden_size=64,
            d2t=(0, 1),
            n_words=10,
            n_embd=32,
            n_ff=32,
            n_layer=1,
        ),
    }.items():
        seeds.append(write_model(directory / f"{name}.gguf", spec).read_bytes())
    return seeds


def mutate(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    """One to four random edits: flips, interesting integers, truncation, splices, duplication."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randrange(len(buf)) if buf else 0
        if op == 0 and buf:
            buf[pos] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            buf[pos] = rng.randrange(256)
        elif op == 2:
            width, fmt = rng.choice([(4, "<I"), (8, "<Q")])
            value = rng.choice(INTERESTING) & ((1 << (8 * width)) - 1)
            buf[pos : pos + width] = struct.pack(fmt, value)
        elif op == 3:
            del buf[rng.randrange(len(buf) + 1) :]
        elif op == 4:
            other = rng.choice(seeds)
            start = rng.randrange(len(other))
            buf[pos:pos] = other[start : start + rng.randint(1, 64)]
        else:
            n = rng.randint(1, 32)
            buf[pos:pos] = buf[pos : pos + n]
    return bytes(buf)


def exercise(path: Path) -> str:
    """Read everything the rest of specreg reads; 'ok' or the GGUFError's problem."""
    try:
        f = open_gguf(path)
        summary_to_json(summarize(f))
        f.token_texts()
        f.token_types()
        f.merges()
        for value in f.metadata.values():
            if isinstance(value, GGUFArray):
                value.to_list()
        for t in f.tensors:
            if f.n_elements[t.name] <= 4096 and t.type_name in ("F32", "F16", "I32", "I64"):
                f.tensor_values(t.name, max_elems=4096)
    except GGUFError as exc:
        return re.sub(r"\d+", "N", exc.problem)[:60]
    return "ok"
