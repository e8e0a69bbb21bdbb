"""Fast, hardened GGUF metadata reader: header, key/values and tensor infos, never tensor data.

`gguf.GGUFReader` builds a numpy view per element (slow on a real vocabulary);
this reader walks the header once with `struct.unpack_from`, keeps arrays as references
into the header bytes, fingerprints them by hashing their raw payload, and decodes token
strings only when asked. Every malformed, truncated or hostile input raises `GGUFError`.
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

from specreg.errors import GGUFError
from specreg.gguf import format as F
from specreg.gguf.fields import check_tokenizer
from specreg.gguf.source import FIRST_READ, MAX_HEADER_BYTES, READ_STEP, ByteSource, FileSource, HeaderWindow
from specreg.gguf.walk import MARK_STEP, ArrayRef, Header, KnownArray, TwinArray, Walker, printable, skip_strings
from specreg.schemas.gguf import GGUFSummary, TensorInfo

LAYOUT_MIN_COUNT = 4096  # string arrays shorter than this are walked faster than looked up

# ggml type -> numpy dtype for tensor_values(); quantized types have no per-element value.
_VALUE_DTYPES = {0: "<f4", 1: "<f2", 28: "<f8", 24: "<i1", 25: "<i2", 26: "<i4", 27: "<i8", 30: "bf16"}


class GGUFArray:
    """A metadata array, kept as a reference into the header bytes until someone decodes it."""

    __slots__ = ("_owner", "count", "item_type", "key", "nbytes", "offset")

    def __init__(self, owner: GGUFFile, key: str, ref: ArrayRef) -> None:
        self._owner = owner
        self.key = key
        self.item_type = ref.item_type
        self.count = ref.count
        self.offset = ref.offset  # absolute file offset of the first element
        self.nbytes = ref.nbytes

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"GGUFArray({self.key!r}, {self.type_name}, count={self.count})"

    @property
    def type_name(self) -> str:
        return F.VALUE_TYPE_NAMES[self.item_type]

    def raw(self) -> memoryview:
        """The payload exactly as stored (elements only, without the type and count)."""
        return memoryview(self._owner._buf)[self.offset : self.offset + self.nbytes]

    def sha256(self) -> str:
        """Fingerprint: SHA-256 over the raw payload, so equal arrays hash equal without decoding."""
        known = self._owner._array_sha
        if self.offset not in known:
            known[self.offset] = hashlib.sha256(self.raw()).hexdigest()
        return known[self.offset]

    def long_string_heap(self) -> int:
        """Heap bytes of a string array's elements held as std::string (libstdc++: up to 15 bytes
        inline; a longer one a glibc chunk of n + 1, at least 32), read from the stored lengths,
        nothing decoded; what llama.cpp's tokenizer keeps of a vocabulary beyond its per-token
        parts (validators/memory_budget.py). 0 for any other array.

        A registered file's value comes with its layout (`read_gguf(known=...)`, proven by the
        payload's SHA-256), so `check pair` on it walks no token (benchmarks/bench_startup.py
        times `check pair` on registered files and on files new to the registry). One loop with
        the arithmetic inline, because this walk is on the path of every file new to the registry."""
        if self.item_type != F.T_STRING:
            return 0
        known = self._owner._array_heap
        if self.offset not in known:
            raw = self.raw()
            unpack = F.U64.unpack_from
            total = 0
            p = 0
            for _ in range(self.count):  # the reader's walk checked every length against the payload
                n = unpack(raw, p)[0]
                p += 8 + n
                if n > 15:  # (n + 24) & ~15 >= 32 for every such n
                    total += (n + 24) & ~15
            known[self.offset] = total
        return known[self.offset]

    def strings_at(self, indices: Iterable[int]) -> dict[int, str]:
        """Some elements of a string array, decoded without decoding the others (a few special
        tokens out of a whole vocabulary: skipping lengths costs less than decoding every text).
        From the walk's mark below each (walk.MARK_STEP) where the walk kept them, so `inspect`
        of a file new to the registry skips no more than a step's lengths: special tokens often
        lie at the end of the vocabulary (qwen2's)."""
        want = {i for i in indices if 0 <= i < self.count}
        if self.item_type != F.T_STRING or not want:
            return {}
        buf = self._owner._buf
        unpack = F.U64.unpack_from
        marks = self._owner._array_marks.get(self.offset, [self.offset])
        out: dict[int, str] = {}
        p = self.offset
        i = 0
        for target in sorted(want):  # the walk at open checked every length against the buffer
            j = min(target // MARK_STEP, len(marks) - 1)
            if j * MARK_STEP > i:
                p, i = marks[j], j * MARK_STEP
            p, done = skip_strings(buf, p, target - i)
            i += done
            n = unpack(buf, p)[0]
            out[target] = bytes(buf[p + 8 : p + 8 + n]).decode("utf-8", "surrogateescape")
        return out

    def to_list(self) -> list:
        """Decode every element. Strings use surrogateescape: distinct bytes stay distinct."""
        buf = self._owner._buf
        if self.item_type == F.T_STRING:
            unpack = F.U64.unpack_from
            decode = bytes.decode
            out: list[str] = []
            append = out.append
            p = self.offset
            for _ in range(self.count):  # the hot loop of a vocab comparison: few operations per entry
                q = p + 8
                p = q + unpack(buf, p)[0]
                append(decode(buf[q:p], "utf-8", "surrogateescape"))
            return out
        fmt = f"<{self.count}{F.SCALAR_FORMATS[self.item_type]}"
        return list(struct.unpack_from(fmt, buf, self.offset))


class GGUFFile:
    """One GGUF file's header, key/values and tensor infos (see docs/CONTRACTS.md)."""

    def __init__(
        self,
        path: Path | str,
        file_size: int,
        header: Header,
        buf: mmap.mmap,
        reopen: Callable[[], ByteSource] | None = None,
    ) -> None:
        self.path = path
        # tensor data is read by reopening the source (no descriptor is kept between calls)
        self._reopen: Callable[[], ByteSource] = reopen or partial(FileSource, path)
        self.file_size = file_size
        self.version = header.version
        self.alignment = header.alignment
        self.data_offset = header.data_offset
        self.header_size = header.header_end
        self.value_types: dict[str, int] = header.value_types  # key -> GGUFValueType (ARRAY for arrays)
        self.kv_offsets: dict[str, int] = header.kv_offsets  # key -> file offset of its entry
        self._string_spans = header.string_spans
        self.warnings: list[str] = list(header.warnings)  # one line each, about this file (never fatal)
        self._buf = buf  # header bytes [0, header_end), never modified: arrays and strings are decoded from here
        self.metadata: Mapping[str, object] = {
            k: GGUFArray(self, k, v) if isinstance(v, ArrayRef) else v for k, v in header.values.items()
        }
        self.tensors: list[TensorInfo] = [
            TensorInfo(
                name=t.name,
                shape=t.shape,
                ggml_type=t.ggml_type,
                type_name=F.GGML_TYPES[t.ggml_type][0],
                offset=t.offset,
                n_bytes=t.n_bytes,
            )
            for t in header.tensors
        ]
        self.n_elements: dict[str, int] = {t.name: t.n_elements for t in header.tensors}
        self._tensor_index = {t.name: t for t in self.tensors}
        self._cache: dict[str, object] = {}
        self._array_sha: dict[int, str] = {start: sha for start, _, sha, _ in header.skipped}  # array offset -> SHA-256
        self._array_sha |= header.array_sha  # hashed by the walk itself (arrays matched to a twin's)
        # array offset -> GGUFArray.long_string_heap, as the layout of an earlier read said
        self._array_heap: dict[int, int] = {start: heap for start, _, _, heap in header.skipped if heap is not None}
        self._array_heap |= header.string_heaps  # summed by the walk itself (walk.skip_strings_heap)
        self._array_marks = header.string_marks  # array offset -> every MARK_STEP-th element's offset
        self.jumped = len(header.skipped)  # string arrays read_gguf(known=...) jumped over (each proven)
        self.twinned = len(header.array_sha)  # string arrays read_gguf(twins=...) matched to a twin's (hashed)
        self._summary: GGUFSummary | None = None
        self.sha256: str | None = None  # set by whoever hashed the bytes (the registry); checks compare it
        self._merges_checked = False

    def __repr__(self) -> str:
        return f"GGUFFile({str(self.path)!r}, v{self.version}, {len(self.metadata)} kv, {len(self.tensors)} tensors)"

    # -- lookups -------------------------------------------------------------------------
    def error(self, problem: str, key: str | None = None, offset: int | None = None) -> GGUFError:
        """A GGUFError for this file, located at `key`'s entry unless an offset is given."""
        if offset is None and key is not None:
            offset = self.kv_offsets.get(key)
        return GGUFError(self.path, problem, field=key, offset=offset)

    def raw_string(self, key: str) -> bytes | None:
        """A string value's bytes as stored (for hashing, e.g. the chat template)."""
        span = self._string_spans.get(key)
        return None if span is None else self._buf[span[0] : span[0] + span[1]]

    def tensor(self, name: str) -> TensorInfo | None:
        return self._tensor_index.get(name)

    def string_array_layout(self, min_count: int = LAYOUT_MIN_COUNT) -> dict[int, KnownArray]:
        """Where each long string array starts and ends, with its payload's SHA-256 and, for the
        tokens, their heap (the memory model's; merges are counted, not measured): given back to
        `read_gguf(known=...)`, a later read of the same bytes jumps over them instead of walking
        every length prefix of each array (most of a vocabulary file's parse), and the memory
        model reads the heap instead of walking the tokens again."""
        return {
            a.offset: (
                a.count,
                a.offset + a.nbytes,
                a.sha256(),
                a.long_string_heap() if a.key == F.KEY_TOKENS else None,
            )
            for a in self.metadata.values()
            if isinstance(a, GGUFArray) and a.item_type == F.T_STRING and a.count >= min_count
        }

    def twin_arrays(self, min_count: int = LAYOUT_MIN_COUNT) -> dict[str, TwinArray]:
        """The long string arrays by key, (count, payload bytes, SHA-256, heap): given to the read
        of the pair's other file (`read_gguf(twins=...)`), whose arrays of the same vocabulary are
        then hashed once each instead of walked (`check pair` of two files new to the registry)."""
        return {
            a.key: (a.count, a.nbytes, a.sha256(), a.long_string_heap() if a.key == F.KEY_TOKENS else None)
            for a in self.metadata.values()
            if isinstance(a, GGUFArray) and a.item_type == F.T_STRING and a.count >= min_count
        }

    def array(self, key: str) -> list:
        """Decode the array stored under `key` (GGUFError if absent or not an array)."""
        value = self.metadata.get(key)
        if not isinstance(value, GGUFArray):
            problem = "key not present" if value is None else "not an array"
            raise self.error(problem, key)
        return value.to_list()

    def typed_array(self, key: str, allowed: tuple[int, ...]) -> GGUFArray | None:
        """The array under `key` (None if absent); any other value or element type is a GGUFError."""
        value = self.metadata.get(key)
        if value is None:
            return None
        if not isinstance(value, GGUFArray) or value.item_type not in allowed:
            kind = value.type_name if isinstance(value, GGUFArray) else F.VALUE_TYPE_NAMES.get(self.value_types[key])
            want = " or ".join(F.VALUE_TYPE_NAMES[a] for a in allowed)
            raise self.error(f"must be an array of {want}, found {kind}", key)
        return value

    def _cached(self, key: str, allowed: tuple[int, ...]) -> list:
        if key not in self._cache:
            arr = self.typed_array(key, allowed)
            self._cache[key] = [] if arr is None else arr.to_list()
        return self._cache[key]  # type: ignore[return-value]

    # -- tokenizer (lazy) ----------------------------------------------------------------
    def token_texts(self) -> list[str]:
        """Token strings, decoded on first call and cached (surrogateescape keeps raw bytes)."""
        return self._cached(F.KEY_TOKENS, (F.T_STRING,))

    def token_types(self) -> list[int]:
        return self._cached(F.KEY_TOKEN_TYPES, (int(F.VT.INT32),))

    def merges(self) -> list[str]:
        """BPE merges, each checked like llama.cpp splits it: 'left right' around one space."""
        merges = self._cached(F.KEY_MERGES, (F.T_STRING,))
        if not self._merges_checked:
            for i, m in enumerate(merges):
                if m.count(" ") != 1 or m.startswith(" ") or m.endswith(" "):
                    arr = self.metadata[F.KEY_MERGES]
                    assert isinstance(arr, GGUFArray)
                    at = arr.offset + sum(8 + len(x.encode("utf-8", "surrogateescape")) for x in merges[:i])
                    raise self.error(
                        f"malformed merge {m[:40]!r}: expected 'left right' with one space", f"{F.KEY_MERGES}[{i}]", at
                    )
            self._merges_checked = True
        return merges

    # -- tensor data (small tensors only) -------------------------------------------------
    def tensor_values(self, name: str, max_elems: int = 1 << 24) -> list[int] | list[float]:
        """Read a small int/float tensor (EAGLE-3 `d2t`), bounded by `max_elems`."""
        t = self.tensor(name)
        field = f"tensor '{printable(name)}'"
        if t is None:
            raise GGUFError(self.path, "no such tensor", field=field)
        n = self.n_elements[name]
        if n > max_elems:
            raise GGUFError(self.path, f"tensor has {n} elements, more than the {max_elems} allowed", field=field)
        dtype = _VALUE_DTYPES.get(t.ggml_type)
        if dtype is None:
            raise GGUFError(self.path, f"tensor type {t.type_name} has no per-element values", field=field)
        start = self.data_offset + t.offset
        source = self._reopen()
        try:
            if source.size != self.file_size:
                raise GGUFError(self.path, "file changed size since it was opened", field=field)
            data = source.read(start, t.n_bytes)
        finally:
            source.close()
        if len(data) != t.n_bytes:
            raise GGUFError(self.path, f"truncated: tensor data needs {t.n_bytes} bytes", field=field, offset=start)
        import numpy as np

        if dtype == "bf16":
            values = (np.frombuffer(data, dtype="<u2").astype("<u4") << 16).view("<f4")
        else:
            values = np.frombuffer(data, dtype=dtype)
        return values.tolist()


def read_gguf(
    source: ByteSource,
    *,
    cap: int = MAX_HEADER_BYTES,
    first: int = FIRST_READ,
    step: int = READ_STEP,
    reopen: Callable[[], ByteSource] | None = None,
    known: Mapping[int, KnownArray] | None = None,
    twins: Mapping[str, TwinArray] | None = None,
) -> GGUFFile:
    """Walk the header of any byte source (a local file, a range-read remote file).

    Args:
        source: where the bytes come from; only the header is read, never tensor data.
        cap: the most header bytes read before the file is refused as oversized.
        first: the size of the first read.
        step: the size of each later read (a remote source may want larger ones).
        reopen: gives a fresh source for tensor reads later (default: the local file at
            `source.path`).
        known: `string_array_layout()` of an earlier read of this file. A string array found
            at a known start with the known count is jumped over to its known end, and kept
            only if its payload hashes to the known SHA-256 (the bytes the earlier read walked,
            length by length); any mismatch reads the whole header again without `known`.
        twins: `twin_arrays()` of another file (a pair's target, for its draft); a string
            array under the same key with the same count, length and SHA-256 is not walked
            (any difference: walked as usual).

    Raises:
        GGUFError: on any malformed, truncated or hostile input, naming the field and offset.
    """
    if source.size == 0:
        raise GGUFError(source.path, "not a GGUF file: the file is empty", field="magic", offset=0)
    window = HeaderWindow(source, cap=cap, first=first, step=step)
    walker = Walker(window, known, twins)
    try:
        header = walker.header()
    except GGUFError:
        if not walker.skipped:
            raise
        header = None  # perhaps a wrong jump: only a full walk may say what is wrong with the file
    # a jump is kept only if the bytes jumped over are those an earlier read walked, length by length
    if header is None or any(
        hashlib.sha256(memoryview(window.buf)[start:end]).hexdigest() != sha for start, end, sha, _ in header.skipped
    ):
        return read_gguf(source, cap=cap, first=first, step=step, reopen=reopen, twins=twins)
    buf = window.trim(header.header_end)  # keep the window itself: no second copy of a header of many MiB
    name = source.path if isinstance(source.path, Path) else str(source.path)  # a URL stays a URL
    gf = GGUFFile(name, source.size, header, buf, reopen)
    check_tokenizer(gf)
    return gf


def open_gguf(path: str | Path, known: Mapping[int, KnownArray] | None = None) -> GGUFFile:
    """Read a local GGUF file's header, key/values and tensor infos.

    Args:
        path: the file.
        known: an earlier read's `string_array_layout()` (see `read_gguf`).

    Raises:
        GGUFError: on any defect, or when the file cannot be opened.
    """
    with FileSource(path) as source:
        return read_gguf(source, known=known)
