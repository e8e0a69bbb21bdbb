"""`specreg bench admitted`: benchmark admitted pairs (reading stored runs is `runs`: runs.py).

Thin: parse options, call `benchmark.runner.Runner`, render through `views.progress` (live) and
`views.run_detail`. Heavy modules are imported inside the commands so `specreg --help` stays
fast.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specreg.commands.options import JsonOpt, PairOpt, db_path
from specreg.commands.output import emit_json, err_console, safe, say

if TYPE_CHECKING:
    from specreg.registry.store import Registry
    from specreg.schemas.bench import BenchRun
    from specreg.schemas.bench_settings import BenchSettings
    from specreg.servers.identity import ChosenRules

bench_app = typer.Typer(
    help="Benchmark admitted pairs on a real llama.cpp server.",
    no_args_is_help=True,
)


def _registry() -> Registry:
    from specreg.registry.store import Registry

    return Registry(db_path())


def _split(values: list[str] | None) -> list[str] | None:
    """`--methods a,b --methods c` -> [a, b, c]."""
    if not values:
        return None
    return [v.strip() for raw in values for v in raw.split(",") if v.strip()]


def _duration(text: str | None) -> float | None:
    from specreg.errors import UsageError
    from specreg.units import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"--budget {exc}") from None


def _ints(values: list[str] | None, flag: str) -> list[int] | None:
    """`--concurrency 1,4 --concurrency 8` -> [1, 4, 8]; anything else is a one-line usage error."""
    from specreg.errors import UsageError

    items = _split(values)
    if items is None:
        return None
    try:
        return [int(v) for v in items]
    except ValueError:
        shown = ",".join(values or [])
        raise UsageError(f"{flag} {shown!r}: expected whole numbers separated by commas, e.g. 1,4,8") from None


def _floats(values: list[str] | None, flag: str) -> list[float] | None:
    """`--temperature 0,0.7 --temperature 1` -> [0.0, 0.7, 1.0]; anything else is a one-line usage error."""
    import math

    from specreg.errors import UsageError

    items = _split(values)
    if items is None:
        return None
    try:
        out = [float(v) for v in items]
    except ValueError:
        out = []
    if not out or not all(math.isfinite(v) for v in out):
        shown = ",".join(values or [])
        raise UsageError(f"{flag} {shown!r}: expected numbers separated by commas, e.g. 0,0.7")
    return out


@bench_app.command("admitted")
def admitted(
    pair: PairOpt = None,
    server: Annotated[
        Path | None,
        typer.Option("--server", metavar="PATH", help="Your llama-server binary (default: bundled xllamacpp server)."),
    ] = None,
    methods: Annotated[
        list[str] | None,
        typer.Option(
            "--methods",
            metavar="M[,M]",
            help="Comma-separated: none, ngram-simple, ngram-mod, the pair's method. The baseline always runs.",
        ),
    ] = None,
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            metavar="NAME|FILE",
            help="default, a stratum (repetitive, chat, reasoning, long_input, structured), a standard "
            "set (mt-bench, humaneval, sharegpt: see `specreg workloads`) or a JSONL file.",
        ),
    ] = "default",
    sample: Annotated[
        int | None,
        typer.Option(
            "--sample",
            metavar="N",
            help="N prompts per stratum, drawn with --seed (default: all; sharegpt: 1000).",
        ),
    ] = None,
    repeat: Annotated[
        int, typer.Option("--repeat", help="Measured repetitions of every prompt (the default policy wants 3).")
    ] = 3,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="Override every prompt's max_tokens.")] = None,
    concurrency: Annotated[
        list[str] | None,
        typer.Option(
            "--concurrency",
            metavar="N[,N]",
            help="Requests in flight (= server slots, -np); a list such as 1,4,8 measures each. Default 1.",
        ),
    ] = None,
    draft_max: Annotated[
        list[str] | None,
        typer.Option(
            "--draft-max",
            metavar="K[,K]",
            help="--spec-draft-n-max for draft methods (default: the build's); a list such as 2,4,8,16 measures each.",
        ),
    ] = None,
    draft_min: Annotated[int | None, typer.Option("--draft-min", help="--spec-draft-n-min for draft methods.")] = None,
    ngram: Annotated[
        list[str] | None,
        typer.Option(
            "--ngram",
            metavar="NAME=VALUE",
            help="N-gram option NAME=VALUE, e.g. simple-size-n=8, mod-n-match=16 (repeatable).",
        ),
    ] = None,
    seed: Annotated[
        int,
        typer.Option(
            "--seed", help="Sampling seed: repetition r uses seed + r (recorded); also seeds the order and intervals."
        ),
    ] = 42,
    temperature: Annotated[
        list[str] | None,
        typer.Option(
            "--temperature",
            metavar="T[,T]",
            help="Sampling temperature (default 0, greedy); a list such as 0,0.7 measures each, greedy first.",
        ),
    ] = None,
    top_p: Annotated[
        float | None, typer.Option("--top-p", help="top-p of every request (default: the server's).")
    ] = None,
    top_k: Annotated[
        int | None, typer.Option("--top-k", help="top-k of every request (default: the server's).")
    ] = None,
    min_p: Annotated[
        float | None, typer.Option("--min-p", help="min-p of every request (default: the server's).")
    ] = None,
    draft_sampling: Annotated[
        list[str] | None,
        typer.Option(
            "--draft-sampling",
            metavar="greedy|probabilistic",
            help="--spec-draft-sampling for draft methods at temperature > 0; greedy,probabilistic measures both.",
        ),
    ] = None,
    warmup: Annotated[
        int,
        typer.Option("--warmup", help="Most warm-up requests per server start (stops when two agree within 10%)."),
    ] = 8,
    order: Annotated[
        str,
        typer.Option(
            "--order",
            metavar="rounds|blocked",
            help="rounds: one repetition per round, conditions in a seeded random order; blocked: one server each.",
        ),
    ] = "rounds",
    threads: Annotated[
        int | None,
        typer.Option("--threads", help="Server threads (-t and -tb; with --pin: the cores but one)."),
    ] = None,
    pin: Annotated[
        bool,
        typer.Option(
            "--pin/--no-pin",
            help="Bind the server to all cores but one and leave that one to the client, so they do not "
            "compete (on 4+ cores: on fewer, one thread would cost a draft method more than the baseline; "
            "--no-pin: the build's threads on every core).",
        ),
    ] = True,
    shuffle: Annotated[
        bool,
        typer.Option(
            "--shuffle",
            help="Rounds in a fresh seeded shuffle each, instead of the balanced order (each round the "
            "reverse of the one before: ABBA), which cancels slow drift.",
        ),
    ] = False,
    ctx_size: Annotated[int, typer.Option("--ctx-size", help="Server context size (-c).")] = 4096,
    gpu_layers: Annotated[str | None, typer.Option("--gpu-layers", help="-ngl: a number, auto or all.")] = None,
    start_timeout: Annotated[
        float, typer.Option("--start-timeout", help="Seconds for a server to become healthy.")
    ] = 120.0,
    request_timeout: Annotated[float, typer.Option("--request-timeout", help="Seconds per request.")] = 120.0,
    run_timeout: Annotated[float, typer.Option("--run-timeout", help="Seconds for a whole run (one pair).")] = 3600.0,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            metavar="DURATION",
            help="Measure until decided: more rounds after --repeat until every condition is faster or "
            "not faster than --min-speedup, within DURATION (8m, 90s): a cap on the command's wall clock, "
            "--repeat's rounds included (requests in flight at its end are cut, not counted).",
        ),
    ] = None,
    min_speedup: Annotated[
        float, typer.Option("--min-speedup", help="What --budget decides against (the default policy's).")
    ] = 1.05,
    busy_share: Annotated[
        str | None,
        typer.Option(
            "--busy-share",
            metavar="SHARE|off",
            help="Set aside rounds in which other processes used this share of the cores (or a request ran "
            "3x its usual time); --budget measures them again [0.25, or $SPECREG_BUSY_SHARE].",
        ),
    ] = None,
    busy_wait: Annotated[
        str | None,
        typer.Option(
            "--busy-wait",
            metavar="DURATION|0",
            help="Before each round, while other processes use --busy-share of the cores, wait for a "
            "quieter machine, this long in all; then measure (0: never wait) [3m].",
        ),
    ] = None,
    tune: Annotated[
        bool,
        typer.Option(
            "--tune",
            help="Choose --spec-draft-n-max: a first pass at --draft-max (default 16) predicts every length "
            "1..32, then the best and its neighbours are measured until decided (needs --budget).",
        ),
    ] = False,
    executor: Annotated[
        str, typer.Option("--executor", help="local (this machine) or ray (one task per pair on a Ray cluster).")
    ] = "local",
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", metavar="ADDR", help="Ray cluster address (default: start one here).")
    ] = None,
    resources: Annotated[
        list[str] | None,
        typer.Option(
            "--resources",
            metavar="JSON",
            help="Ray resources per task, e.g. '{\"GPU\": 1}'; repeat for one task per hardware class.",
        ),
    ] = None,
    ray_timeout: Annotated[
        float | None,
        typer.Option("--ray-timeout", metavar="SECONDS", help="Seconds to join (or start) the Ray cluster [120]."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Benchmark admitted pairs: baseline, n-gram and the admitted method, fresh servers each.

    Rejected or never-checked pairs are refused; admitted pairs that cannot be benchmarked
    (vocab-only files) are listed and skipped. Each run is stored (manifest, every request,
    summaries with speed-up intervals, server logs); exit 0 when every condition ran, 1 when one
    failed (e.g. the draft was refused or drafted nothing), 2 on errors.
    """
    started = time.monotonic()  # what --budget counts from
    from specreg.benchmark.plan.conditions import parse_ngram_options
    from specreg.benchmark.run.runner import Runner
    from specreg.commands.views.progress import ProgressView
    from specreg.commands.views.run_detail import show_run
    from specreg.schemas.bench_settings import BenchSettings, parse_busy_share, parse_wait

    opts = BenchSettings.from_options(
        methods=_split(methods),
        workload=workload,
        sample=sample,
        repeat=repeat,
        max_tokens=max_tokens,
        concurrency=_ints(concurrency, "--concurrency") or [1],
        draft_n_max=_ints(draft_max, "--draft-max"),
        draft_n_min=draft_min,
        ngram=parse_ngram_options(ngram or []),
        seed=seed,
        warmup=warmup,
        order=order,
        threads=threads,
        ctx_size=ctx_size,
        gpu_layers=gpu_layers,
        server=str(server) if server else None,
        start_timeout_s=start_timeout,
        request_timeout_s=request_timeout,
        run_timeout_s=run_timeout,
        budget_s=_duration(budget),
        min_speedup=min_speedup,
        temperature=_floats(temperature, "--temperature") or [0.0],
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        draft_sampling=_split(draft_sampling),
        **({"busy_share": parse_busy_share(busy_share)} if busy_share is not None else {}),
        **({"busy_wait_s": parse_wait(busy_wait)} if busy_wait is not None else {}),
        tune=tune,
        pin=pin,
        balance=not shuffle,
    )
    if executor not in ("local", "ray"):
        from specreg.errors import UsageError

        raise UsageError(f"--executor {executor!r}: choose local or ray")
    if executor == "ray":
        _bench_ray(opts, pair, ray_address, resources, ray_timeout, json_out)
    if ray_address or resources or ray_timeout is not None:
        from specreg.errors import UsageError

        raise UsageError("--ray-address, --resources and --ray-timeout go with --executor ray")
    from specreg.servers.identity import choose_rules

    judged = choose_rules(server=opts.server)  # the rules this server's build judges by
    with (
        _registry() as reg,
        ProgressView(rounds=opts.repeat if opts.order == "rounds" else None, budget_s=opts.budget_s) as view,
    ):
        runner = Runner(reg, opts, observer=view)
        runs = runner.bench(pair, started=started)
        shas = {s for r in runs for s in (r.info.target_sha256, r.info.draft_sha256) if s}
        names = {sha: rec.name for sha, rec in reg.get_artifacts(shas).items()}
    if json_out:
        emit_json([r.model_dump(mode="json", exclude={"requests"}) for r in runs])
    else:
        if runs:  # after the runs, so that a refusal before any server starts stays one error line
            say(judged.line(), prefix="rules: ", stderr=True)
        for r in runs:
            show_run(r, names)
    _warn_other_rules(runs, judged)
    for line in runner.refused:
        err_console().print(f"[bold red]error:[/] {safe(line)}")
    if runner.refused:
        raise typer.Exit(2)
    raise typer.Exit(0 if all(r.info.status == "complete" for r in runs) else 1)


