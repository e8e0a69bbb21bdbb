"""Where a module's tests live: the map in docs/development.md, written from a coverage run.

The rule: the tests of `specreg/ROOM/MOD.py` are in `tests/ROOM/test_MOD.py` or
`tests/ROOM/test_MOD_*.py` (a top-level `specreg/MOD.py`: `tests/test_MOD*.py`; a package's
`__init__.py`: its folder's tests). For every module the rule names no file for, the map on the
page lists the test files whose tests run most of its function bodies, from coverage.py's
dynamic contexts (one per test; code that runs only in child processes, such as the bundled
server, is not attributed to a test). `--check` needs no coverage data and is cheap (the test
suite runs it, tests/project/test_test_map.py): every module without a file of its own has a
row, no other module has one, and every file a row names exists. A new module gets its own
test file or a row, by hand or regenerated:

    .venv/bin/python -m pytest -q --cov=specreg --cov-context=test --cov-report=
    .venv/bin/python tools/gen_test_map.py --write [--data .coverage]
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE, TESTS, PAGE = ROOT / "specreg", ROOT / "tests", ROOT / "docs" / "development.md"
START, END = "<!-- test-map:start -->", "<!-- test-map:end -->"
ROW = re.compile(r"^\| `specreg/(\S+\.py)` \| (.*) \|$")
TOP = 3  # test files named per module


def modules() -> list[str]:
    """Every module of the package with code in it (a docstring alone is none), as `ROOM/MOD.py`."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        body = ast.parse(path.read_text(encoding="utf-8")).body
        if body and ast.get_docstring(ast.Module(body=body, type_ignores=[])) is not None:
            body = body[1:]
        if body:
            out.append(path.relative_to(PACKAGE).as_posix())
    return out


def named_tests(module: str) -> list[str]:
    """The test files the rule names for `module` (ROOM/MOD.py), as paths from the root."""
    rel = Path(module)
    if rel.name == "__init__.py":
        found = sorted((TESTS / rel.parent).glob("test_*.py")) if rel.parent != Path(".") else []
    else:
        folder = TESTS / rel.parent
        found = sorted([*folder.glob(f"test_{rel.stem}.py"), *folder.glob(f"test_{rel.stem}_*.py")])
    return [p.relative_to(ROOT).as_posix() for p in found]


def _body_lines(path: Path) -> set[int]:
    """The lines inside function bodies: what a test runs, not what importing the module runs
    (the first test to import a module in a process would otherwise get its definitions)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines.update(range(node.body[0].lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def measured(data_file: Path) -> dict[str, list[str]]:
    """module -> the test files whose tests ran most of its function bodies (most first)."""
    from coverage import CoverageData

    data = CoverageData(basename=str(data_file))
    data.read()
    out: dict[str, list[str]] = {}
    for name in data.measured_files():
        path = Path(name)
        if PACKAGE not in path.parents or not path.is_file():
            continue
        body = _body_lines(path)
        by_file: Counter[str] = Counter()
        for line, contexts in (data.contexts_by_lineno(name) or {}).items():
            if line in body:
                by_file.update({c.split("::")[0] for c in contexts if "::" in c})
        ranked = sorted(by_file.items(), key=lambda kv: (-kv[1], kv[0]))
        out[path.relative_to(PACKAGE).as_posix()] = [f for f, _ in ranked[:TOP]]
    return out


def render(covered: dict[str, list[str]]) -> str:
    rows = ["| module | tests that run most of it |", "| --- | --- |"]
    for mod in modules():
        if named_tests(mod):
            continue
        files = covered.get(mod) or []
        if files:
            cell = ", ".join(f"`{f}`" for f in files)
        elif not _body_lines(PACKAGE / mod):
            cell = "(no functions: what importing it runs)"
        else:
            cell = "(its functions run in child processes only)"
        rows.append(f"| `specreg/{mod}` | {cell} |")
    return "\n".join([START, "", *rows, "", END])


def read_map(text: str) -> dict[str, list[str]]:
    """module -> the test files its row names."""
    if START not in text or END not in text:
        raise SystemExit(f"{PAGE}: no {START} ... {END} section")
    out = {}
    for line in text[text.index(START) : text.index(END)].splitlines():
        m = ROW.match(line)
        if m:
            out[m.group(1)] = re.findall(r"`([^`]+)`", m.group(2))
    return out


def check() -> list[str]:
    """What is wrong with the map the page holds (nothing: an empty list)."""
    listed = read_map(PAGE.read_text(encoding="utf-8"))
    problems = []
    for mod in modules():
        has = named_tests(mod)
        if has and mod in listed:
            problems.append(f"specreg/{mod} has {has[0]}: its row in the map goes")
        if not has and mod not in listed:
            rel = Path(mod)
            own = rel.parent / "test_*.py" if rel.name == "__init__.py" else rel.with_name(f"test_{rel.name}")
            problems.append(f"specreg/{mod}: no tests/{own.as_posix()} and no row in the map")
    for mod, files in listed.items():
        if not (PACKAGE / mod).is_file():
            problems.append(f"the map has a row for specreg/{mod}, which does not exist")
        problems += [f"the map names {f} for specreg/{mod}: no such file" for f in files if not (ROOT / f).is_file()]
    return problems


def main(argv: list[str]) -> int:
    if "--check" in argv:
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            print("a new module: its own test file, or a row (tools/gen_test_map.py --write after a coverage run)")
        return 1 if problems else 0
    if "--write" not in argv:
        print(__doc__)
        return 2
    data = Path(argv[argv.index("--data") + 1]) if "--data" in argv else ROOT / ".coverage"
    text = PAGE.read_text(encoding="utf-8")
    read_map(text)  # the markers are there
    section = render(measured(data))
    PAGE.write_text(text[: text.index(START)] + section + text[text.index(END) + len(END) :], encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
