"""The bounds-checked walk over a GGUF header: key/values and tensor infos, never tensor data.

Every length and count is checked against the bytes left *before* it is used, the way
llama.cpp's gguf.cpp does, so a hostile file costs at most one pass over its header and no
allocation larger than the file or the header window's cap (`source.MAX_HEADER_BYTES`).
Arrays are not decoded here: fixed-size arrays are an (offset, count, type) reference;
string arrays are walked once to find their end.
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from specreg.errors import GGUFError
from specreg.gguf import format as F
from specreg.gguf.source import HeaderWindow
from specreg.text import escape_control


@dataclass
class ArrayRef:
    """Where an array's payload (its elements, after type and count) lies in the file."""

    item_type: int
    count: int
    offset: int
    nbytes: int


@dataclass
class RawTensor:
    name: str
    shape: list[int]
    ggml_type: int
    offset: int  # relative to the data section
    n_bytes: int
    n_elements: int
    info_offset: int  # where this tensor's info starts in the file (for error messages)


# A long string array as an earlier read found it: (count or start, end, SHA-256 of the payload,
# the heap its elements take as std::string, or None where that read did not say: see
# GGUFArray.long_string_heap). In `known` the first is the count; in Header.skipped the start.
KnownArray = tuple[int, int, str, int | None]
# A long string array of another file read before, by key: (count, payload bytes, SHA-256 of the
# payload, heap as in KnownArray). A pair's draft shares its target's vocabulary: its arrays are
# checked against the target's by one hash each instead of walked length by length.
TwinArray = tuple[int, int, str, int | None]


@dataclass
class Header:
    """Everything the walk found; values are python scalars, `ArrayRef`s or decoded strings."""

    version: int
    values: dict[str, object] = field(default_factory=dict)
    value_types: dict[str, int] = field(default_factory=dict)
    kv_offsets: dict[str, int] = field(default_factory=dict)
    string_spans: dict[str, tuple[int, int]] = field(default_factory=dict)  # raw bytes of string values
    string_heaps: dict[int, int] = field(default_factory=dict)  # tokens array start -> its std::string heap
    string_marks: dict[int, list[int]] = field(default_factory=dict)  # tokens array start -> offsets (MARK_STEP)
    tensors: list[RawTensor] = field(default_factory=list)
    alignment: int = F.DEFAULT_ALIGNMENT
    data_offset: int = 0
    header_end: int = 0
    warnings: list[str] = field(default_factory=list)  # accepted oddities llama.cpp also accepts
    skipped: list[KnownArray] = field(default_factory=list)  # (start, end, sha256, heap) taken from `known`
    array_sha: dict[int, str] = field(default_factory=dict)  # array start -> SHA-256, for arrays matched to a twin


Buffer = bytes | bytearray | memoryview | mmap.mmap

# the walk of the tokens array keeps the offset of every MARK_STEP-th element, so a lookup of a
# few special tokens near its end (`GGUFArray.strings_at`, what `inspect` prints) starts at the
# mark below each instead of walking 150,000 lengths again
MARK_STEP = 4096


def printable(text: str, limit: int = 80) -> str:
    """A name from the file for an error message: shortened, control characters (newlines
    included) escaped, so a hostile key can never turn one error into several lines."""
    return escape_control(text, limit=limit)


def skip_strings(buf: Buffer, p: int, count: int) -> tuple[int, int]:
    """Skip up to `count` length-prefixed strings at `p` while their prefixes lie in `buf`.

    Returns (offset reached, strings skipped); it stops early at the first group whose
    prefixes run past `buf`, so the caller can grow its window and resume. The last offset
    may lie past `buf` (the caller checks it). The hot loop of the reader (a vocabulary's
    tokens and merges): one C call per element, unrolled eight times.
    """
    unpack = F.U64.unpack_from
    done = 0
    g = p
    try:
        for _ in range(count >> 3):
            g = p
            p += 8 + unpack(buf, p)[0]
            p += 8 + unpack(buf, p)[0]
            p += 8 + unpack(buf, p)[0]
            p += 8 + unpack(buf, p)[0]
            p += 8 + unpack(buf, p)[0]
            p += 8 + unpack(buf, p)[0]
            p += 8 + unpack(buf, p)[0]
            p += 8 + unpack(buf, p)[0]
            done += 8
        for _ in range(count & 7):
            g = p
            p += 8 + unpack(buf, p)[0]
            done += 1
    except (struct.error, OverflowError):
        return g, done
    return p, done


