"""The pinned `llama-server` command for an audited condition, its rollback and how to verify the models.

Built from the server argv the benchmark recorded (what was measured), read back through the
bundled server's own flag parser and written out for the real program: `llama-server` (or the
user's binary), never specreg's wrapper, without the benchmark's loopback host, temporary port
and log level. Sampling defaults are pinned as the requests were made (the condition's sampler,
which the audit chose to be the policy's `[sampling]`; greedy for runs that recorded none, and
the run's seed), because the quality and speed gates only vouch for those. The prompt cache's
limit and the context checkpoints per slot are pinned as the memory prediction assumed them
(--cache-ram, --ctx-checkpoints: the run's, else llama.cpp's defaults of the audited build), so
a build with other defaults cannot grow past the audited figure; so are the HTTP threads (each
holds its prompts' tokenizing: --threads-http, the run's, else -np + 4, the fewest the audited
figure counted on any machine, where the default max(-np + 4, CPUs - 1) grows with the CPUs).
Pure: no I/O.
"""

from __future__ import annotations

import argparse
import functools
import re
import shlex
from typing import Any, NoReturn

from specreg.errors import SpecregError
from specreg.schemas.audit import (
    PAIR_LEVEL_GATES,
    AuditReport,
    ConditionOutcome,
    DeployCommand,
    GateResult,
    PairAudit,
)
from specreg.schemas.bench import ALL_STRATA, RequestSettings
from specreg.schemas.memory import DEFAULT_CACHE_RAM_MIB, DEFAULT_CTX_CHECKPOINTS, MemoryFit, ServeSettings
from specreg.servers.bundled_server import NGRAM_FLAGS, build_parser, ngram_dest
from specreg.servers.memory_predict import parse_layers
from specreg.units import size_text

PROGRAM = "llama-server"
BUNDLED_MODULE = "specreg.servers.bundled_server"
_FLAG = re.compile(r"--?[A-Za-z]")  # a flag, not a negative number
_NGRAM_DESTS = tuple((flag, ngram_dest(flag)) for flag in sorted(NGRAM_FLAGS))  # in the argv's fixed order


def _bundled(command: list[str]) -> bool:
    """`python -m specreg.servers.bundled_server ...`: how the runner starts the bundled server."""
    return len(command) >= 3 and command[1] == "-m" and command[2] == BUNDLED_MODULE


def recorded_flags(command: list[str]) -> list[str]:
    """The llama-server flags of a recorded server command: without the program or the bundled wrapper."""
    return command[3:] if _bundled(command) else command[1:]


def recorded_program(command: list[str]) -> str:
    """The program a run used: the user's binary as recorded, or `llama-server` for the bundled wrapper."""
    if not command or _bundled(command) or command[0].endswith("specreg-llama-server"):
        return PROGRAM
    return command[0]


def _fail(message: str) -> NoReturn:
    raise SpecregError(f"the recorded server command cannot be read: {message}")


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """One parser for every recorded command: an audit reads thousands, and building a parser is not free."""
    parser = build_parser()
    parser.error = _fail  # type: ignore[method-assign]  # argparse would print and exit the process
    return parser


# The flags whose values are model paths: in a fleet's audit every pair's command differs only in
# them, so they are parsed as placeholders (one parse per shape of command, not one per pair:
# `audit --all` of 5,000 pairs parsed 2,400 distinct commands) and the paths put back after.
_PATH_FLAGS = {
    "-m": "model",
    "--model": "model",
    "-md": "draft",
    "--spec-draft-model": "draft",
    "--model-draft": "draft",
}


def _parse(flags: list[str]) -> argparse.Namespace:
    shape = list(flags)
    paths: dict[str, str] = {}
    for i in range(len(shape) - 1):
        dest = _PATH_FLAGS.get(shape[i])
        value = shape[i + 1]
        if dest is not None and dest not in paths and value and not value.startswith("-"):
            paths[dest] = value
            shape[i + 1] = f"<{dest}>"
    ns = _parse_once(tuple(shape))
    if not paths:
        return ns
    if any(getattr(ns, dest) != f"<{dest}>" for dest in paths):  # a flag given twice, or other surprises
        return _parse_once(tuple(flags))
    return argparse.Namespace(**{**vars(ns), **paths})


