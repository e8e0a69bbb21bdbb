"""The one oracle every fuzzed surface is judged by, and the child process that runs a batch.

The oracle, for every input from outside (a GGUF file, a bundle, a policy, a workload, what a
llama-server or the hub answers):

- the outcome is a verdict (exit 0 or 1) or one `error:` line (exit 2, at most a `hint:` or
  `warning:` beside it), never a traceback and never another exit status; a surface that is a
  function rather than a command returns, or raises SpecregError (which the CLI prints as that
  one line) - nothing else;
- bounded: each case within CASE_SECONDS of CPU time (what the case costs on a core, whatever
  else the machine runs) and 3 x CASE_SECONDS of wall time (a wait is bounded too: the case is
  cut there), inside a 2 GiB address space (RLIMIT_AS, set in the child process that runs the
  batch: a MemoryError or a kill is a violation);
- nothing lost: on a failure (exit 2) the registry file is byte-for-byte what it was (an import adds
  nothing); a surface may add checks of its own (`Case.expect_refused`: llama.cpp refuses this,
  so it must not be admitted), or properties its call measures and returns as violations
  (remote.CliResult.violations: the `hostile` surface's TIME and MEMORY).

One child process runs a whole batch (`run_batch`), the CLI in-process through
`specreg.cli.main(argv)`: the process is not the subject, and one interpreter start per batch
instead of per case keeps the default suite fast. A child that dies mid-batch (a signal, the
address-space limit hit outside Python) fails the case it was on.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CASE_SECONDS = 10.0
ADDRESS_SPACE = 2 << 30
_TESTS = Path(__file__).resolve().parents[1]


@dataclass
class Case:
    """One input on one surface: a CLI argv, or a `module:function` of tests/fuzz called with args."""

    id: str
    argv: list[str] | None = None
    call: str | None = None
    args: list[Any] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    db: str | None = None  # the registry file that must be unchanged when the outcome is not success
    copy_db_from: str | None = None  # `db` starts as a copy of this registry (an import's destination)
    expect_refused: bool = False  # llama.cpp's loader refuses this file: exit 0 (admitted) is a violation


@dataclass
class Outcome:
    id: str
    code: int
    stdout: str
    stderr: str
    seconds: float  # wall
    cpu_seconds: float
    violations: list[str]


class _Overtime(BaseException):
    """Raised by the per-case timer; a BaseException so no `except Exception` swallows it."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _Overtime


def _sha(path: str | None) -> str | None:
    if path is None or not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def judge(case: Case, code: int, stdout: str, stderr: str, seconds: float, cpu: float, db_changed: bool) -> list[str]:
    """The oracle's verdict on one outcome: the list of what it broke (empty: it held)."""
    bad = []
    if "Traceback (most recent call last)" in stdout + stderr:
        bad.append("traceback")
    if code not in (0, 1, 2):
        bad.append(f"exit status {code}")
    if code == 2:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("error:")]
        if len(errors) != 1 or not all(ln.startswith(("error:", "hint:", "warning:")) for ln in lines):
            bad.append("exit 2 without exactly one error: line")
    if cpu > CASE_SECONDS:
        bad.append(f"took {cpu:.1f} s of CPU (limit {CASE_SECONDS:g})")
    if seconds > 3 * CASE_SECONDS:
        bad.append(f"took {seconds:.1f} s of wall time (limit {3 * CASE_SECONDS:g})")
    if code == 2 and db_changed:  # could not decide: nothing may have been written
        bad.append("registry file changed on a failed command")
    if case.expect_refused and code == 0 and case.argv and "pair" in case.argv:
        bad.append("admitted a file llama.cpp's loader refuses")
    return bad


def _run_cli(argv: list[str]) -> tuple[int, str, str]:
    from specreg.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        except _Overtime:
            raise
        except BaseException:
            err.write(traceback.format_exc())
            code = 1
    return code, out.getvalue(), err.getvalue()


