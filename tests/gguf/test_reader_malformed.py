"""Every file of the malformed corpus is refused with one line naming file, field and offset.

In-process, per case: the GGUFError's field, offset and problem, time and peak memory.
Through the real CLI (`specreg inspect FILE`, one subprocess per file, run a few at a time):
exit code 2, exactly one stderr line naming the file and field/offset, no traceback; CPU time
and peak RSS of each child (from wait4) compared with the same CLI reading a valid file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from malformed import make_corpus

from specreg.errors import GGUFError
from specreg.gguf.reader import open_gguf
from specreg.gguf.summary import summarize

CASES = {c.name: c for c in make_corpus.CASES}
SPECREG = str(Path(sys.executable).parent / "specreg")
MB = 1 << 20


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_corpus.write_corpus(tmp_path_factory.mktemp("malformed"))


def _read_all(path: Path, lazy: bool) -> None:
    f = open_gguf(path)
    summarize(f)
    if lazy:
        f.merges()


def test_corpus_is_large_and_the_base_file_is_valid(corpus: dict[str, Path]) -> None:
    assert len(make_corpus.CASES) >= 35
    f = open_gguf(corpus["base"])
    assert summarize(f).tokenizer.n_tokens == len(make_corpus.TOKENS)
    assert f.merges() == ["a b", "ab c"] and f.tensor_values("output_norm.weight") == [32.0, 33.0, 34.0, 35.0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_reader_names_field_and_offset(corpus: dict[str, Path], name: str) -> None:
    case = CASES[name]
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(GGUFError) as exc:
            _read_all(corpus[name], case.lazy)
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    err = exc.value
    assert err.path == str(corpus[name])
    assert case.field in (err.field or ""), err.message
    assert case.problem in err.problem, err.message
    assert err.offset is not None and 0 <= err.offset <= max(corpus[name].stat().st_size, 1)
    assert "\n" not in err.message
    assert elapsed < 1.0 and peak < 100 * MB


def _run_cli(path: Path) -> tuple[int, str, float, int]:
    """(exit code, stderr, child CPU seconds, child peak RSS bytes) of `specreg inspect path`."""
    env = dict(os.environ, COLUMNS="80")
    proc = subprocess.Popen([SPECREG, "inspect", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert proc.stderr is not None
    err = proc.stderr.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, err, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


# One case per section of the file for the real-subprocess check in CI; all of them with -m slow.
SAMPLE = ["empty", "byte_swapped", "string_length_2p63", "overlapping_offsets", "eos_id_negative"]


def _check_cli(corpus: dict[str, Path], names: list[str]) -> None:
    base_rc, base_err, base_cpu, base_rss = _run_cli(corpus["base"])
    assert base_rc == 0, base_err
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(names, pool.map(lambda n: _run_cli(corpus[n]), names), strict=True))
    problems = []
    for name, (rc, err, cpu, rss) in results.items():
        lines = err.strip("\n").split("\n")
        if rc != 2 or len(lines) != 1 or "Traceback" in err:
            problems.append(f"{name}: rc={rc} stderr={err!r}")
        elif str(corpus[name]) not in lines[0] or not ("field" in lines[0] or "offset" in lines[0]):
            problems.append(f"{name}: line does not name file and field/offset: {lines[0]!r}")
        elif cpu - base_cpu > 1.0 or rss - base_rss > 100 * MB:
            problems.append(f"{name}: cpu {cpu:.2f}s (valid file {base_cpu:.2f}s), rss +{(rss - base_rss) / MB:.0f} MB")
    assert not problems, "\n".join(problems)


def test_cli_subprocess_refuses_a_sample_with_one_line(corpus: dict[str, Path]) -> None:
    assert set(SAMPLE) <= set(CASES)
    _check_cli(corpus, SAMPLE)


@pytest.mark.slow
def test_cli_subprocess_refuses_every_malformed_file_with_one_line(corpus: dict[str, Path]) -> None:
    _check_cli(corpus, [n for n, c in CASES.items() if not c.lazy])


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if not c.lazy))
def test_cli_entry_point_prints_one_line_and_exits_2(
    corpus: dict[str, Path], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The console entry point itself (in this process, so every case stays cheap)."""
    from specreg.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["inspect", str(corpus[name])])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(corpus[name]) in err and CASES[name].field in err and "offset" in err


@pytest.mark.parametrize("make", ["missing", "text", "directory"])
def test_cli_missing_and_non_gguf_files(tmp_path: Path, make: str) -> None:
    path = tmp_path / "x.gguf"
    if make == "text":
        path.write_text("this is not a model\n" * 10)
    elif make == "directory":
        path.mkdir()
    rc, err, _, _ = _run_cli(path)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err and str(path) in err
    assert {"missing": "no such file", "text": "not a GGUF file", "directory": "directory"}[make] in err
