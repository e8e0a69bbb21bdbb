"""Write a corpus of malformed GGUF files, one defect each, next to a valid base file.

Usage: python tests/malformed/make_corpus.py OUTDIR

Files are built with a tiny byte-level encoder (so any field can hold any value) from the
same description as a valid base file; truncations cut the valid file inside each section.
`CASES` says, per file, which field the reader must name and a fragment of its message.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?", U64: "Q", I64: "q", F64: "d"}
Q4_0, F32_T = 2, 0


def s(text: str | bytes, length: int | None = None) -> bytes:
    """A GGUF string: u64 length + bytes (length overridable for hostile files)."""
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw) if length is None else length) + raw


def scalar(vtype: int, value: object) -> bytes:
    return struct.pack("<I", vtype) + (s(value) if vtype == STR else struct.pack("<" + _FMT[vtype], value))  # type: ignore[arg-type]


def array(item_type: int, items: list, count: int | None = None) -> bytes:
    n = len(items) if count is None else count
    if item_type == STR:
        body = b"".join(s(x) for x in items)
    else:
        body = b"".join(struct.pack("<" + _FMT[item_type], x) for x in items)
    return struct.pack("<IIQ", ARR, item_type, n) + body


@dataclass
class Spec:
    """A GGUF file as lists of raw parts; defaults describe the valid base file."""

    magic: bytes = b"GGUF"
    version: int = 3
    kvs: list[tuple[bytes, bytes]] = field(default_factory=list)  # (encoded key, encoded typed value)
    tensors: list[tuple[bytes, list[int], int, int]] = field(default_factory=list)  # name, dims, type, offset
    n_kv: int | None = None
    n_tensors: int | None = None
    data: bytes = b""
    alignment: int = 32


TOKENS = ["<unk>", "<s>", "</s>", "a", "b", "ab", "c", "abc"]


def base() -> Spec:
    """A small valid llama-vocab file with two f32 tensors."""
    n = len(TOKENS)
    kvs = [
        (s("general.architecture"), scalar(STR, "llama")),
        (s("llama.block_count"), scalar(U32, 1)),
        (s("llama.context_length"), scalar(U32, 64)),
        (s("tokenizer.ggml.model"), scalar(STR, "gpt2")),
        (s("tokenizer.ggml.tokens"), array(STR, TOKENS)),
        (s("tokenizer.ggml.scores"), array(F32, [0.0] * n)),
        (s("tokenizer.ggml.token_type"), array(I32, [2, 3, 3, 1, 1, 1, 1, 1])),
        (s("tokenizer.ggml.merges"), array(STR, ["a b", "ab c"])),
        (s("tokenizer.ggml.bos_token_id"), scalar(U32, 1)),
        (s("tokenizer.ggml.eos_token_id"), scalar(U32, 2)),
        (s("tokenizer.ggml.add_bos_token"), scalar(BOOL, True)),
        (s("general.name"), scalar(STR, "corpus-base")),  # last: truncations inside it pass the count bounds
    ]
    tensors = [(s("token_embd.weight"), [4, n], F32_T, 0), (s("output_norm.weight"), [4], F32_T, 128)]
    data = np.arange(4 * n + 4, dtype="<f4").tobytes()  # 128 + 16 bytes, second tensor padded to 32
    return Spec(kvs=kvs, tensors=tensors, data=data)


def encode(spec: Spec, marks: dict[str, int] | None = None) -> bytes:
    """Serialize; `marks` receives the offset where each section begins (for truncations)."""
    m = marks if marks is not None else {}
    out = bytearray(spec.magic)
    m["version"] = len(out)
    out += struct.pack("<I", spec.version)
    m["n_tensors"] = len(out)
    out += struct.pack("<q", len(spec.tensors) if spec.n_tensors is None else spec.n_tensors)
    m["n_kv"] = len(out)
    out += struct.pack("<q", len(spec.kvs) if spec.n_kv is None else spec.n_kv)
    for key, value in spec.kvs:
        name = key[8:].decode("utf-8", "replace")
        m.setdefault("kv0", len(out))
        m[f"kv:{name}"] = len(out)
        m[f"value:{name}"] = len(out) + len(key)
        out += key + value
    for name, dims, ggml_type, offset in spec.tensors:
        m.setdefault("tensor0", len(out))
        out += name
        m.setdefault("tensor0.dims", len(out))
        out += struct.pack("<I", len(dims)) + b"".join(struct.pack("<q", d) for d in dims)
        m.setdefault("tensor0.type", len(out))
        out += struct.pack("<i", ggml_type)
        m.setdefault("tensor0.offset", len(out))
        out += struct.pack("<Q", offset)
    if spec.tensors:
        out += b"\0" * (-len(out) % spec.alignment)
    m["data"] = len(out)
    out += spec.data
    return bytes(out)


def _with(**changes: object) -> Callable[[], bytes]:
    def build() -> bytes:
        spec = base()
        for k, v in changes.items():
            setattr(spec, k, v)
        return encode(spec)

    return build


def _kv(key: str, value: bytes | None, raw_key: bytes | None = None) -> Callable[[], bytes]:
    """Base file with `key` replaced (or appended) by `value`; None removes it."""

    def build() -> bytes:
        spec = base()
        enc = raw_key if raw_key is not None else s(key)
        kvs = [kv for kv in spec.kvs if kv[0] != s(key)]
        if value is not None:
            kvs.append((enc, value))
        spec.kvs = kvs
        return encode(spec)

    return build


def _tensor(
    i: int,
    name: bytes | None = None,
    dims: list[int] | None = None,
    ggml_type: int | None = None,
    offset: int | None = None,
) -> Callable[[], bytes]:
    def build() -> bytes:
        spec = base()
        n, d, t, o = spec.tensors[i]
        spec.tensors[i] = (
            name if name is not None else n,
            dims if dims is not None else d,
            t if ggml_type is None else ggml_type,
            o if offset is None else offset,
        )
        return encode(spec)

    return build


def _cut(mark: str, extra: int = 2) -> Callable[[], bytes]:
    """The valid base file cut `extra` bytes into the section starting at `mark`."""

    def build() -> bytes:
        marks: dict[str, int] = {}
        full = encode(base(), marks)
        return full[: marks[mark] + extra]

    return build


def _big_endian() -> bytes:
    """A real big-endian file from gguf's own writer."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "be.gguf"
        w = gguf.GGUFWriter(p, "llama", endianess=gguf.GGUFEndian.BIG)
        w.add_block_count(1)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return p.read_bytes()


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], bytes]
    field: str  # substring of the field the error must name
    problem: str  # substring of the problem text
    lazy: bool = False  # defect found only when the lazy accessor (merges()) runs