def _run_call(ref: str, args: list[Any]) -> tuple[int, str, str, list[str]]:
    from specreg.errors import SpecregError

    module, name = ref.split(":")
    fn = getattr(importlib.import_module(f"fuzz.{module}"), name)
    try:
        result = fn(*args)
    except SpecregError as exc:
        return exc.exit_code, "", f"error: {exc.message}\n" + (f"hint: {exc.hint}\n" if exc.hint else ""), []
    except _Overtime:
        raise
    except BaseException:
        return 1, "", traceback.format_exc(), []
    if hasattr(result, "code") and hasattr(result, "stderr"):  # remote.CliResult: a CLI run inside the call
        return result.code, result.stdout, result.stderr, list(getattr(result, "violations", []))
    return 0, str(result)[:2000], "", []


def run_case(case: Case) -> Outcome:
    """One case in this process, under the per-case timer."""
    if case.copy_db_from is not None and case.db is not None:
        shutil.copyfile(case.copy_db_from, case.db)
    before = _sha(case.db)
    saved = {k: os.environ.get(k) for k in case.env}
    os.environ.update(case.env)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS * 3 + 1)  # a hang is cut here and judged as too slow
    t0, c0 = time.perf_counter(), time.process_time()
    own: list[str] = []  # the properties a call measured itself
    try:
        if case.argv is not None:
            code, out, err = _run_cli(case.argv)
        else:
            assert case.call is not None
            code, out, err, own = _run_call(case.call, case.args)
    except _Overtime:
        code, out, err = 1, "", "killed by the harness: no outcome within the time limit"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    changed = before != _sha(case.db)
    bad = judge(case, code, out, err, seconds, cpu, changed) + own
    return Outcome(case.id, code, out[-4000:], err[-4000:], seconds, cpu, bad)


def _child(batch: Path) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    cases = [Case(**c) for c in json.loads(batch.read_text())]
    for case in cases:
        print(json.dumps(asdict(run_case(case))), flush=True)


def run_batch(cases: list[Case], work: Path, *, env: dict[str, str] | None = None) -> list[Outcome]:
    """Every case in one child process under the address-space limit; a case the child died on
    is an outcome too (its violation says how it ended), and a new child goes on after it."""
    work.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ, **(env or {}))
    child_env["PYTHONPATH"] = os.pathsep.join([str(_TESTS), *filter(None, [child_env.get("PYTHONPATH")])])
    child_env.setdefault("COLUMNS", "80")
    outcomes: list[Outcome] = []
    todo = list(cases)
    while todo:
        batch = work / f"batch-{os.getpid()}-{time.monotonic_ns()}.json"
        batch.write_text(json.dumps([asdict(c) for c in todo]))
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "fuzz.oracle", str(batch)],
                capture_output=True,
                text=True,
                env=child_env,
                timeout=60 + len(todo) * (CASE_SECONDS * 3 + 1),
                cwd=work,
            )
            stdout, stderr, status = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr, status = "batch timed out", -9
        finally:
            batch.unlink(missing_ok=True)
        done = [Outcome(**json.loads(line)) for line in stdout.splitlines() if line.startswith("{")]
        outcomes += done
        todo = todo[len(done) :]
        if todo:  # the child died on todo[0]
            dead = todo.pop(0)
            why = f"child process ended with status {status} on this case"
            outcomes.append(Outcome(dead.id, status, "", stderr[-4000:], 0.0, 0.0, [why]))
    return outcomes


def run_parallel(groups: list[list[Case]], work: Path) -> list[Outcome]:
    """Each group in a child of its own, the children side by side (one per core); groups must not
    share a registry file another group writes (the unchanged-registry check would see its writes)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(groups) or 1) as pool:
        done = list(pool.map(lambda g: run_batch(g[1], work / f"group{g[0]}"), enumerate(groups)))
    return [o for outcomes in done for o in outcomes]


def failures(outcomes: list[Outcome]) -> list[str]:
    """One readable paragraph per outcome that broke the oracle."""
    return [f"{o.id}: {', '.join(o.violations)}\n{o.stderr[-1200:]}" for o in outcomes if o.violations]


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
