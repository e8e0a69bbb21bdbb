"""A re-read jumps over the long string arrays an earlier read walked, and proves every jump.

`GGUFFile.string_array_layout()` gives (start -> count, end, SHA-256) of the long string arrays;
`read_gguf(known=...)` jumps over an array found at a known start with the known count, and
keeps the jump only if the payload hashes to the known SHA-256. Anything else is read in full,
so a wrong, stale or hostile layout can cost time but never change what is read.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from _registry_helpers import aged

from specreg.errors import GGUFError
from specreg.gguf.reader import GGUFArray, GGUFFile, open_gguf, read_gguf
from specreg.gguf.source import FileSource
from specreg.gguf.summary import summarize
from specreg.gguf.walk import KnownArray
from specreg.registry import statcache
from specreg.registry.store import Registry
from specreg.testing import ModelSpec, write_model


def _read(path: Path, known: dict[int, KnownArray] | None) -> GGUFFile:
    with FileSource(path) as source:
        return read_gguf(source, known=known)


def _same(a: GGUFFile, b: GGUFFile) -> None:
    assert summarize(a) == summarize(b)
    assert a.metadata.keys() == b.metadata.keys()
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    assert a.token_texts() == b.token_texts()


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_model(tmp_path / "m.gguf", ModelSpec(vocab_type="gpt2", pre="qwen2", bos_id=None, unk_id=None))


def test_a_known_layout_is_jumped_over_and_reads_the_same(model: Path) -> None:
    full = open_gguf(model)
    layout = full.string_array_layout(min_count=1)
    assert len(layout) >= 2  # tokens and merges
    again = _read(model, layout)
    assert again.jumped == len(layout) and full.jumped == 0
    _same(again, full)


def test_changed_bytes_under_a_jump_are_read_in_full(model: Path, tmp_path: Path) -> None:
    layout = open_gguf(model).string_array_layout(min_count=1)
    _, (_, end, _, _) = min(layout.items())
    data = bytearray(model.read_bytes())
    data[end - 1] = ord("Z") if data[end - 1] != ord("Z") else ord("Y")  # last byte of the last string
    edited = tmp_path / "edited.gguf"
    edited.write_bytes(bytes(data))
    got = _read(edited, layout)
    assert got.jumped == 0  # the hash did not match: walked, and the new bytes are what it read
    _same(got, open_gguf(edited))
    assert summarize(got).tokenizer != summarize(open_gguf(model)).tokenizer


@pytest.mark.parametrize(
    "spoil",
    [
        lambda c, e, h, b: (c + 1, e, h, b),  # another count
        lambda c, e, h, b: (c, e + 10**12, h, b),  # past the end of the file
        lambda c, e, h, b: (c, e - 1, h, b),  # a wrong end (the hash cannot match)
        lambda c, e, h, b: (c, e, "0" * 64, b),  # a wrong hash
        lambda c, e, h, b: (c, e, "0" * 64, 10**9),  # a wrong hash: its heap is not believed either
    ],
)
def test_a_wrong_layout_costs_a_full_read_never_a_different_one(
    model: Path, spoil: Callable[[int, int, str, int | None], KnownArray]
) -> None:
    full = open_gguf(model)
    layout = {k: spoil(*v) for k, v in full.string_array_layout(min_count=1).items()}
    got = _read(model, layout)
    assert got.jumped == 0
    _same(got, full)
    tokens = got.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GGUFArray) and tokens.long_string_heap() == _heap_by_hand(model)


def _heap_by_hand(path: Path) -> int:
    """The token lengths as the `gguf` package reads them; libstdc++ keeps up to 15 bytes inline,
    a longer string is a glibc chunk of n + 1 bytes and an 8-byte header in 16-byte steps."""
    import gguf

    field = gguf.GGUFReader(path).fields["tokenizer.ggml.tokens"]
    lengths = [len(field.parts[i]) for i in field.data]
    assert len(lengths) == len(field.data) > 0
    return sum(max(32, (n + 1 + 8 + 15) // 16 * 16) for n in lengths if n > 15)


def test_a_jump_carries_the_heap_an_earlier_read_measured_and_an_old_layout_walks(tmp_path: Path) -> None:
    long_texts = tuple((300 + i, "x" * n) for i, n in enumerate((15, 16, 17, 40, 41, 200)))
    model = write_model(tmp_path / "m.gguf", ModelSpec(vocab_type="gpt2", pre="qwen2", token_edits=long_texts))
    full = open_gguf(model)
    layout = full.string_array_layout(min_count=1)
    tokens_at = full.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens_at, GGUFArray)
    assert layout[tokens_at.offset][3] == _heap_by_hand(model) > 0
    jumped = _read(model, {k: (c, e, h, 7) for k, (c, e, h, _) in layout.items()})  # a heap the walk never saw
    tokens = jumped.metadata["tokenizer.ggml.tokens"]
    assert jumped.jumped == len(layout) and isinstance(tokens, GGUFArray) and tokens.long_string_heap() == 7
    old = _read(model, {k: (c, e, h, None) for k, (c, e, h, _) in layout.items()})  # a layout from before
    tokens = old.metadata["tokenizer.ggml.tokens"]
    assert (
        old.jumped == len(layout)
        and isinstance(tokens, GGUFArray)
        and tokens.long_string_heap() == _heap_by_hand(model)
    )


def test_a_layout_never_hides_a_truncated_file(model: Path, tmp_path: Path) -> None:
    layout = open_gguf(model).string_array_layout(min_count=1)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model.read_bytes()[: max(end for _, end, _, _ in layout.values()) - 5])
    with pytest.raises(GGUFError):
        _read(cut, layout)


def test_the_registry_keeps_the_layout_and_a_registered_read_jumps(
    real_vocab: Callable[[str], Path], tmp_path: Path
) -> None:
    path = tmp_path / "qwen2.gguf"
    aged(Path(shutil.copyfile(real_vocab("qwen2"), path)))  # 151,936 tokens and 151,387 merges
    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        first = reg.snapshot(path)
        assert first.file.jumped == 0 and first.hashed  # not registered yet: walked and hashed
        rec = reg.add_artifact(path, snap=first)
        layout = statcache.layout_of(reg.database, rec.sha256)
        assert layout is not None and len(layout) == 2
        again = reg.snapshot(path)
        assert again.file.jumped == 2 and not again.hashed and again.sha256 == rec.sha256
        _same(again.file, first.file)

        # a registry written before the layout existed: filled in by the next registration of the path
        with reg.write() as conn:
            conn.execute("UPDATE artifacts SET layout_json = NULL")
        assert reg.snapshot(path).file.jumped == 0
        reg.add_artifact(path, snap=reg.snapshot(path))
        assert statcache.layout_of(reg.database, rec.sha256) == layout


def test_a_small_file_is_hashed_while_it_is_parsed_with_the_same_result(model: Path, tmp_path: Path) -> None:
    """snapshot.take hashes a small GGUF on a thread during the walk: the same SHA-256 as hashing
    it alone, a hashing error reaches the caller, and a truncated file still fails as a GGUFError."""
    import hashlib

    from specreg.errors import SpecregError
    from specreg.registry import hashing, snapshot

    def hash_fd(path: str, fd: int) -> tuple[str, hashing.StatKey, int]:
        digest, key = hashing.sha256_file_keyed(path, fd=fd)
        return digest, key, 0

    snap = snapshot.take(model, cached=None, hash_fd=hash_fd)
    assert snap.hashed and snap.sha256 == hashlib.sha256(model.read_bytes()).hexdigest()

    def failing(path: str, fd: int) -> tuple[str, hashing.StatKey, int]:
        raise SpecregError(f"{path}: file changed while it was being hashed")

    with pytest.raises(SpecregError, match="changed while it was being hashed"):
        snapshot.take(model, cached=None, hash_fd=failing)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model.read_bytes()[:4000])  # the magic is there, the header is not
    with pytest.raises(GGUFError):
        snapshot.take(cut, cached=None, hash_fd=hash_fd)


def test_the_walk_itself_sums_the_tokens_heap(tmp_path: Path) -> None:
    """A file read for the first time: the heap comes from the walk over the lengths (one pass,
    walk.skip_strings_heap), the same number the gguf package's lengths give, never a second walk."""
    long_texts = tuple((300 + i, "y" * n) for i, n in enumerate((1, 15, 16, 33, 64, 500)))
    model = write_model(tmp_path / "m.gguf", ModelSpec(vocab_type="gpt2", pre="qwen2", token_edits=long_texts))
    f = open_gguf(model)
    tokens = f.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GGUFArray)
    assert f._array_heap == {tokens.offset: _heap_by_hand(model)}  # before anyone asked: the walk's
    merges = f.metadata.get("tokenizer.ggml.merges")
    assert merges is None or merges.offset not in f._array_heap  # only the tokens are summed


