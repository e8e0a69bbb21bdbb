"""Differential against llama.cpp itself: files its own tests/test-gguf.cpp writes, valid and corrupt.

tests/llama_gguf_driver.cpp includes test-gguf.cpp verbatim (34 kinds of handcrafted file: bad
magic, versions, counts, keys, types, shapes, offsets, alignments, truncated data...) and
judges each file as llama_model_loader's constructor does (ggml's gguf_init_from_file with
no_alloc, no duplicated tensor, every tensor's data inside the file). specreg's reader must
accept exactly the files llama.cpp loads, and refuse the others with a GGUFError (one line,
never another exception). Slow: building ggml's base library takes about a minute on 2 loaded
cores (once; cached next to the sdist), then 30 seeds x 34 kinds take about 20 s.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from specreg.errors import GGUFError
from specreg.gguf.reader import open_gguf

SEEDS = range(30)  # 1020 files
KINDS = 34


@pytest.mark.slow
@pytest.mark.realvocab
def test_specreg_accepts_exactly_what_llama_cpp_loads(llama_source: Path, tmp_path: Path) -> None:
    from llama_gguf_build import driver_or_reason

    driver = driver_or_reason(llama_source)
    if isinstance(driver, str):
        pytest.skip(driver)
    verdicts: Counter[str] = Counter()
    kinds: set[str] = set()
    disagree: list[str] = []
    for seed in SEEDS:
        folder = tmp_path / str(seed)
        folder.mkdir()
        cmd = [str(driver), "files", str(seed), str(folder)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = proc.stdout.splitlines()
        assert len(lines) == KINDS
        for line in lines:
            kind, path, theirs, why = line.split("\t")
            kinds.add(kind)
            try:
                open_gguf(path)
                ours, reason = "load", ""
            except GGUFError as exc:
                ours, reason = "refuse", exc.message
                assert "\n" not in reason
            verdicts[theirs] += 1
            if ours != theirs:
                disagree.append(f"seed {seed} {kind}: llama.cpp {theirs} ({why}), specreg {ours} ({reason})")
            Path(path).unlink()  # the data kinds are a few MB each
    assert len(kinds) == KINDS
    assert verdicts["load"] >= 5 * len(SEEDS) and verdicts["refuse"] >= 20 * len(SEEDS), verdicts
    assert disagree == [], f"{len(disagree)} of {sum(verdicts.values())} disagree:\n" + "\n".join(disagree[:20])