def skip_strings_heap(buf: Buffer, p: int, count: int) -> tuple[int, int, int]:
    """skip_strings for the tokens array, also summing the heap its elements take as std::string
    (GGUFArray.long_string_heap's rule): one walk instead of two over a vocabulary's lengths, so a file
    new to the registry is not walked again by the memory model (`check pair` of two files new
    to the registry: benchmarks/bench_startup.py). Returns (offset, strings skipped, heap of those).
    Unrolled eight times like skip_strings, stopping at the start of the group that ran past
    `buf` with that group's heap left out."""
    unpack = F.U64.unpack_from
    done = heap = 0
    g, g_heap = p, 0
    try:
        for _ in range(count >> 3):
            g, g_heap = p, heap
            n = unpack(buf, p)[0]
            p += 8 + n
            if n > 15:  # (n + 24) & ~15 >= 32 for every such n
                heap += (n + 24) & ~15
            n = unpack(buf, p)[0]
            p += 8 + n
            if n > 15:
                heap += (n + 24) & ~15
            n = unpack(buf, p)[0]
            p += 8 + n
            if n > 15:
                heap += (n + 24) & ~15
            n = unpack(buf, p)[0]
            p += 8 + n
            if n > 15:
                heap += (n + 24) & ~15
            n = unpack(buf, p)[0]
            p += 8 + n
            if n > 15:
                heap += (n + 24) & ~15
            n = unpack(buf, p)[0]
            p += 8 + n
            if n > 15:
                heap += (n + 24) & ~15
            n = unpack(buf, p)[0]
            p += 8 + n
            if n > 15:
                heap += (n + 24) & ~15
            n = unpack(buf, p)[0]
            p += 8 + n
            if n > 15:
                heap += (n + 24) & ~15
            done += 8
        for _ in range(count & 7):
            g, g_heap = p, heap
            n = unpack(buf, p)[0]
            p += 8 + n
            if n > 15:
                heap += (n + 24) & ~15
            done += 1
    except (struct.error, OverflowError):
        return g, done, g_heap
    return p, done, heap