@bench_app.command("continue")
def continue_(
    run_id: Annotated[
        str, typer.Argument(metavar="RUN", help="Run id, a unique prefix, or latest (see `specreg runs`).")
    ],
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            metavar="DURATION",
            help="What measuring on may spend (8m, 90s); default: what the run's projections say would "
            "decide what it left undecided (its own budget when it stopped before projecting).",
        ),
    ] = None,
    methods: Annotated[
        list[str] | None,
        typer.Option("--methods", metavar="M[,M]", help="Only these methods measure on (their baselines always)."),
    ] = None,
    busy_wait: Annotated[
        str | None,
        typer.Option(
            "--busy-wait",
            metavar="DURATION|0",
            help="How long to wait for a quieter machine, in all (default: the run's own). What is set "
            "aside (--busy-share) stays the run's: it decides which pairs its decisions rest on.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Measure on from a run that stopped short of a decision: undecided, incomplete, cancelled,
    aborted (its specreg killed) or contended.

    The same run goes on: the same files (their SHA-256 read again), server build, prompts,
    hardware class and settings (--min-speedup cannot change mid-way); its stored rounds count,
    nothing measured is measured again, new rounds continue the seeds. Any difference is refused,
    naming it. Exit 0 when every condition ran, 1 when one failed, 2 on errors.
    """
    started = time.monotonic()  # what --budget counts from
    from specreg.benchmark.run.resume import reap, undecided
    from specreg.benchmark.run.runner import Runner
    from specreg.benchmark.store.ending import budget_needed
    from specreg.benchmark.store.runstore import RunStore
    from specreg.commands.views.progress import ProgressView
    from specreg.commands.views.run_detail import show_run
    from specreg.errors import UsageError

    with _registry() as reg:
        store = RunStore(reg)
        reap(store)  # a run whose specreg was killed is aborted: continuable
        run = store.load(run_id)
        if run.info.status == "complete" and not undecided(run):  # not an error: there is simply nothing left
            say(f"run {run.info.run_id} is decided: every condition is faster or not faster; nothing to measure on")
            raise typer.Exit(0)
        settings = run.manifest.settings if run.manifest is not None else None
        # the budget still needed; where no projection names one (a first round too noisy to
        # project from), the run's own, so the command `runs show` prints works as printed
        seconds = _duration(budget) if budget is not None else budget_needed(run)
        if seconds is None and settings is not None:
            seconds = settings.budget_s
        if settings is None:
            raise UsageError(
                f"run {run.info.run_id} records no settings (made before they were stored): measure it again"
            )
        if seconds is None:
            raise UsageError(f"run {run.info.run_id} was not measured with a budget: give --budget DURATION")
        opts = settings.model_copy(update={"budget_s": seconds})
        if busy_wait is not None:
            from specreg.schemas.bench_settings import parse_wait

            opts = opts.model_copy(update={"busy_wait_s": parse_wait(busy_wait)})
        with ProgressView(rounds=None, budget_s=seconds) as view:
            runner = Runner(reg, opts, observer=view)
            result = runner.continue_run(run.info.run_id, methods=_split(methods), started=started)
        shas = {s for s in (result.info.target_sha256, result.info.draft_sha256) if s}
        names = {sha: rec.name for sha, rec in reg.get_artifacts(shas).items()}
    if json_out:
        emit_json(result.model_dump(mode="json", exclude={"requests"}))
    else:
        show_run(result, names)
    raise typer.Exit(0 if result.info.status == "complete" else 1)


def _warn_other_rules(runs: list[BenchRun], judged: ChosenRules) -> None:
    """A run of a pair judged under other rules than the server's: the audit will refuse it."""
    from specreg.commands.output import warn
    from specreg.servers.identity import needs_other_rules, recheck_hint

    lines = []
    for r in runs:
        draft = r.manifest.draft if r.manifest else None
        if draft is not None and draft.rule_set and needs_other_rules(draft.rule_set, judged.rules):
            lines.append(
                f"run {r.info.run_id}: pair {draft.pair_id} was judged under {draft.rule_set}, this server "
                f"needs {judged.rules.id} (the audit refuses such evidence): {recheck_hint(judged.rules)}"
            )
    if judged.warning:
        lines.insert(0, judged.warning)
    warn(lines)


def _bench_ray(
    opts: BenchSettings,
    pair: list[int] | None,
    address: str | None,
    resources: list[str] | None,
    timeout: float | None,
    json_out: bool,
) -> None:
    """`--executor ray`: send, keep what the nodes stream back, show; exits like the local executor (0 / 1)."""
    from specreg.benchmark.store.runstore import RunStore
    from specreg.commands.views.run_detail import show_run
    from specreg.errors import UsageError
    from specreg.exchange.ray_executor import CONNECT_TIMEOUT_S, bench_on_ray, need_ray, parse_resources

    if timeout is not None and not 0 < timeout <= 86400:
        raise UsageError(f"--ray-timeout {timeout:g}: give seconds above 0 (at most a day)")
    need_ray()  # before anything else: without Ray, one line saying how to install it
    specs = parse_resources(resources)
    # SIGTERM stops like Ctrl-C (cli.main): the runs are ended as cancelled, their tasks ended, a
    # cluster started here stopped
    with _registry() as reg:
        out = bench_on_ray(
            reg,
            opts,
            pair,
            address=address,
            resources=specs,
            note=lambda t: err_console().print(f"[dim]{safe(t)}[/]"),
            connect_timeout_s=CONNECT_TIMEOUT_S if timeout is None else timeout,
        )
        runs = [RunStore(reg).load(rid) for rid in out.runs]
        shas = {s for r in runs for s in (r.info.target_sha256, r.info.draft_sha256) if s}
        names = {sha: rec.name for sha, rec in reg.get_artifacts(shas).items()}
    if json_out:
        emit_json(
            {
                "runs": [r.model_dump(mode="json", exclude={"requests"}) for r in runs],
                "failed": [f.model_dump(mode="json") for f in out.failed],
            }
        )
    else:
        for r in runs:
            show_run(r, names)
        for f in out.failed:
            err_console().print(f"[bold red]failed:[/] run {f.run_id} (pair {f.pair_id}): {safe(f.status_reason)}")
    ok = not out.failed and all(r.info.status == "complete" for r in runs)
    raise typer.Exit(0 if ok else 1)
