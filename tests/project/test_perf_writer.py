"""docs/performance.md is written only by the benchmark scripts, through benchmarks/_perf.py.

Every script in benchmarks/ ends in `run_main(main, NAME)` and has its section between markers on
the page; the writer replaces exactly that section with the script's own output, the date, the
machine and the load, appends a section that is missing, and writes nothing for a failed run.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from benchmarks import _perf

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "performance.md"
SCRIPTS = sorted((ROOT / "benchmarks").glob("bench_*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_benchmark_writes_its_own_section(script: Path) -> None:
    name = script.stem.removeprefix("bench_")
    assert f'sys.exit(run_main(main, "{name}"))' in script.read_text("utf-8"), f"{script.name} does not end in run_main"
    text = PAGE.read_text("utf-8")
    start, end = f"<!-- perf:{name}:start -->", f"<!-- perf:{name}:end -->"
    assert text.count(start) == 1 and text.count(end) == 1 and text.index(start) < text.index(end), name


def test_the_page_holds_nothing_but_the_scripts_sections_as_figures() -> None:
    """Outside the marked sections, the page has no measured figure (nothing typed by hand)."""
    text = PAGE.read_text("utf-8")
    outside = re.sub(r"<!-- perf:(\w+):start -->.*?<!-- perf:\1:end -->", "", text, flags=re.S)
    assert not re.search(r"\b\d+(\.\d+)?\s?(ms|s|x|GB/s|MiB)\b", outside), "a figure outside the scripts' sections"
    assert len(re.findall(r"<!-- perf:\w+:start -->", text)) == len(SCRIPTS)


def _page(tmp_path: Path) -> Path:
    page = tmp_path / "performance.md"
    page.write_text(
        "# Performance\n\n## a\n\n<!-- perf:a:start -->\nold a\n<!-- perf:a:end -->\n\n"
        "## b\n\n<!-- perf:b:start -->\nold b\n<!-- perf:b:end -->\n"
    )
    return page


def test_write_docs_replaces_only_its_section_with_the_output_when_and_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = _page(tmp_path)
    monkeypatch.setattr(sys, "argv", ["bench_a.py", "--repeat", "2", "--write-docs"])
    seen: list[list[str]] = []

    def main() -> int:
        seen.append(list(sys.argv))
        print("case      ours   reference   ratio")
        print("x          1.0        2.0     0.50x")
        return 0

    assert _perf.run_main(main, "a", path=page) == 0
    assert seen == [["bench_a.py", "--repeat", "2"]]  # the script never sees --write-docs
    text = page.read_text()
    assert "old a" not in text and "old b" in text
    section = text.split("<!-- perf:a:start -->", 1)[1].split("<!-- perf:a:end -->", 1)[0]
    assert "x          1.0        2.0     0.50x" in section
    assert "`python benchmarks/bench_a.py --repeat 2`" in section
    assert re.search(r"Measured \d{4}-\d\d-\d\d \d\d:\d\d UTC on .+ x\d+", section)
    assert re.search(r"load average \(1/5/15 min\) [\d.]+ / [\d.]+ / [\d.]+ at the start", section)


def test_a_failed_run_or_a_run_without_the_flag_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = _page(tmp_path)
    before = page.read_text()
    monkeypatch.setattr(sys, "argv", ["bench_a.py", "--write-docs"])
    assert _perf.run_main(lambda: 1, "a", path=page) == 1

    def exits() -> int:
        raise SystemExit(3)

    monkeypatch.setattr(sys, "argv", ["bench_a.py", "--write-docs"])
    assert _perf.run_main(exits, "a", path=page) == 3
    monkeypatch.setattr(sys, "argv", ["bench_a.py"])
    assert _perf.run_main(lambda: print("figures") or 0, "a", path=page) == 0
    assert page.read_text() == before


def test_a_missing_section_is_appended_and_a_doubled_one_refused(tmp_path: Path) -> None:
    page = _page(tmp_path)
    text = _perf.replace_section(page.read_text(), "c", "<!-- perf:c:start -->\nnew\n<!-- perf:c:end -->")
    assert text.endswith("## c\n\n<!-- perf:c:start -->\nnew\n<!-- perf:c:end -->\n") and "old a" in text
    with pytest.raises(ValueError, match="more than one"):
        _perf.replace_section(text + text, "a", "x")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_benchmark_imports(script: Path) -> None:
    """A module moved inside specreg/ breaks a benchmark only when it runs (at a quiet hour, long
    after the move): importing each script finds it now."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(f"_bench_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it runs
    sys.path.insert(0, str(script.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(script.parent))
        sys.modules.pop(f"_bench_{script.stem}", None)
    assert callable(getattr(module, "main", None)), script.name
