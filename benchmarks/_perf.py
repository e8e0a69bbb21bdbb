"""The one writer of docs/performance.md: a benchmark script's own output, with when, where and how loaded.

Measured figures reach the documentation only this way, never by hand: a script run with
`--write-docs` prints as always, and on success its printed report (the ratios against the
reference it measured in the same run) replaces that script's section of docs/performance.md,
between `<!-- perf:NAME:start -->` and `<!-- perf:NAME:end -->`, under a line giving the date
(UTC), the machine (CPU model, cores, memory, OS, Python) and the load average at the start and at
the end of the run. A failed run (non-zero exit or an exception) writes nothing.

Each script ends with

    if __name__ == "__main__":
        sys.exit(run_main(main, "hash"))

`tests/project/test_perf_writer.py` holds every script in benchmarks/ to that, and the writer to what it
replaces.
"""

from __future__ import annotations

import io
import os
import platform
import re
import shlex
import sys
from collections.abc import Callable
from contextlib import redirect_stdout
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PERFORMANCE_MD = ROOT / "docs" / "performance.md"
FLAG = "--write-docs"
MAX_OUTPUT_CHARS = 20_000  # a report is a screen or two; a runaway one is cut with a marker


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- perf:{name}:start -->", f"<!-- perf:{name}:end -->"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text("utf-8", "replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> str:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return "?"
    return f"{pages * size / 2**30:.0f} GiB"


def machine() -> str:
    """One line naming the machine a figure was measured on."""
    return (
        f"{_cpu_model()} x{os.cpu_count()}, {_memory_gib()} RAM, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def load() -> str:
    """The 1/5/15-minute load averages, as `os.getloadavg` reports them."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def section(name: str, command: str, output: str, *, started: datetime, load_start: str, load_end: str) -> str:
    """The Markdown of one script's section, markers included."""
    start, end = _markers(name)
    if len(output) > MAX_OUTPUT_CHARS:
        output = output[:MAX_OUTPUT_CHARS] + f"\n[... {len(output) - MAX_OUTPUT_CHARS} more characters cut]\n"
    fence = "~~~~" if "```" in output else "```"
    return (
        f"{start}\n"
        f"Measured {started:%Y-%m-%d %H:%M} UTC on {machine()}; load average (1/5/15 min) {load_start} at the "
        f"start, {load_end} at the end.\n\n"
        f"`{command}`\n\n"
        f"{fence}text\n{output.rstrip()}\n{fence}\n"
        f"{end}"
    )


def replace_section(text: str, name: str, new: str) -> str:
    """`text` with the section `name` replaced by `new`; a section that is not there yet is appended."""
    start, end = _markers(name)
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if len(pattern.findall(text)) > 1:
        raise ValueError(f"{name}: more than one section in docs/performance.md")
    if pattern.search(text):
        return pattern.sub(lambda _m: new, text, count=1)
    return text.rstrip("\n") + f"\n\n## {name}\n\n{new}\n"


def write_docs(name: str, command: str, output: str, *, started: datetime, load_start: str, path: Path) -> None:
    """Replace the section `name` of `path` with this run's output (written beside, then renamed)."""
    text = path.read_text("utf-8")
    new = section(name, command, output, started=started, load_start=load_start, load_end=load())
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(replace_section(text, name, new), "utf-8")
    tmp.replace(path)


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy: the script's report is what the page shows."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.stream, self.copy = stream, io.StringIO()

    def write(self, s: str) -> int:
        self.stream.write(s)
        self.copy.write(s)
        return len(s)

    def flush(self) -> None:
        self.stream.flush()


def run_main(main: Callable[[], int | None], name: str, *, path: Path = PERFORMANCE_MD) -> int:
    """Run a script's `main()`; with `--write-docs` in argv, its output becomes its section of `path`."""
    write = FLAG in sys.argv[1:]
    if write:
        sys.argv = [a for a in sys.argv if a != FLAG]
    command = "python benchmarks/" + shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
    started, load_start = datetime.now(UTC), load()
    tee = _Tee(sys.stdout)  # type: ignore[arg-type]
    with redirect_stdout(tee):
        try:
            rv = main()
        except SystemExit as exc:  # a script that exits on its own: its code decides as a return would
            if isinstance(exc.code, str):  # SystemExit("why"): the why is the script's last word
                print(exc.code, file=sys.stderr)
            rv = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    code = int(rv or 0)
    if write and code == 0:
        write_docs(name, command, tee.copy.getvalue(), started=started, load_start=load_start, path=path)
        print(f"wrote section {name!r} of {path}", file=sys.stderr)
    elif write:
        print(f"exit {code}: {path} left as it was", file=sys.stderr)
    return code