HUGE = 1 << 63
CASES: list[Case] = [
    # truncation inside every section
    Case("empty", lambda: b"", "magic", "empty"),
    Case("trunc_magic", lambda: b"GG", "magic", "too short"),
    Case("trunc_version", _cut("version"), "version", "truncated"),
    Case("trunc_n_tensors", _cut("n_tensors", 3), "n_tensors", "truncated"),
    Case("trunc_n_kv", _cut("n_kv", 5), "n_kv", "truncated"),
    Case("counts_exceed_file", _cut("kv0", 3), "n_tensors", "cannot fit"),  # bounded before any key is read
    Case("trunc_key_length", _cut("kv:general.name", 3), "kv[11].key", "truncated"),
    Case("trunc_key", _cut("kv:general.name", 10), "kv[11].key", "truncated"),
    Case("trunc_value_type", _cut("value:general.name", 2), "general.name", "truncated"),
    Case(
        "trunc_scalar_value", _cut("value:tokenizer.ggml.eos_token_id", 6), "tokenizer.ggml.eos_token_id", "truncated"
    ),
    Case("trunc_string_value", _cut("value:general.name", 15), "general.name", "truncated"),
    Case("trunc_array_header", _cut("value:tokenizer.ggml.merges", 9), "tokenizer.ggml.merges", "truncated"),
    Case("trunc_array_data", _cut("value:tokenizer.ggml.scores", 30), "tokenizer.ggml.scores", "truncated"),
    Case("trunc_string_array_data", _cut("value:tokenizer.ggml.tokens", 86), "tokenizer.ggml.tokens[6]", "truncated"),
    Case("trunc_tensor_name", _cut("tensor0", 12), "tensor[0].name", "truncated"),
    Case("trunc_tensor_dims", _cut("tensor0.dims", 6), "token_embd.weight", "truncated"),
    Case("trunc_tensor_type", _cut("tensor0.type", 2), "token_embd.weight", "truncated"),
    Case("trunc_tensor_offset", _cut("tensor0.offset", 4), "token_embd.weight", "truncated"),
    Case("trunc_data_section", _cut("data", 100), "offset", "past the end of the file"),
    # header bounds
    Case("bad_magic", _with(magic=b"GGML"), "magic", "not a GGUF file"),
    Case("version_0", _with(version=0), "version", "unsupported GGUF version 0"),
    Case("version_1", _with(version=1), "version", "v1 is no longer supported"),
    Case("version_4", _with(version=4), "version", "unsupported GGUF version 4"),
    Case("byte_swapped", _big_endian, "version", "big-endian GGUF not supported"),
    Case("n_tensors_huge", _with(n_tensors=1 << 62), "n_tensors", "cannot fit"),
    Case("n_tensors_negative", _with(n_tensors=-1), "n_tensors", "cannot fit"),
    Case("n_kv_huge", _with(n_kv=HUGE - 1), "n_kv", "cannot fit"),
    Case("n_kv_too_many", _with(n_kv=13, tensors=[], data=b""), "kv[12].key", "truncated"),
    # hostile strings and arrays
    Case("key_length_2p63", _kv("x", scalar(U32, 1), raw_key=s("x", HUGE)), "kv[12].key", "exceeds the 1 GiB limit"),
    Case(
        "string_length_2p63",
        _kv("general.name", struct.pack("<I", STR) + s("x", HUGE)),
        "general.name",
        "exceeds the 1 GiB limit",
    ),
    Case(
        "string_length_1gib_plus_1",
        _kv("general.name", struct.pack("<I", STR) + s("x", (1 << 30) + 1)),
        "general.name",
        "exceeds the 1 GiB limit",
    ),
    Case("string_past_eof", _kv("general.name", struct.pack("<I", STR) + s("x", 1 << 20)), "general.name", "truncated"),
    Case("array_count_2p63", _kv("general.tags", array(U32, [], HUGE)), "general.tags", "exceeds the 2^30 limit"),
    Case(
        "array_count_2p30_plus_1",
        _kv("general.tags", array(U8, [], (1 << 30) + 1)),
        "general.tags",
        "exceeds the 2^30 limit",
    ),
    Case("array_past_eof", _kv("general.tags", array(U32, [1, 2], 1_000_000)), "general.tags", "truncated"),
    Case(
        "string_array_element_hostile",
        _kv("tokenizer.ggml.tokens", array(STR, TOKENS[:5], 8) + s("y", 1 << 40) + b"".join(s(t) for t in TOKENS[6:])),
        "tokenizer.ggml.tokens[5]",
        "exceeds the 1 GiB limit",
    ),
    Case(
        "string_array_element_past_eof",
        _kv("tokenizer.ggml.tokens", array(STR, TOKENS[:5], 8) + s("y", 1 << 20) + b"".join(s(t) for t in TOKENS[6:])),
        "tokenizer.ggml.tokens[5]",
        "truncated",
    ),
    Case(
        "nested_array",
        _kv("general.tags", struct.pack("<IIQ", ARR, ARR, 1) + struct.pack("<IQ", U8, 0)),
        "general.tags",
        "nested arrays",
    ),
    Case(
        "invalid_value_type",
        _kv("general.tags", struct.pack("<I", 13) + b"\0" * 8),
        "general.tags",
        "invalid value type 13",
    ),
    Case(
        "invalid_array_type",
        _kv("general.tags", struct.pack("<IIQ", ARR, 99, 0)),
        "general.tags",
        "invalid array element type 99",
    ),
    Case("empty_key", _kv("", scalar(U32, 1)), "kv[12].key", "empty key"),
    Case("duplicate_key", _kv("x", scalar(U32, 1), raw_key=s("general.name")), "general.name", "duplicate key"),
    Case("duplicate_key_with_newline", lambda: _twice("evil\nkey\x1b[31m"), "evil\\x0akey\\x1b[31m", "duplicate key"),
    Case("alignment_wrong_type", _kv("general.alignment", scalar(U64, 32)), "general.alignment", "must be a UINT32"),
    Case(
        "alignment_not_power_of_two",
        _kv("general.alignment", scalar(U32, 48)),
        "general.alignment",
        "not a power of two",
    ),
    Case("alignment_zero", _kv("general.alignment", scalar(U32, 0)), "general.alignment", "not a power of two"),
    # tensor infos
    Case("tensor_name_too_long", _tensor(1, name=s("n" * 64)), "tensor 'nnn", "limit 63"),
    Case("tensor_name_invalid_utf8", _tensor(1, name=s(b"bad\xc3\x28")), "tensor[1].name", "not valid UTF-8"),
    Case(
        "duplicate_tensor",
        _tensor(1, name=s("token_embd.weight"), dims=[4, 8]),
        "token_embd.weight",
        "duplicate tensor name",
    ),
    Case("too_many_dims", _tensor(1, dims=[1, 1, 1, 1, 4]), "output_norm.weight", "5 dimensions"),
    Case("negative_dim", _tensor(1, dims=[4, -1]), "output_norm.weight", "negative dimension"),
    Case("dims_overflow", _tensor(1, dims=[1 << 62, 1 << 62]), "output_norm.weight", "overflows int64"),
    Case("unknown_ggml_type", _tensor(1, ggml_type=31), "output_norm.weight", "unknown ggml type 31"),
    Case(
        "block_size_mismatch",
        _tensor(1, dims=[33], ggml_type=Q4_0),
        "output_norm.weight",
        "not a multiple of Q4_0's block size 32",
    ),
    Case("misaligned_offset", _tensor(1, offset=132), "output_norm.weight", "not aligned to 32"),
    Case("overlapping_offsets", _tensor(1, offset=96), "output_norm.weight", "overlaps tensor 'token_embd.weight'"),
    Case("gap_between_tensors", _tensor(1, offset=256), "output_norm.weight", "expected 128"),
    Case("huge_tensor_past_eof", _tensor(1, dims=[1 << 40]), "output_norm.weight", "past the end of the file"),
    # typed metadata and tokenizer sanity
    Case(
        "scores_count_mismatch",
        _kv("tokenizer.ggml.scores", array(F32, [0.0] * 7)),
        "tokenizer.ggml.scores",
        "has 7 entries",
    ),
    Case(
        "token_type_count_mismatch",
        _kv("tokenizer.ggml.token_type", array(I32, [1] * 9)),
        "tokenizer.ggml.token_type",
        "has 9 entries",
    ),
    Case(
        "token_type_wrong_type",
        _kv("tokenizer.ggml.token_type", array(F32, [1.0] * 8)),
        "tokenizer.ggml.token_type",
        "must be an array of INT32",
    ),
    Case(
        "tokens_not_strings",
        _kv("tokenizer.ggml.tokens", array(U32, list(range(8)))),
        "tokenizer.ggml.tokens",
        "must be an array of STRING",
    ),
    Case(
        "eos_id_negative",
        _kv("tokenizer.ggml.eos_token_id", scalar(I32, -1)),
        "tokenizer.ggml.eos_token_id",
        "is negative",
    ),
    Case(
        "special_id_wrong_type",
        _kv("tokenizer.ggml.eos_token_id", scalar(STR, "2")),
        "tokenizer.ggml.eos_token_id",
        "must be an integer",
    ),
    Case(
        "add_bos_wrong_type",
        _kv("tokenizer.ggml.add_bos_token", scalar(U8, 1)),
        "tokenizer.ggml.add_bos_token",
        "must be a BOOL",
    ),
    Case(
        "architecture_wrong_type",
        _kv("general.architecture", scalar(U32, 7)),
        "general.architecture",
        "must be a STRING",
    ),
    Case("split_no_out_of_range", lambda: _split(2, 2), "split.no", "outside 0..1"),
    Case(
        "malformed_merge",
        _kv("tokenizer.ggml.merges", array(STR, ["a b", "abc"])),
        "tokenizer.ggml.merges[1]",
        "malformed merge",
        lazy=True,
    ),
]


def _twice(key: str) -> bytes:
    spec = base()
    spec.kvs += [(s(key), scalar(U8, 1)), (s(key), scalar(U8, 2))]
    return encode(spec)


def _split(count: int, no: int) -> bytes:
    spec = base()
    spec.kvs += [(s("split.count"), scalar(U16, count)), (s("split.no"), scalar(U16, no))]
    return encode(spec)


def write_corpus(out: Path) -> dict[str, Path]:
    """Write `base.gguf` and every case; returns name -> path."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"base": out / "base.gguf"}
    paths["base"].write_bytes(encode(base()))
    for case in CASES:
        p = out / f"{case.name}.gguf"
        p.write_bytes(case.build())
        paths[case.name] = p
    return paths


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "malformed-corpus")
    written = write_corpus(target)
    print(f"wrote {len(written) - 1} malformed files and base.gguf to {target}")
