"""README.md is the front door: short, current, and in step with CI and the command list.

The reference lives in the documentation site (docs/, tests/project/test_docs.py); the README says what
specreg decides, how to install it, the two commands, a walk through the pipeline, the commands
in one table and where the rest is. A house rule caps it at 300 lines, and nothing in its prose
may age (measured figures belong to docs/performance.md, written by the benchmark scripts).
"""

from __future__ import annotations

import re
from pathlib import Path

from specreg import cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text("utf-8")
MAX_LINES = 300


def _prose(text: str) -> str:
    """The README without its fenced code blocks (real command output may hold figures)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def test_the_readme_stays_a_front_door() -> None:
    assert len(README.splitlines()) <= MAX_LINES, f"README.md has {len(README.splitlines())} lines (limit {MAX_LINES})"
    for heading in ("## Why it matters", "## Install", "## The two commands", "## Five minutes with the pipeline",
                    "## Commands", "## Documentation", "## Contributing"):  # fmt: skip
        assert f"\n{heading}\n" in README, heading


def test_the_readme_names_the_failure_modes_it_exists_for() -> None:
    why = README.split("## Why it matters", 1)[1].split("\n## ", 1)[0]
    for mode in ("slightly different tokenizer", "EAGLE-3 head trained for another target", "loses end to end",
                 "Unreproducible"):  # fmt: skip
        assert mode in why, mode


def test_nothing_in_the_readme_prose_ages() -> None:
    """No timings, ratios, load averages or test counts outside real command output."""
    prose = _prose(README)
    aging = [
        r"\b\d+(\.\d+)?\s?(ms|s|min|seconds|minutes)\b",  # a timing
        r"\b\d+(\.\d+)?x\b",  # a speed-up
        r"load average",
        r"\b\d[\d,]*\s+tests\b",
        r"\d-core",
    ]
    for pattern in aging:
        found = re.search(pattern, prose)
        assert found is None, f"README prose ages: {found.group(0)!r} (measured figures go to docs/performance.md)"


def test_the_walk_runs_every_stage_in_order() -> None:
    walk = README.split("## Five minutes with the pipeline", 1)[1].split("\n## ", 1)[0]
    stages = [m.group(1) for m in re.finditer(r"^\*\*\d\. (\w+)\*\*", walk, flags=re.M)]
    assert stages == ["check", "register", "bench", "audit", "deploy"]
    for command in ("check pair", "register", "bench admitted", "audit", "deploy"):
        assert re.search(rf"^\$ specreg {command}\b", walk, flags=re.M), command


def test_the_commands_table_lists_every_command_in_pipeline_order() -> None:
    table = README.split("## Commands\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `specreg ([a-z]+)", table, flags=re.M)
    assert listed == [name for name, _, _ in cli.COMMANDS], "README commands table is out of order or incomplete"


def test_every_documentation_link_in_the_readme_exists() -> None:
    links = re.findall(r"\]\(((?:docs/)[^)#\s]*)", README)
    assert len(links) > 10
    for link in links:
        assert (ROOT / link).exists(), link


def test_ci_runs_exactly_the_readme_test_command_which_ends_with_the_wheel_check() -> None:
    blocks = re.findall(r"```bash\n(.*?)\n```", README.split("## The two commands", 1)[1], re.S)
    demo, test = blocks[0].strip(), blocks[1].strip()
    assert "pip install -q . " in demo and "-e" not in demo  # users install the wheel, not an editable tree
    assert demo.endswith(".venv/bin/specreg demo")
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == test
    # the site is built strictly (a broken link or missing page fails) and without -q, which
    # would hide the warnings --strict counts; NO_MKDOCS_2_WARNING: mkdocs-material (9.7.2 on)
    # prints a screenful of advice about MkDocs' future on every build unless it is set
    assert " && NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict && " in test
    assert test.endswith("&& .venv/bin/python tools/check_wheel.py") and (ROOT / "tools" / "check_wheel.py").is_file()


def test_the_commands_the_readme_runs_as_specreg_are_on_path_by_then() -> None:
    """Issue 47: the walk says `specreg ...`; the install line puts the venv's bin on PATH
    (`source .venv/bin/activate`), and the walk says so again before its first command."""
    install = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^python3 -m venv \.venv && .* && source \.venv/bin/activate$", install, flags=re.M), install
    walk = README.split("## Five minutes with the pipeline", 1)[1]
    first = walk.index("$ specreg ")
    assert "$ source .venv/bin/activate" in walk[:first]


def test_the_sign_command_says_what_it_needs() -> None:
    """`specreg sign` needs the signing extra and a key of one's own: the README says both."""
    row = next(line for line in README.splitlines() if line.startswith("| `specreg sign"))
    assert "signing" in row and "key" in row
    assert "'.[signing]'" in README and "docs/security.md#making-a-key" in README