def test_the_heap_walk_stops_and_resumes_where_the_plain_walk_does() -> None:
    """walk.skip_strings_heap (unrolled in groups of eight) over a buffer cut at every length:
    the offset and count it stops at are skip_strings', the heap is exactly that of the strings
    it skipped, and resuming from there over the whole buffer gives the whole array's heap."""
    import struct

    from specreg.gguf.walk import skip_strings, skip_strings_heap

    lengths = [0, 1, 15, 16, 17, 31, 32, 33, 100, 3, 40, 15, 16, 250, 2, 7, 64, 9, 1000, 5, 0]
    buf = b"".join(struct.pack("<Q", n) + b"x" * n for n in lengths)

    def heap(ns: list[int]) -> int:
        return sum((n + 24) & ~15 for n in ns if n > 15)

    for cut in range(len(buf) + 1):
        part = buf[:cut]
        p, done, h = skip_strings_heap(part, 0, len(lengths))
        assert (p, done) == skip_strings(part, 0, len(lengths)), cut
        assert p == sum(8 + n for n in lengths[:done]) and h == heap(lengths[:done]), cut
        q, more, h2 = skip_strings_heap(buf, p, len(lengths) - done)
        assert (q, done + more, h + h2) == (len(buf), len(lengths), heap(lengths)), cut


