"""`specreg check pair` and `specreg pairs`: admit or reject a speculative pair, list verdicts.

Thin: resolve the files through the registry, call `validators.check_pair`, record and render.
Heavy modules are imported inside the commands so `specreg --help` stays fast.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specreg.commands.layout import Col
from specreg.commands.options import METHOD_AUTO, JsonOpt, MethodOpt, TimeoutOpt, chosen_method, db_path
from specreg.commands.output import console, emit_json, err_console, print_listing, warn
from specreg.units import mib_text, size_text

if TYPE_CHECKING:
    from specreg.gguf.reader import GGUFFile
    from specreg.registry.store import Registry
    from specreg.schemas.checks import CheckResult
    from specreg.schemas.memory import MemoryEstimate, MemoryFit
    from specreg.schemas.registry import ArtifactRecord, PairRecord
    from specreg.servers.identity import ChosenRules

check_app = typer.Typer(
    help="Check speculative-decoding setups before they are deployed.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
_NAME_WIDTH = 40  # model names in listings are cut here (--json has them whole)
_SHA_AND_SOME = 12 + 1 + 8  # a squeezed model cell: its SHA-256 prefix and the name's first word or so


def _remote_facts(target: ArtifactRecord, draft: ArtifactRecord | None) -> dict[str, Any]:
    """`remote: {role: {url, revision, sha256, bytes_fetched, ...}}` for files read by range requests."""
    from specreg.sources.range_reads import REMOTE_KEY, metadata_only

    remote = {
        role: rec.provenance.extra[REMOTE_KEY]
        for role, rec in (("target", target), ("draft", draft))
        if rec is not None and metadata_only(rec)
    }
    return {"remote": remote} if remote else {}


def memory_lead(m: MemoryEstimate) -> str:
    """The estimate as a person reads it first: what the server holds from its start and while
    serving, then what may grow and to which cap ("resident R; up to T if the prompt cache fills
    (--cache-ram N, llama.cpp's default)")."""
    from specreg.schemas.memory import DEFAULT_CACHE_RAM_MIB, DEFAULT_CTX_CHECKPOINTS
    from specreg.validators.memory_fit import resident_bytes

    text = f"resident {size_text(resident_bytes(m))}"
    what, flags = [], []
    if m.prompt_cache_bytes:
        what.append("the prompt cache")
        if m.cache_ram_mib < 0:
            flags.append("--cache-ram -1: no size limit, -c tokens")
        else:
            default = ", llama.cpp's default" if m.cache_ram_mib == DEFAULT_CACHE_RAM_MIB else ""
            flags.append(f"--cache-ram {m.cache_ram_mib}{default}")
    if m.checkpoint_bytes:
        what.append("the context checkpoints")
        default = ", llama.cpp's default" if m.ctx_checkpoints == DEFAULT_CTX_CHECKPOINTS else ""
        flags.append(f"--ctx-checkpoints {m.ctx_checkpoints} per slot{default}")
    if what:
        verb = "fills" if len(what) == 1 else "fill"
        return f"{text}; up to {size_text(m.total_bytes)} if {' and '.join(what)} {verb} ({'; '.join(flags)})"
    return text + "; nothing grows past it (--cache-ram 0)" if m.cache_ram_mib == 0 else text


def fit_text(fit: MemoryFit) -> str:
    """One line: does the configuration fit the budget, at which caps, and what deploy pins."""
    from specreg.validators.memory_budget import BUDGET_MARGIN

    caps = (
        f"--cache-ram {fit.cache_ram_mib} --ctx-checkpoints {fit.ctx_checkpoints}"
        if fit.cache_ram_mib is not None
        else None
    )
    refused = "; ".join(c.message for c in fit.checks if c.code == "memory.cache_type" and c.severity == "error")
    if refused:
        return f"DOES NOT FIT: llama.cpp refuses this configuration ({refused})"
    if fit.budget_bytes is None:
        return "FITS: llama.cpp takes these cache types (no --budget given)"
    where = f"{size_text(fit.budget_bytes)} ({fit.budget_source})"
    need = f"{size_text(fit.needed_bytes)} + {BUDGET_MARGIN:.0%}"
    if fit.on == "GPU":
        return f"{'FITS' if fit.fits else 'DOES NOT FIT'} {where} on the GPU: {need} offloaded"
    if fit.fits and not fit.lowered:
        return f"FITS {where}: {need} at {caps}"
    if fit.fits:
        asked = [
            f"--{flag} {was}"
            for flag, was, now in (
                ("cache-ram", fit.settings.cache_ram_mib, fit.cache_ram_mib),
                ("ctx-checkpoints", fit.settings.ctx_checkpoints, fit.ctx_checkpoints),
            )
            if was != now
        ]
        fail = f"{' '.join(asked)} {'does' if len(asked) == 1 else 'do'} not"
        return f"FITS {where} with {caps}, the largest that fit ({fail}): {need}; deploy pins them"
    if caps is not None:
        return f"DOES NOT FIT {where}: {need} at the caps given; {caps} would fit"
    return f"DOES NOT FIT {where}: {need} even with --cache-ram 0 --ctx-checkpoints 0"


def _memory_lines(m: MemoryEstimate) -> list[str]:
    """The estimate in MiB, part by part, for the flags it was made for; the draft's own KV cache
    on a line of its own (the KV part of the first line is the target's)."""

    def mib(n: int) -> str:
        return mib_text(n, grouped=True)

    draft = f" + draft {mib(m.draft_weights_bytes)}" if m.draft_weights_bytes else ""
    gpu = f", GPU {mib(m.vram_bytes)}" if m.vram_bytes else ""
    kv = f"KV {mib(m.kv_bytes - m.draft_kv_bytes)}"
    if m.recurrent_bytes:
        kv += f", recurrent state {mib(m.recurrent_bytes)}"
    lines = [
        f"-c {m.ctx_size} -np {m.slots} -ctk {m.cache_type_k} -ctv {m.cache_type_v}: "
        f"weights {mib(m.target_weights_bytes)}{draft}, {kv}, "
        f"compute {mib(m.compute_bytes)}, outputs {mib(m.output_bytes)}, tokenizer {mib(m.vocab_bytes)}, "
        f"server {mib(m.overhead_bytes + m.method_bytes)} = {mib(m.total_bytes)} MiB{gpu}"
    ]
    if m.draft_weights_bytes:
        lines.append(f"draft KV {mib(m.draft_kv_bytes)} MiB (its own cache of the same cells), in the total")
    lines += served_lines(m)
    return lines


def served_lines(m: MemoryEstimate) -> list[str]:
    """What a serving server adds over time, each with the flags that change it (in the total)."""
    from specreg.schemas.memory import DEFAULT_CACHE_RAM_MIB, DEFAULT_CTX_CHECKPOINTS

    def mib(n: int) -> str:
        return mib_text(n, grouped=True)

    default = " (llama.cpp's default)" if m.cache_ram_mib == DEFAULT_CACHE_RAM_MIB else ""
    if m.cache_ram_mib == 0:
        lines = ["prompt cache off (--cache-ram 0)"]
    elif m.cache_ram_mib < 0:
        lines = [f"prompt cache up to {mib(m.prompt_cache_bytes)} MiB (--cache-ram -1: -c tokens), in the total"]
    else:
        lines = [
            f"prompt cache up to {mib(m.prompt_cache_bytes)} MiB as prompts are served "
            f"(--cache-ram {m.cache_ram_mib}{default}; lower it or 0 for off), in the total"
        ]
    if m.checkpoint_bytes:
        per = " per slot" if m.slots > 1 else ""
        dflt = " (default)" if m.ctx_checkpoints == DEFAULT_CTX_CHECKPOINTS else ""
        lines.append(
            f"context checkpoints up to {m.ctx_checkpoints} x {mib(m.checkpoint_each_bytes)} MiB{per} = "
            f"{mib(m.checkpoint_bytes)} MiB (--ctx-checkpoints {m.ctx_checkpoints}{dflt}, -np"
            f"{'; --swa-full: none' if m.swa_cells is not None else ''}), in the total"
        )
    if m.http_bytes:
        lines.append(
            f"HTTP threads up to {m.http_threads} x the tokenizing of a slot-long prompt = "
            f"{mib(m.http_bytes)} MiB (--threads-http), in the total"
        )
    return lines


@check_app.command("pair")
def pair_cmd(
    target: Annotated[
        str, typer.Argument(metavar="TARGET", help="Target GGUF path or SHA-256 prefix.", show_default=False)
    ],
    draft: Annotated[
        str | None, typer.Argument(metavar="DRAFT", help="Draft GGUF path or SHA-256 prefix.", show_default=False)
    ] = None,
    method: MethodOpt = METHOD_AUTO,
    strict: Annotated[bool, typer.Option("--strict", help="Treat warnings as errors.")] = False,
    runtime: Annotated[
        str | None,
        typer.Option("--runtime", help="Rule set (llama.cpp build), e.g. llama.cpp-b11434 (default: the server's)."),
    ] = None,
    json_out: JsonOpt = False,
    fmt: Annotated[
        str, typer.Option("--format", help="text, json, or sarif (SARIF 2.1.0 for CI code scanning).")
    ] = "text",
    ctx_size: Annotated[int, typer.Option("--ctx-size", "-c", min=1, help="Memory estimate: -c, all slots.")] = 4096,
    slots: Annotated[int, typer.Option("--slots", "-np", min=1, help="Memory estimate: -np, parallel slots.")] = 1,
    cache_type_k: Annotated[str, typer.Option("--cache-type-k", "-ctk", help="Memory estimate: -ctk.")] = "f16",
    cache_type_v: Annotated[str, typer.Option("--cache-type-v", "-ctv", help="Memory estimate: -ctv.")] = "f16",
    gpu_layers: Annotated[
        str | None, typer.Option("--gpu-layers", "-ngl", help="Memory estimate: -ngl (a number, all).")
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option("--budget", help="Does this configuration fit (24GiB; auto: detected memory)? Exit 3 if not."),
    ] = None,
    cache_ram: Annotated[
        int | None,
        typer.Option(
            "--cache-ram", min=-1, help="Memory estimate: --cache-ram MiB (-1 no limit, 0 off; default llama.cpp's)."
        ),
    ] = None,
    ctx_checkpoints: Annotated[
        int | None,
        typer.Option(
            "--ctx-checkpoints", min=0, help="Memory estimate: --ctx-checkpoints per slot (default llama.cpp's)."
        ),
    ] = None,
    swa_full: Annotated[bool, typer.Option("--swa-full", help="Memory estimate: --swa-full.")] = False,
    draft_max: Annotated[
        int | None,
        typer.Option(
            "--draft-max", min=0, help="Memory estimate: --spec-draft-n-max for draft methods (default the build's)."
        ),
    ] = None,
    probe: Annotated[
        bool, typer.Option("--probe", help="Also load the pair on a server for one request: did it draft?")
    ] = False,
    server: Annotated[
        str | None,
        typer.Option("--server", help="Judge (and --probe) for this llama-server binary (default: bundled)."),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Every check in full (a rejection folds its follow-on checks).")
    ] = False,
    timeout: TimeoutOpt = None,
) -> None:
    """Decide whether a target/draft pair is safe for llama.cpp speculative decoding.

    Exit 0 admitted, 1 rejected, 2 could not decide, 3 admitted but the configuration does not
    fit --budget. The verdict is recorded in the registry.
    It is judged with the rule set of the server that will run it: the bundled server's llama.cpp
    build, or the build `--server PATH --version` reports (the nearest known one, with a
    warning, when specreg has none for it); --runtime names one instead.

    --budget judges the serving configuration (-c, -np, -ctk, -ctv, -ngl), not the pair: its fit
    is recorded on its own and never changes the verdict. When the prompt cache and the context
    checkpoints (--cache-ram, --ctx-checkpoints, llama.cpp's defaults unless given) do not fit,
    it names the largest that do; `specreg deploy` pins them.

    TARGET and DRAFT may also be https:// URLs or hf://ORG/REPO/FILE.gguf[@REV]: only their
    headers are read (HTTP range requests) and they are recorded as metadata only.
    """
    from specreg.allowance import allowing
    from specreg.commands.output import say
    from specreg.commands.views.check import show_verdict
    from specreg.errors import EXIT_ADMITTED, EXIT_NO_FIT, EXIT_REJECTED, UsageError
    from specreg.registry.store import Registry
    from specreg.schemas.memory import ServeSettings
    from specreg.schemas.record import to_python
    from specreg.servers.identity import choose_rules
    from specreg.servers.memory_predict import parse_layers, resolve_budget
    from specreg.sources.checking import check_and_record
    from specreg.validators.memory_budget import estimate, type_name
    from specreg.validators.memory_fit import judge_fit

    if fmt not in ("text", "json", "sarif"):
        raise UsageError(f"--format {fmt!r}: choose text, json or sarif")
    json_out = json_out or fmt == "json"
    chosen = chosen_method(method)
    judged = choose_rules(runtime, server)
    rules = judged.rules
    if judged.warning:
        warn([judged.warning])
    settings = ServeSettings(
        ctx_size=ctx_size, slots=slots, cache_type_k=type_name(cache_type_k), cache_type_v=type_name(cache_type_v),
        gpu_layers=parse_layers(gpu_layers), swa_full=swa_full, draft_n_max=draft_max,
    )  # fmt: skip
    if cache_ram is not None:
        settings.cache_ram_mib = cache_ram
    if ctx_checkpoints is not None:
        settings.ctx_checkpoints = ctx_checkpoints
    limit = resolve_budget(budget, bool(settings.gpu_layers))
    estimates: list[MemoryEstimate] = []
    fits: list[MemoryFit | None] = []

    def extra(t_file: GGUFFile, d_file: GGUFFile | None, how: str, static: list[CheckResult]) -> list[CheckResult]:
        """The memory estimate and the configuration's fit (kept out of the verdict), then the
        runtime probe, before the verdict is recorded."""
        mine = replace(settings, method=how)
        estimates.append(estimate(t_file, d_file, mine, rules))
        fits.append(
            judge_fit(
                t_file, d_file, mine, rules, limit,
                target_sha256=t_file.sha256 or "", draft_sha256=d_file.sha256 if d_file is not None else None,
                cache_ram_given=cache_ram is not None, ctx_checkpoints_given=ctx_checkpoints is not None,
            )
        )  # fmt: skip
        if probe:
            from specreg.commands._probe import run_probe

            return run_probe(t_file, d_file, how, static, rules.id, server, show=not json_out, reg=reg)
        return []

    with Registry(db_path(), show_progress=not json_out and fmt == "text") as reg, allowing(timeout):
        done = check_and_record(reg, target, draft, chosen or "auto", rule_set=rules, strict=strict, extra=extra)
        fit = fits[0]
        if fit is not None:  # the configuration's own record: never the pair's verdict
            reg.memory_fits.record(fit)
    warn(done.warnings)
    v, mem = done.verdict, estimates[0]
    if fmt == "sarif":
        from specreg.report.sarif import dumps, verdict_sarif

        def where(arg: str | None, rec: ArtifactRecord | None) -> str | None:
            if arg is None or rec is None:
                return None
            return arg if os.path.exists(arg) else (rec.paths[0] if rec.paths else None)

        out = console()
        shown = replace(v, checks=[*v.checks, *fit.checks]) if fit is not None else v
        out.file.write(dumps(verdict_sarif(shown, where(target, done.target), where(draft, done.draft))) + "\n")
        out.file.flush()
    elif json_out:
        emit_json(
            to_python(
                v,
                include={"admitted", "method", "target_sha256", "draft_sha256", "rule_set", "strict", "checks"},
            )
            | {"rule_set_chosen_by": judged.why, "memory": to_python(mem)}
            | {"fit": to_python(fit) if fit is not None else None}
            | _remote_facts(done.target, done.draft)
        )
    else:
        show_verdict(v, done.target, done.draft, done.pair_id, judged.why, verbose=verbose)
        if settings != ServeSettings() or budget is not None:
            for i, line in enumerate([memory_lead(mem), *_memory_lines(mem)]):
                say(line, prefix="memory  " if i == 0 else " " * 8, indent=8)
        if fit is not None:
            say(fit_text(fit), prefix="fit     ", indent=8, marks=[("DOES NOT FIT", "bold red"), ("FITS", "green")])
        for c in v.checks:
            if c.code == "probe.agreement":  # the rule set is out of date for this runtime: say it loudly
                say(c.message, prefix="DISAGREEMENT  ", marks=[("DISAGREEMENT", "bold red")], indent=14)
    if not v.admitted:
        raise typer.Exit(EXIT_REJECTED)
    raise typer.Exit(EXIT_NO_FIT if fit is not None and not fit.fits else EXIT_ADMITTED)


def pairs_cmd(
    admitted: Annotated[bool, typer.Option("--admitted", help="Only admitted pairs.")] = False,
    rejected: Annotated[bool, typer.Option("--rejected", help="Only rejected pairs.")] = False,
    recheck: Annotated[
        bool, typer.Option("--recheck", help="Judge every pair again under the server's rules; list what changes.")
    ] = False,
    runtime: Annotated[
        str | None, typer.Option("--runtime", help="The rule set to compare with, e.g. llama.cpp-b11549.")
    ] = None,
    server: Annotated[
        str | None, typer.Option("--server", metavar="PATH", help="The llama-server binary about to be used.")
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option("--policy", metavar="FILE", help="Show the verdicts its [trust] signers signed as standing."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """List checked pairs with their verdict (and a strict check's, if any); old rule sets are stale.

    A verdict judged under other rules than the server about to run it needs (the bundled one,
    or --server PATH, or --runtime) is marked "other rules". An admitted pair with a vocab-only
    file is marked "admitted, not benchmarkable". A pair only another machine judged shows what
    it said ("admitted elsewhere, not checked here"); with --policy, a verdict a signer in its
    [trust] signers signed stands as the audit takes it ("admitted by lab-a, signed").

    --recheck is the pre-upgrade check: every pair judged again under those rules, from the
    stored summaries where no change concerns its files (else its files are read again);
    nothing is recorded. It lists each verdict that would change and the checks that change
    it; exit 1 when an admitted pair would be rejected.
    """
    from specreg.benchmark.plan.eligibility import NOT_BENCHMARKABLE, not_benchmarkable
    from specreg.commands.output import say
    from specreg.errors import UsageError
    from specreg.registry.store import Registry
    from specreg.schemas.record import to_python
    from specreg.servers.identity import choose_rules, needs_other_rules, recheck_hint
    from specreg.validators.ruleset import is_stale

    judged = choose_rules(runtime, server)
    if judged.warning:
        warn([judged.warning])
    if recheck:
        if admitted or rejected:
            raise UsageError("--recheck judges every pair; leave out --admitted and --rejected")
        _recheck(judged, json_out)
        return
    if admitted and rejected:
        raise UsageError("--admitted and --rejected exclude each other")
    which = True if admitted else False if rejected else None
    with Registry(db_path(), show_progress=False, create=False) as reg:
        rows, standing = _standing_rows(reg, which, policy)
    stale = {rs: is_stale(rs) for rs in {p.rule_set for p in rows}}
    other = {rs: needs_other_rules(rs, judged.rules) for rs in stale}
    lacking = {p.id: not_benchmarkable(p) for p in rows if p.admitted}
    if json_out:
        out: list[dict[str, Any]] = []
        for p in rows:
            d = to_python(p, exclude={"checks"})
            d["stale"] = stale[p.rule_set]
            d["other_rules"] = other[p.rule_set]
            d["benchmarkable"] = p.admitted and lacking.get(p.id) is None
            d["checked_here"] = p.checked_here
            d["signed_verdict"] = standing.get(p.id)
            out.append(d)
        emit_json(out)
        return
    if not rows:
        err_console().print(
            "no pairs checked yet (specreg check pair TARGET DRAFT)"
            if which is None
            else f"no {'admitted' if which else 'rejected'} pairs"
        )
        return
    verdicts = {
        (True, False): ("admitted", "green"),
        (True, True): ("admitted (strict)", "green"),
        (False, False): ("rejected", "red"),
        (False, True): ("rejected (strict)", "red"),
    }
    print_listing(
        (
            Col("id", right=True),
            # a cut keeps the 12-hex SHA-256 prefix (and the name's start): what tells rows apart
            Col("target", limit=13 + _NAME_WIDTH, squeeze=_SHA_AND_SOME),
            Col("draft", limit=13 + _NAME_WIDTH, squeeze=_SHA_AND_SOME),
            Col("method"),
            Col("verdict"),
            Col("rule set", limit=40, stack=2),
            Col("when", stack=1),
        ),
        (
            (
                str(p.id),
                f"{p.target_sha256[:12]} {p.target_name or ''}".rstrip(),
                f"{p.draft_sha256[:12]} {p.draft_name or ''}".rstrip() if p.draft_sha256 else "-",
                p.method,
                (NOT_BENCHMARKABLE, "yellow") if lacking.get(p.id) else _verdict_text(p, verdicts, standing),
                _rule_set_cell(p.rule_set, stale[p.rule_set], other[p.rule_set]),
                p.updated_at.strftime("%Y-%m-%d %H:%M"),
            )
            for p in rows
        ),
    )
    n_other = sum(1 for p in rows if other[p.rule_set])
    if n_other:
        say(
            f"{n_other} verdict(s) judged under other rules than {judged.rules.name} ({judged.why}) needs; "
            f"see what would change: {recheck_hint(judged.rules)}",
            stderr=True,
        )


def _rule_set_cell(rule_set: str, stale: bool, other: bool) -> str | tuple[str, str]:
    marks = [m for m, on in (("stale", stale), ("other rules", other)) if on]
    return (f"{rule_set} {', '.join(marks)}", "yellow") if marks else rule_set


def _recheck(judged: ChosenRules, json_out: bool) -> None:
    """`pairs --recheck`: the core re-judges (sources/recheck.py), the view lists the changes."""
    from specreg.commands.views.check import recheck_json, show_recheck
    from specreg.registry.store import Registry
    from specreg.sources.recheck import recheck_pairs

    with Registry(db_path(), show_progress=False, create=False) as reg:
        report = recheck_pairs(reg, judged.rules)
    if json_out:
        emit_json(recheck_json(report, judged.why))
    else:
        show_recheck(report, judged.why)
    bad = [r for r in report.pairs if r.newly_rejected or (r.pair.admitted and r.problem is not None)]
    raise typer.Exit(1 if bad else 0)


def _standing_rows(
    reg: Registry, which: bool | None, policy: Path | None
) -> tuple[list[PairRecord], dict[int, dict[str, Any]]]:
    """The pairs as they stand (with --policy: a trusted signer's verdict where no check was made
    here, audit/trust.py), filtered by `which` on that standing; and pair id -> the signed verdict."""
    if policy is None:
        return reg.pairs(which), {}
    from specreg.audit.policy import load_policy
    from specreg.audit.trust import EvidenceTrust

    pol, source = load_policy(policy)
    trust = EvidenceTrust(reg, pol, source)
    rows, standing = [], {}
    for p in reg.pairs(None):
        st = trust.standing(p)
        if st is not None:
            p = trust.as_standing(p)
            standing[p.id] = {"said": st.said(), "signed_by": list(st.signers), "made_on": st.verdict.host}
        if which is None or p.admitted == which:
            rows.append(p)
    return rows, standing


def _verdict_text(
    p: PairRecord, verdicts: dict[tuple[bool, bool], tuple[str, str]], standing: dict[int, dict[str, Any]]
) -> tuple[str, str]:
    """The standing verdict, and the latest strict one beside a normal verdict; a pair only
    another machine judged: a trusted signer's verdict (--policy), or what it said and that
    nothing here did."""
    if p.id in standing:
        return standing[p.id]["said"], "green" if p.admitted else "red"
    if not p.checked_here:
        said = "admitted" if p.elsewhere is not None and p.elsewhere.admitted else "rejected"
        return f"{said} elsewhere, not checked here", "yellow"
    text, style = verdicts[(p.admitted, p.strict)]
    if p.strict_admitted is not None and not p.strict:
        text += f"; strict: {'admitted' if p.strict_admitted else 'rejected'}"
    return text, style