@functools.lru_cache(maxsize=4096)
def _parse_once(flags: tuple[str, ...]) -> argparse.Namespace:
    """Parsed once per distinct command (pairs measured in one run share its baseline's); read only."""
    ns, extra = _parser().parse_known_args(list(flags))  # parsing keeps no state in the parser
    if extra:
        _fail(f"unknown flags {' '.join(extra)}")
    if not ns.model:
        _fail("no -m/--model")
    return ns


def read_flags(flags: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """A running server's flags, read by the parser the deploy command is written from, and those
    it does not know (flags no run measured: `specreg watch` names them); SpecregError when a
    known flag's value cannot be read."""
    return _parser().parse_known_args(list(flags))


@functools.cache
def flag_names() -> dict[str, str]:
    """Each parsed attribute -> the flag the deploy command spells it with (`parallel` -> `-np`)."""
    names = {a.dest: a.option_strings[0] for a in _parser()._actions if a.option_strings and a.dest != "help"}
    return names | {"seed": "--seed"}  # as server_argv writes it


def server_argv(
    command: list[str], *, program: str = PROGRAM, request: RequestSettings | None = None, port: int | None = None
) -> list[str]:
    """The llama-server argv of a recorded condition, in a fixed order; raises SpecregError if unreadable."""
    ns = _parse(recorded_flags(command))
    argv = [program, "-m", ns.model]
    if ns.draft:
        argv += ["-md", ns.draft]
    argv += ["--spec-type", ns.spec_type]
    if ns.draft_n_max is not None:
        argv += ["--spec-draft-n-max", str(ns.draft_n_max)]
    if ns.draft_n_min is not None:
        argv += ["--spec-draft-n-min", str(ns.draft_n_min)]
    if ns.draft_sampling is not None:
        argv += ["--spec-draft-sampling", ns.draft_sampling]
    for flag, dest in _NGRAM_DESTS:
        value = getattr(ns, dest)
        if value is not None:
            argv += [flag, str(value)]
    argv += ["-c", str(ns.ctx_size), "-np", str(ns.parallel)]
    if ns.cache_type_k is not None:
        argv += ["-ctk", ns.cache_type_k]
    if ns.cache_type_v is not None:
        argv += ["-ctv", ns.cache_type_v]
    # what the memory prediction assumed the server keeps over time, pinned: a later build's
    # defaults cannot grow production past the audited figure (validators/memory_served.py)
    cache_ram = DEFAULT_CACHE_RAM_MIB if ns.cache_ram is None else ns.cache_ram
    checkpoints = DEFAULT_CTX_CHECKPOINTS if ns.ctx_checkpoints is None else ns.ctx_checkpoints
    argv += ["--ctx-checkpoints", str(checkpoints), "--cache-ram", str(cache_ram)]
    threads_http = ns.parallel + 4 if ns.threads_http is None else ns.threads_http
    argv += ["--threads-http", str(threads_http)]
    if ns.swa_full:
        argv.append("--swa-full")
    # no -t/-tb: the threads a run gave its servers are the measuring machine's (on 2 cores,
    # `--pin` leaves the server 1), not the production host's; llama-server's default there
    # (its physical cores, llama.cpp's cpu_get_num_math) is what the target host's cores allow
    # (issue 32: a bench host's `-t 1 -tb 1` was pinned into the production command)
    if ns.ngl is not None:
        argv += ["-ngl", str(ns.ngl)]
    if ns.ngld is not None:
        argv += ["-ngld", str(ns.ngld)]
    if ns.seed is not None:
        argv += ["--seed", str(ns.seed)]
    # the condition's own sampler flags first (a sampled condition records them), else the run's
    temp = ns.temp if ns.temp is not None else (request.temperature if request else 0.0)
    argv += ["--temp", f"{temp:g}"]
    top_k = ns.top_k if ns.top_k is not None else (request.top_k if request else None)
    top_p = ns.top_p if ns.top_p is not None else (request.top_p if request else None)
    min_p = ns.min_p if ns.min_p is not None else (request.min_p if request else None)
    if top_k is not None:
        argv += ["--top-k", str(top_k)]
    if top_p is not None:
        argv += ["--top-p", f"{top_p:g}"]
    if min_p is not None:
        argv += ["--min-p", f"{min_p:g}"]
    if ns.metrics:
        argv.append("--metrics")  # measured with it; llama.cpp's /metrics shows acceptance in production
    if port is not None:
        argv += ["--port", str(port)]
    return argv


def serving_settings(argv: list[str]) -> ServeSettings:
    """The serving configuration of a llama-server argv (`server_argv`'s), as a memory fit is
    keyed by it (schemas/memory.py config_key)."""
    ns = _parse(argv[1:])
    return ServeSettings(
        ctx_size=ns.ctx_size,
        slots=ns.parallel,
        cache_type_k=ns.cache_type_k or "f16",
        cache_type_v=ns.cache_type_v or "f16",
        gpu_layers=parse_layers(ns.ngl),
        swa_full=ns.swa_full,
    )


def pin_fit(plan: DeployCommand, fit: MemoryFit) -> None:
    """The speculative command under the memory fit `check pair --budget` recorded for its
    configuration: --cache-ram and --ctx-checkpoints lowered to the largest that fit (never
    raised), and a note that says so; when nothing fits, only the note. The rollback keeps the
    measured baseline's flags: it is another configuration (the target alone)."""
    argv = plan.argv
    if argv is None:
        return
    when = f"check pair --budget, {fit.created_at:%Y-%m-%d %H:%M}" if fit.created_at else "check pair --budget"
    budget = f"{size_text(fit.budget_bytes)} ({fit.budget_source})" if fit.budget_bytes else "its budget"
    if fit.cache_ram_mib is None or fit.ctx_checkpoints is None:
        plan.notes.append(f"this configuration does not fit {budget}, even with no prompt cache ({when})")
        return
    changed = []
    for flag, cap in (("--cache-ram", fit.cache_ram_mib), ("--ctx-checkpoints", fit.ctx_checkpoints)):
        i = argv.index(flag) + 1
        now = int(argv[i])
        if now < 0 or now > cap:  # -1: no size limit
            argv[i] = str(cap)
            changed.append(f"{flag} {cap}")
    if changed:
        plan.notes.append(f"{' '.join(changed)}: the largest that fit {budget} for this configuration ({when})")
    else:
        plan.notes.append(f"fits {budget} as measured ({when})")


def try_server_argv(command: list[str] | None, request: RequestSettings | None) -> list[str] | None:
    """`server_argv` for reports: None when nothing (readable) was recorded."""
    if not command:
        return None
    try:
        return server_argv(command, program=recorded_program(command), request=request)
    except SpecregError:
        return None


def model_paths(argv: list[str]) -> dict[str, str]:
    """{"target": path, "draft": path} of a llama-server argv (draft only when it has -md)."""
    out: dict[str, str] = {}
    for flag, role in (("-m", "target"), ("-md", "draft")):
        if flag in argv[1:]:
            out[role] = argv[argv.index(flag, 1) + 1]
    return out


def pinned_sha256(argv: list[str], target_sha256: str, draft_sha256: str | None) -> dict[str, str]:
    """Each model path of the argv -> the SHA-256 the registry (and the audit's integrity gate) pinned."""
    paths = model_paths(argv)
    out = {paths["target"]: target_sha256}
    if "draft" in paths and draft_sha256:
        out[paths["draft"]] = draft_sha256
    return out


def verify_command(sha256: dict[str, str]) -> str:
    """One shell line that checks every model file: `printf '%s\\n' 'SHA  PATH' ... | sha256sum -c`."""
    lines = " ".join(shlex.quote(f"{sha}  {path}") for path, sha in sha256.items())
    return f"printf '%s\\n' {lines} | sha256sum -c"


def verify_lines(sha256: dict[str, str], indent: str = "  ") -> list[str]:
    """`verify_command` laid out one file per line with ` \\` continuations (the same shell command)."""
    quoted = [shlex.quote(f"{sha}  {path}") for path, sha in sha256.items()]
    lines = [f"{indent}printf '%s\\n' \\"]
    lines += [f"{indent}    {q} \\" for q in quoted[:-1]]
    lines.append(f"{indent}    {quoted[-1]} | sha256sum -c")
    return lines


def _failed(gate: str, message: str) -> GateResult:
    return GateResult(gate=gate, passed=False, message=message)  # type: ignore[arg-type]


def _ranked(items: list[Any]) -> Any:
    """The one with the highest median speed-up (the interval's low end breaks ties), as decisions rank."""
    return max(items, key=lambda x: (x.speedup or 0.0, x.speedup_ci95[0] if x.speedup_ci95 else 0.0))


Speedup = tuple[float | None, tuple[float, float] | None]


def _choose(
    report: AuditReport, pa: PairAudit, stratum: str | None, conc: int | None
) -> tuple[ConditionOutcome | None, list[GateResult], Speedup, list[str]]:
    """The condition to deploy at `conc` (for `stratum`), the gates that stop it, its speed-up and notes."""
    pair_level = [g for g in pa.gates if g.gate in PAIR_LEVEL_GATES and not g.passed]
    here = [o for o in pa.conditions if o.concurrency == conc]
    if not here:
        why = [g for g in pa.gates if not g.passed] or [_failed("evidence", "no measured condition of this pair")]
        return None, why, (None, None), []
    if stratum is None:
        if conc == pa.concurrency:  # the condition the pair's gates judged
            chosen = next((o for o in here if o.condition == pa.condition), None) or _ranked(here)
            return chosen, [g for g in pa.gates if not g.passed], (pa.speedup, pa.speedup_ci95), []
        chosen = _ranked([o for o in here if o.passed] or here)
        stops = pair_level + [_failed(g, m) for g, m in chosen.failed.items()]
        return chosen, stops, (chosen.speedup, chosen.speedup_ci95), []
    decision = next(
        (
            d
            for d in report.decisions
            if d.target_sha256 == pa.target_sha256 and d.stratum == stratum and d.concurrency == conc
        ),
        None,
    )
    notes = []
    if decision is not None and decision.pair_id not in (None, pa.pair_id):
        sp = f" (speed-up {decision.speedup:.2f}x)" if decision.speedup is not None else ""
        notes.append(f"the audit's choice for {stratum} at concurrency {conc} is {decision.choice}{sp}")
    cands = [c for c in (decision.candidates if decision else []) if c.pair_id == pa.pair_id]
    if not cands:
        return None, [*pair_level, _failed("evidence", f"not measured in stratum {stratum}")], (None, None), notes
    eligible = [c for c in cands if c.eligible]
    best = _ranked(eligible or cands)
    chosen = next((o for o in here if o.condition == best.condition), None)
    failed = []
    if not eligible:
        failed = pair_level + ([_failed(g, m) for g, m in chosen.failed.items()] if chosen else [])
        if chosen is None or not chosen.strata.get(stratum, False):
            failed.append(_failed("speed", f"{stratum}: {best.reason}"))
    return chosen, failed, (best.speedup, best.speedup_ci95), notes


def plan_deploy(
    report: AuditReport,
    pair_id: int,
    *,
    stratum: str | None = None,
    concurrency: int | None = None,
    program: str | None = None,
    port: int | None = None,
    request: RequestSettings | None = None,
) -> DeployCommand:
    """The command for `pair_id`'s best audited condition, or a refusal naming the failing gates.

    Args:
        report: the audit that judged the pair.
        pair_id: the pair to deploy.
        stratum: None: the pair must pass every gate over the whole workload; a stratum: the
            pair-wide gates and that stratum's.
        concurrency: the level to deploy at (default: the audited one).
        program: the binary to name (None: the run's own when it was the user's, else
            `llama-server`).
        port: the port the command serves on (None: llama-server's default).
        request: the run's sampling settings, pinned where the condition recorded none of its
            own (None: greedy).

    Raises:
        SpecregError: when the audit does not hold the pair, or the stratum was not measured
            at all.
    """
    pa = next((p for p in report.pairs if p.pair_id == pair_id), None)
    if pa is None:
        raise SpecregError(f"pair {pair_id} is not in this audit")
    out = DeployCommand(pair_id=pa.pair_id, method=pa.method, deployable=False, run_id=pa.run_id, stratum=stratum)
    out.rule_set = next((str(g.evidence.get("rule_set")) for g in pa.gates if g.gate == "verdict"), None)
    run = next((r for r in report.runs if r.run_id == pa.run_id), None)
    if run is not None and stratum is not None:
        measured = sorted({r.stratum for r in run.strata if r.stratum != ALL_STRATA})
        if stratum not in measured:
            raise SpecregError(
                f"stratum {stratum!r} was not measured in run {run.run_id}",
                hint=f"measured: {', '.join(measured) or 'none'}",
            )
    levels = run.concurrency_levels if run else []
    conc = concurrency if concurrency is not None else (pa.concurrency or (levels[0] if levels else None))
    out.concurrency = conc
    base = run.rollback(conc) if run else None  # as the audit's rollback gate chose it
    if base is not None and base.command:
        prog = program or recorded_program(base.command)
        out.rollback_argv = server_argv(base.command, program=prog, request=request, port=port)
    if run is not None and concurrency is not None and concurrency not in levels:
        out.failed_gates = [
            _failed("speed", f"concurrency {concurrency} was not measured (measured: {', '.join(map(str, levels))})")
        ]
        return out
    if pa.not_benchmarkable:
        out.failed_gates = [_failed("evidence", f"admitted, not benchmarkable: {pa.not_benchmarkable}")]
        return out
    chosen, failed, (out.speedup, ci), out.notes = _choose(report, pa, stratum, conc)
    out.speedup_ci95 = [float(x) for x in ci] if ci else None
    out.failed_gates = failed
    cond = next((c for c in run.conditions if chosen and c.label == chosen.condition), None) if run else None
    if cond is not None:
        out.condition, out.draft_n_max = cond.label, cond.draft_n_max
        out.sampler, out.draft_sampling = cond.sampler.label, cond.draft_sampling
    if failed or cond is None or not cond.command:
        out.failed_gates = failed or [_failed("evidence", "no recorded server command for the condition")]
        return out
    out.argv = server_argv(cond.command, program=program or recorded_program(cond.command), request=request, port=port)
    out.sha256 = pinned_sha256(out.argv, pa.target_sha256, pa.draft_sha256)
    out.verify = verify_command(out.sha256)
    out.deployable = True
    return out


def wrap_command(argv: list[str], width: int, indent: str = "  ") -> list[str]:
    """A shell command as lines of at most `width` columns, joined by ` \\` continuations (copy-pastable).

    A flag stays on the line of its value; a single word longer than the width gets a line of its own.
    """
    words: list[str] = []
    i = 0
    while i < len(argv):
        word = shlex.quote(argv[i])
        if argv[i].startswith("-") and i + 1 < len(argv) and not _FLAG.match(argv[i + 1]):
            word += " " + shlex.quote(argv[i + 1])
            i += 1
        words.append(word)
        i += 1
    lines: list[str] = []
    line = indent + words[0] if words else indent
    for word in words[1:]:
        if len(line) + 1 + len(word) + 2 <= width:
            line += " " + word
        else:
            lines.append(line + " \\")
            line = indent + "    " + word
    lines.append(line)
    return lines