class Walker:
    """A cursor over the header window that raises GGUFError naming the field and offset."""

    def __init__(
        self,
        window: HeaderWindow,
        known: Mapping[int, KnownArray] | None = None,
        twins: Mapping[str, TwinArray] | None = None,
    ) -> None:
        self.win = window
        self.known = known or {}  # string arrays seen before: start -> (count, end, sha256 of the payload, heap)
        self.twins = twins or {}  # another file's string arrays: key -> (count, nbytes, sha256, heap)
        self.skipped: list[KnownArray] = []
        self.path = window.source.path
        self.buf = window.buf  # re-read after every growth (a resize may replace it)
        self.size = window.size
        self.pos = 0

    def err(self, problem: str, field: str | None, offset: int | None = None) -> GGUFError:
        return GGUFError(self.path, problem, field=field, offset=self.pos if offset is None else offset)

    def need(self, n: int, what: str, field: str | None = None) -> None:
        left = self.size - self.pos
        if n > left:
            raise self.err(f"truncated: {what} needs {n} bytes, {left} left", field or what)
        if self.pos + n > self.win.end:
            self.win.ensure(self.pos + n, field or what)
            self.buf = self.win.buf

    def unpack(self, st: struct.Struct, what: str, field: str | None = None) -> int:
        self.need(st.size, what, field)
        (v,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def string_span(self, what: str) -> tuple[int, int]:
        """(start, length) of a length-prefixed string; checks llama.cpp's 1 GiB limit."""
        at = self.pos
        n = self.unpack(F.U64, "string length", what)
        if n > F.MAX_STRING_LENGTH:
            raise self.err(f"string length {n} exceeds the 1 GiB limit", what, at)
        self.need(n, f"string of length {n}", what)
        start = self.pos
        self.pos += n
        return start, n

    def name(self, what: str) -> str:
        """A tensor name: must be valid UTF-8 (llama.cpp looks them up by name)."""
        start, n = self.string_span(what)
        try:
            return self.buf[start : start + n].decode("utf-8")  # a slice of the window is bytes
        except UnicodeDecodeError as exc:
            raise self.err("name is not valid UTF-8", what, start + exc.start) from None

    def strings_end(
        self, count: int, what: str, heaps: dict[int, int] | None = None, marks: dict[int, list[int]] | None = None
    ) -> int:
        """Skip `count` strings, growing the window as needed; on any violation walk again
        element by element so the error names the bad one. With `heaps`, the array's
        std::string heap is stored there under its start (skip_strings_heap); with `marks`, the
        offset of every MARK_STEP-th element (walked a step at a time to stop on each)."""
        start = p = self.pos
        i = heap = 0
        offsets = [start]
        while True:
            want = count - i if marks is None else min(count - i, MARK_STEP - i % MARK_STEP)
            if heaps is None:
                p, done = skip_strings(self.buf, p, want)
            else:
                p, done, more = skip_strings_heap(self.buf, p, want)
                heap += more
            i += done
            if i == count:
                if p <= self.size and p - start - 8 * count <= F.MAX_STRING_LENGTH:
                    self.win.ensure(p, what)
                    self.buf = self.win.buf
                    if heaps is not None:
                        heaps[start] = heap
                    if marks is not None:
                        marks[start] = offsets
                    return p
                break  # out of bounds, or some string may exceed 1 GiB: let the slow walk say which
            if done == want:  # a whole step: mark it and go on (its last offset is checked at the end)
                offsets.append(p)
                continue
            if p >= self.size or not self.win.grow(what):
                break
            self.buf = self.win.buf
        for j in range(count):
            self.string_span(f"{what}[{j}]")
        return self.pos  # unreachable for a bad array: string_span raised

    def header(self) -> Header:
        """Magic, version and counts, each bounded before use."""
        if self.size < 4:
            raise self.err(f"not a GGUF file: {self.size} bytes, too short for the magic", "magic", 0)
        self.need(4, "magic")
        magic = bytes(self.buf[0:4])
        if magic != F.MAGIC:
            raise self.err(f"not a GGUF file: magic {magic!r}, expected b'GGUF'", "magic", 0)
        self.pos = 4
        version = self.unpack(F.U32, "version", "version")
        if version != 0 and version & 0xFFFF == 0:
            raise self.err("big-endian GGUF not supported (byte-swapped version field)", "version", 4)
        if version == 1:
            raise self.err("GGUF v1 is no longer supported (llama.cpp reads v2 and v3)", "version", 4)
        if version not in F.SUPPORTED_VERSIONS:
            raise self.err(f"unsupported GGUF version {version} (supported: 2, 3)", "version", 4)
        n_tensors = self.unpack(F.I64, "tensor count", "n_tensors")
        n_kv = self.unpack(F.I64, "key/value count", "n_kv")
        left = self.size - self.pos
        if n_tensors < 0 or n_tensors * F.MIN_TENSOR_INFO_BYTES > left:
            raise self.err(f"tensor count {n_tensors} cannot fit in the {left} bytes left", "n_tensors", 8)
        if n_kv < 0 or n_kv * F.MIN_KV_BYTES + n_tensors * F.MIN_TENSOR_INFO_BYTES > left:
            raise self.err(f"key/value count {n_kv} cannot fit in the {left} bytes left", "n_kv", 16)
        if n_tensors > F.MAX_TENSORS:
            raise self.err(f"{n_tensors} tensors, more than the {F.MAX_TENSORS} specreg reads", "n_tensors", 8)
        if n_kv > F.MAX_KV:
            raise self.err(f"{n_kv} key/values, more than the {F.MAX_KV} specreg reads", "n_kv", 16)
        h = Header(version=version, skipped=self.skipped)
        self.kvs(h, n_kv)
        self.alignment(h)
        self.tensor_infos(h, n_tensors)
        self.data_section(h)
        return h

    def key(self, h: Header, what: str) -> str:
        """A metadata key. gguf.cpp accepts any bytes; one that is not UTF-8 can match no key
        llama.cpp looks up, so it is kept with its bad bytes shown as \\xNN, with a warning."""
        start, n = self.string_span(what)
        raw = self.buf[start : start + n]
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            key = raw.decode("utf-8", "backslashreplace")
            h.warnings.append(f"{what} at offset {start - 8} is not valid UTF-8, shown as '{printable(key)}'")
            return key

    def kvs(self, h: Header, n_kv: int) -> None:
        for i in range(n_kv):
            at = self.pos
            key = self.key(h, f"kv[{i}].key")
            if not key:
                raise self.err("empty key", f"kv[{i}].key", at)
            label = printable(key)
            if key in h.values:
                raise self.err(f"duplicate key '{label}'", label, at)
            vtype_at = self.pos
            vtype = self.unpack(F.U32, "value type", label)
            h.kv_offsets[key] = at
            h.value_types[key] = vtype
            if vtype == F.T_ARRAY:
                tokens = key == F.KEY_TOKENS
                h.values[key] = self.array(
                    label, h.string_heaps if tokens else None, key, h, h.string_marks if tokens else None
                )
            elif vtype == F.T_STRING:
                start, n = self.string_span(label)
                h.string_spans[key] = (start, n)
                # values are shown to people: undecodable bytes become U+FFFD (the raw bytes stay hashable)
                h.values[key] = self.buf[start : start + n].decode("utf-8", "replace")
            elif vtype in F.SCALAR_STRUCTS:
                h.values[key] = self.unpack(F.SCALAR_STRUCTS[vtype], f"{F.VALUE_TYPE_NAMES[vtype]} value", label)
            else:
                raise self.err(f"invalid value type {vtype}", label, vtype_at)

    def array(
        self,
        what: str,
        heaps: dict[int, int] | None = None,
        key: str | None = None,
        h: Header | None = None,
        marks: dict[int, list[int]] | None = None,
    ) -> ArrayRef:
        """An array value's header and bounds; `what` names it in errors; `heaps`, `marks`: see strings_end;
        `key` and `h`: where a twin's array (`twins`) is looked up and its SHA-256 kept."""
        type_at = self.pos
        item_type = self.unpack(F.U32, "array element type", what)
        count = self.unpack(F.U64, "array count", what)
        if item_type == F.T_ARRAY:
            raise self.err("nested arrays are not supported", what, type_at)
        if item_type != F.T_STRING and item_type not in F.SCALAR_SIZES:
            raise self.err(f"invalid array element type {item_type}", what, type_at)
        if count > F.MAX_ARRAY_ELEMENTS:
            raise self.err(f"array of {count} elements exceeds the 2^30 limit", what, type_at + 4)
        start = self.pos
        hint = self.known.get(start) if item_type == F.T_STRING else None
        if hint is not None and hint[0] == count and start + 8 * count <= hint[1] <= self.size:
            # the end of an array walked before: read_gguf proves it by the payload's SHA-256
            self.win.ensure(hint[1], what)
            self.buf = self.win.buf
            end = hint[1]
            self.skipped.append((start, end, hint[2], hint[3]))
        elif item_type == F.T_STRING and (twin_end := self.twin_end(key, count, start, what, heaps, h)) is not None:
            end = twin_end
        elif item_type == F.T_STRING:
            self.need(count * 8, f"array of {count} strings", what)
            end = self.strings_end(count, what, heaps, marks)
        else:
            nbytes = count * F.SCALAR_SIZES[item_type]
            self.need(nbytes, f"array of {count} {F.VALUE_TYPE_NAMES[item_type]}", what)
            end = start + nbytes
        self.pos = end
        return ArrayRef(item_type, count, start, end - start)

    def twin_end(
        self, key: str | None, count: int, start: int, what: str, heaps: dict[int, int] | None, h: Header | None
    ) -> int | None:
        """The end of the string array at `start` when its payload is its twin's, byte for byte
        (the same count, length and SHA-256): the twin's walk checked those very bytes, so this
        walk would find what it found. None (walk it) for any difference, or where the twin's
        length would run past the file or the header window's cap: the walk says what is wrong."""
        twin = self.twins.get(key) if key is not None else None
        if twin is None or twin[0] != count:
            return None
        end = start + twin[1]
        if twin[1] < 8 * count or end > min(self.size, self.win.cap):
            return None
        self.win.ensure(end, what)
        self.buf = self.win.buf
        sha = hashlib.sha256(memoryview(self.buf)[start:end]).hexdigest()
        if sha != twin[2]:
            return None
        if h is not None:
            h.array_sha[start] = sha
        if heaps is not None and twin[3] is not None:
            heaps[start] = twin[3]
        return end

    def alignment(self, h: Header) -> None:
        if F.KEY_ALIGNMENT not in h.values:
            return
        at = h.kv_offsets[F.KEY_ALIGNMENT]
        vtype = h.value_types[F.KEY_ALIGNMENT]
        if vtype != int(F.VT.UINT32):
            raise self.err(f"must be a UINT32, found {F.VALUE_TYPE_NAMES.get(vtype)}", F.KEY_ALIGNMENT, at)
        a = h.values[F.KEY_ALIGNMENT]
        assert isinstance(a, int)
        if a == 0 or a & (a - 1):
            raise self.err(f"alignment {a} is not a power of two", F.KEY_ALIGNMENT, at)
        h.alignment = a

    def tensor_infos(self, h: Header, n_tensors: int) -> None:
        seen: set[str] = set()
        for i in range(n_tensors):
            at = self.pos
            name = self.name(f"tensor[{i}].name")
            label = f"tensor '{printable(name)}'"
            if len(name.encode("utf-8")) >= F.GGML_MAX_NAME:
                raise self.err(f"tensor name is {len(name.encode())} bytes, limit {F.GGML_MAX_NAME - 1}", label, at)
            if name in seen:
                raise self.err("duplicate tensor name", label, at)
            seen.add(name)
            dims_at = self.pos
            n_dims = self.unpack(F.U32, "n_dims", label)
            if n_dims > F.GGML_MAX_DIMS:
                raise self.err(f"{n_dims} dimensions, at most {F.GGML_MAX_DIMS}", label, dims_at)
            shape = [self.unpack(F.I64, f"dimension {j}", label) for j in range(n_dims)]
            if any(d < 0 for d in shape):
                raise self.err(f"negative dimension in shape {shape}", label, dims_at)
            n_el = 1
            for d in shape:
                n_el *= d
            if n_el > F.INT64_MAX:
                raise self.err(f"shape {shape} overflows int64 elements", label, dims_at)
            type_at = self.pos
            ggml_type = self.unpack(F.I32, "ggml type", label)
            if ggml_type not in F.GGML_TYPES:
                raise self.err(f"unknown ggml type {ggml_type}", label, type_at)
            tname, blk, tsize = F.GGML_TYPES[ggml_type]
            ne0 = shape[0] if shape else 1
            if ne0 % blk:
                raise self.err(f"first dimension {ne0} is not a multiple of {tname}'s block size {blk}", label, dims_at)
            n_bytes = n_el // blk * tsize
            if n_bytes > F.SIZE_MAX:
                raise self.err(f"size of shape {shape} in bytes overflows", label, dims_at)
            off = self.unpack(F.U64, "data offset", label)
            h.tensors.append(RawTensor(name, shape, ggml_type, off, n_bytes, n_el, at))
        h.header_end = self.pos

    def data_section(self, h: Header) -> None:
        """Tensors must be packed in order at aligned offsets and end inside this file."""
        if not h.tensors:
            h.data_offset = self.pos
            return
        h.data_offset = F.pad(self.pos, h.alignment)
        if h.data_offset > self.size:
            raise self.err(f"truncated: data section would start at {h.data_offset} past end of file", "data", self.pos)
        expected = 0
        prev = None
        for t in h.tensors:
            label = f"tensor '{printable(t.name)}' offset"
            if t.offset % h.alignment:
                raise self.err(f"offset {t.offset} is not aligned to {h.alignment}", label, t.info_offset)
            if t.offset < expected:
                raise self.err(
                    f"offset {t.offset} overlaps tensor '{printable(prev or '')}' (next free {expected})",
                    label,
                    t.info_offset,
                )
            if t.offset > expected:
                raise self.err(
                    f"offset {t.offset}, expected {expected} (llama.cpp requires packed tensors)", label, t.info_offset
                )
            end = h.data_offset + t.offset + t.n_bytes
            if end > self.size:
                raise self.err(
                    f"data ends at {end}, past the end of the file ({self.size} bytes)", label, t.info_offset
                )
            expected += F.pad(t.n_bytes, h.alignment)
            prev = t.name