def _draft(tmp_path: Path, name: str, **spec: object) -> Path:
    return write_model(tmp_path / name, ModelSpec(vocab_type="gpt2", bos_id=None, unk_id=None, **spec))  # type: ignore[arg-type]


def test_a_draft_with_the_targets_vocabulary_is_hashed_against_it_not_walked(model: Path, tmp_path: Path) -> None:
    target = open_gguf(model)
    twins = target.twin_arrays(min_count=1)
    assert set(twins) >= {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}
    draft = _draft(tmp_path, "d.gguf", pre="qwen35")  # one byte longer before the arrays: other offsets
    with FileSource(draft) as source:
        got = read_gguf(source, twins=twins)
    full = open_gguf(draft)
    assert got.twinned == len(twins) and full.twinned == 0 and got.jumped == 0
    _same(got, full)
    tokens = got.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GGUFArray) and tokens.long_string_heap() == _heap_by_hand(draft)
    assert got.string_array_layout(min_count=1) == full.string_array_layout(min_count=1)


def test_a_draft_whose_arrays_differ_from_the_twins_is_walked(model: Path, tmp_path: Path) -> None:
    twins = open_gguf(model).twin_arrays(min_count=1)
    draft = _draft(tmp_path, "d.gguf", pre="qwen2", token_edits=((300, "changed"),))
    with FileSource(draft) as source:
        got = read_gguf(source, twins=twins)
    assert got.twinned == len(twins) - 1  # the tokens differ (walked), the merges are the target's
    _same(got, open_gguf(draft))


@pytest.mark.parametrize(
    "spoil",
    [
        lambda c, n, h, b: (c + 1, n, h, b),  # another count
        lambda c, n, h, b: (c, n + 10**12, h, b),  # past the end of the file
        lambda c, n, h, b: (c, n - 1, h, b),  # another length (the hash cannot match)
        lambda c, n, h, b: (c, n, "0" * 64, 10**9),  # a wrong hash: its heap is not believed either
    ],
)
def test_a_wrong_twin_costs_a_walk_never_a_different_read(
    model: Path, spoil: Callable[[int, int, str, int | None], KnownArray]
) -> None:
    twins = {k: spoil(*v) for k, v in open_gguf(model).twin_arrays(min_count=1).items()}
    with FileSource(model) as source:
        got = read_gguf(source, twins=twins)
    assert got.twinned == 0
    _same(got, open_gguf(model))
    tokens = got.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GGUFArray) and tokens.long_string_heap() == _heap_by_hand(model)


def test_check_pair_of_two_new_files_walks_the_targets_vocabulary_only(
    real_vocab: Callable[[str], Path], tmp_path: Path
) -> None:
    from specreg.sources.checking import open_artifact

    with Registry(tmp_path / "r.db", show_progress=False) as reg:
        _, target = open_artifact(reg, real_vocab("qwen2"))
        _, draft = open_artifact(reg, real_vocab("qwen35"), target)  # the same vocabulary, another pre-tokenizer
        assert target.twinned == 0 and draft.twinned == 2
        _same(draft, open_gguf(real_vocab("qwen35")))
