"""A busy machine and a budget (issue 47): a run waits for a quieter machine before it measures,
a run that kept nothing is `contended` (exit 1, what happened and the command that measures
again), and `--budget` caps the command's wall clock, the planned rounds included (real servers
on tiny models, a real CPU-burning neighbour)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from _bench_helpers import ITEMS, admit, db_rows, workload
from _bench_helpers import tiny_pair as _pair
from _cli_helpers import main_captured as _main
from _registry_helpers import cli, model

from specreg.benchmark.store.ending import BUDGET_ENDED, continue_command, ending
from specreg.registry.store import Registry
from specreg.schemas.bench import BenchRun, RoundLoad, RunInfo, RunManifest
from specreg.schemas.bench_settings import DEFAULT_BUSY_WAIT_S, BenchSettings, duration_text
from specreg.servers import load as server_load

BURN = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass\n"  # bounded


@pytest.fixture()
def neighbour() -> Iterator[subprocess.Popen[bytes]]:
    """One CPU-bound process beside the run, for the whole test."""
    proc = subprocess.Popen([sys.executable, "-c", BURN])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


# -- waiting for a quieter machine -----------------------------------------------------------------


def _load(others: float, cores: int = 2) -> RoundLoad:
    load = RoundLoad(round=0, wall_s=1.0, cores=cores, ours_cores=0.1, others_cores=others)
    load.busy = server_load.judge(load, 0.25)
    return load


class _Clock:
    """Looks that take a second each on a clock of the test's own."""

    def __init__(self, others: list[float]) -> None:
        self.t, self.others = 0.0, list(others)

    def __call__(self) -> float:
        return self.t

    def look(self) -> RoundLoad:
        self.t += 1.0
        return _load(self.others.pop(0) if len(self.others) > 1 else self.others[0])


def test_a_busy_machine_is_waited_out_and_the_wait_is_told() -> None:
    clock = _Clock([1.6] * 45 + [0.1])
    told: list[str] = []
    waited, last = server_load.wait_for_quiet(0.25, 180, told.append, looks=clock.look, clock=clock)
    assert last.busy is None and waited == 46
    assert told[0] == "waiting for a quieter machine: others use 1.6 of 2 cores, 1 s"
    # a line when the wait begins and every TELL_EVERY_S after, then the end of it
    assert [t.split(", ")[-1] for t in told[:-1]] == ["1 s", "21 s", "41 s"]
    assert told[-1] == "the machine is quieter after 46 s (others use 0.1 of 2 cores): measuring"


def test_a_quiet_machine_costs_one_look_and_a_busy_one_its_limit() -> None:
    clock = _Clock([0.1])
    told: list[str] = []
    assert server_load.wait_for_quiet(0.25, 180, told.append, looks=clock.look, clock=clock)[0] == 0.0
    assert clock.t == 1.0 and told == []
    clock = _Clock([1.9])
    waited, last = server_load.wait_for_quiet(0.25, 10, told.append, looks=clock.look, clock=clock)
    assert waited == 10 and last.busy is not None and len(told) == 1


def test_the_options_say_their_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """`--busy-wait`'s help states the default the settings hold; the demo's its own."""
    from specreg.demo import DEMO_BUSY_WAIT_S

    for args, default in ((["bench", "admitted"], DEFAULT_BUSY_WAIT_S), (["demo"], DEMO_BUSY_WAIT_S)):
        _, out, _ = _main(capsys, *args, "--help")
        flat = " ".join(out.replace("│", " ").split())
        assert f"(0: never wait) [{duration_text(default)}]" in flat, flat


def test_a_runs_settings_give_back_their_command() -> None:
    """The command that measures on carries every option set away from its default, as the
    command line takes it; an option at its default is left out."""
    s = BenchSettings(workload="my prompts.jsonl", concurrency=[1, 4], budget_s=90, busy_wait_s=600, pin=False,
                      ngram={"--spec-ngram-mod-n-match": 4}, temperature=[0.0, 0.7], busy_share=0.5,
                      request_timeout_s=60, balance=False)  # fmt: skip
    assert s.argv() == [
        "--workload", "my prompts.jsonl", "--concurrency", "1,4", "--ngram", "mod-n-match=4",
        "--request-timeout", "60", "--budget", "1.5m", "--temperature", "0,0.7", "--busy-share", "0.5",
        "--busy-wait", "10m", "--no-pin", "--shuffle",
    ]  # fmt: skip
    assert BenchSettings().argv() == []
    info = RunInfo(run_id="r", pair_id=3, status="contended", method="draft-simple", target_sha256="a" * 64,
                   started_at=datetime(2026, 1, 1))  # fmt: skip
    manifest = RunManifest.model_construct(settings=s, continued=[])
    assert continue_command(BenchRun(info=info, manifest=manifest), "/tmp/r.db") == [
        "specreg", "--db", "/tmp/r.db", "bench", "continue", "r", "--budget", "1.5m",
    ]  # fmt: skip
    no_budget = RunManifest.model_construct(settings=BenchSettings(), continued=[])
    assert continue_command(BenchRun(info=info, manifest=no_budget)) == ["specreg", "bench", "continue", "r"]
    assert continue_command(BenchRun(info=info.model_copy(update={"pair_id": None}), manifest=manifest)) is None
    assert continue_command(BenchRun(info=info)) is None  # no settings stored: nothing to continue with


def test_a_busy_neighbour_is_waited_for_then_a_run_that_kept_nothing_says_so(
    capsys: pytest.CaptureFixture[str], neighbour: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    """One CPU-bound neighbour for the whole run: the run waits its --busy-wait, telling how busy
    the machine is, measures anyway, sets every round aside, and ends `contended` - exit 1, not
    `complete` - with what happened and the command that measures again. The run is no evidence
    for the audit, and travels in a bundle with its status."""
    pid, home = _pair()
    wl = workload(home, ITEMS[:1])
    code, out, err = _main(capsys, "bench", "admitted", "--pair", str(pid), "--workload", str(wl), "--methods",
                           "draft-simple", "--repeat", "1", "--threads", "1", "--ctx-size", "512", "--warmup", "1",
                           "--busy-share", "0.25", "--busy-wait", "3s")  # fmt: skip
    flat = " ".join(err.split())
    assert code == 1, err
    assert "note: waiting for a quieter machine: others use " in flat and " of " in flat, flat
    assert "(--busy-wait 3s); measuring anyway (other processes used" in flat, flat
    db = Path(os.environ["SPECREG_DB"])
    (run,) = db_rows(db, "SELECT run_id, status, status_reason FROM bench_runs")
    assert run["status"] == "contended", dict(run)
    assert run["status_reason"].startswith("every round measured was set aside (other processes used")
    text = " ".join(out.replace(" \\\n", " ").split())
    assert f"Run {run['run_id']} kept nothing: every round measured was set aside" in text, text
    assert "after waiting " in text and "(--busy-wait 3s). It decides nothing" in text, text
    # measuring on from it, its settings as they were (what is set aside cannot change mid-way)
    assert f"Measure on when the machine is quieter: specreg bench continue {run['run_id']} --budget " in text, text
    loads = db_rows(db, "SELECT load_json FROM bench_conditions")
    waited = [x.get("waited_s") or 0 for r in loads for x in json.loads(r["load_json"])]
    assert sum(waited) >= 2.0, waited  # the wait is recorded with the slot it came before
    # `runs` shows it contended, with nothing found; the audit does not take it as evidence
    code, listing, _ = _main(capsys, "runs")
    assert code == 0 and "contended" in listing
    code, shown, _ = _main(capsys, "runs", "show", run["run_id"])
    assert "kept nothing" in " ".join(shown.split())
    policy = home / "policy.toml"
    policy.write_text("[licence]\nrequire_revision = false\n")
    code, audited, _ = _main(capsys, "audit", "--pair", str(pid), "--policy", str(policy))
    assert code == 1 and f"{run['run_id']} contended" in " ".join(audited.split()), audited
    # a bundle carries the status, and an import takes it
    bundle = tmp_path / "b.zip"
    assert cli("export", "--run", run["run_id"], "-o", str(bundle), db=db).returncode == 0
    other = tmp_path / "other.db"
    imported = cli("import", str(bundle), db=other)
    assert imported.returncode == 0, imported.stderr
    moved = json.loads(cli("runs", "show", run["run_id"], "--json", db=other).stdout)
    assert moved["info"]["status"] == "contended"


# -- the budget caps the command ---------------------------------------------------------------------


def test_a_budget_caps_the_command_and_cuts_what_is_in_flight(capsys: pytest.CaptureFixture[str]) -> None:
    """Forty planned rounds of a long request and a 6 s budget: the run ends within the budget
    and the time to wind down, never a request's timeout past it; the request in flight at the
    deadline is cut, neither a row nor a failure; a condition never reached is `skipped`, not
    failed; the run says what it measured and the command that measures on."""
    home = Path(os.environ["SPECREG_HOME"])
    target = model(home, "t.gguf", n_embd=256, n_layer=8, n_ff=512, n_head=8, n_head_kv=8)  # seconds a request
    with Registry(os.environ["SPECREG_DB"], show_progress=False) as reg:
        pid = admit(reg, target, model(home, "d.gguf", name="tiny-draft"))
    item = {"id": "long", "stratum": "repetitive", "max_tokens": 1500, "prompt": "a b c a b c a b c"}
    wl = workload(home, [item])
    budget, timeout = 6.0, 60.0  # a request takes seconds: one is in flight when the budget ends
    t0 = time.monotonic()
    code, out, err = _main(capsys, "bench", "admitted", "--pair", str(pid), "--workload", str(wl), "--methods",
                           "draft-simple", "--repeat", "40", "--threads", "1", "--ctx-size", "2048", "--warmup", "1",
                           "--budget", f"{budget:g}s", "--request-timeout", f"{timeout:g}",
                           "--min-speedup", "1.0")  # fmt: skip
    took = time.monotonic() - t0
    assert code in (0, 1), err
    assert took < budget + timeout, took  # the bound (what it took here is printed below)
    flat = " ".join(err.split())
    assert f"note: budget: the --budget of {budget:g}s ended; " in flat, flat
    cut = "1 request in flight cut (not counted)" in flat
    db = Path(os.environ["SPECREG_DB"])
    (run,) = db_rows(db, "SELECT run_id, status, started_at, finished_at FROM bench_runs")
    rows = db_rows(db, "SELECT condition, repeat, ok, timed_out, error FROM bench_requests")
    assert not any(r["timed_out"] for r in rows), [dict(r) for r in rows]  # the cut request is no row
    reps = {r["repeat"] for r in rows}
    assert len(reps) < 40
    conds = {r["name"]: dict(r) for r in db_rows(db, "SELECT name, status, failure FROM bench_conditions")}
    for c in conds.values():
        assert c["status"] in ("ok", "skipped"), conds  # nothing failed for the budget's sake
        if c["status"] == "skipped":
            assert c["failure"] == BUDGET_ENDED
    expected = "complete" if all(c["status"] == "ok" for c in conds.values()) else "incomplete"
    assert run["status"] == expected
    print(f"budget {budget:g} s: the command took {took:.1f} s; a request cut: {cut}; rounds {len(reps)}")
    text = " ".join(out.replace(" \\\n", " ").split())
    said = f"The --budget of {budget:g}s ended before every condition was decided. Measured: " in text
    summaries = db_rows(db, "SELECT summary_json FROM bench_summaries")
    undecided = [s for r in summaries if (s := json.loads(r["summary_json"]))["method"] != "none"
                 and s["stratum"] == "all" and s["decision"] == "undecided"]  # fmt: skip
    assert said == bool(undecided or expected == "incomplete"), text
    if said:
        run_id = db_rows(db, "SELECT run_id FROM bench_runs")[0]["run_id"]
        assert f"To measure on: specreg bench continue {run_id}" in text, text


def test_an_ending_names_what_was_measured_and_never_reached() -> None:
    """The paragraph of a budget that ended: each condition measured with its requests and
    rounds, those never reached, those undecided, and the command."""
    from specreg.schemas.bench import ConditionRun, ConditionSpec, ConditionSummary
    from specreg.schemas.request_row import RequestRow

    base = ConditionRun(idx=0, spec=ConditionSpec(name="none", method="none"), status="ok")
    mod = ConditionRun(idx=1, spec=ConditionSpec(name="ngram-mod", method="ngram-mod"), status="ok")
    draft = ConditionRun(idx=2, spec=ConditionSpec(name="draft-simple", method="draft-simple"), status="skipped",
                         failure=BUDGET_ENDED)  # fmt: skip
    t = datetime(2026, 1, 1)
    rows = [RequestRow(condition_idx=i, condition=n, prompt_id=f"p{k}", stratum="chat", repeat=rep, started_at=t,
                       ok=True) for i, n, reps in ((0, "none", (0, 1)), (1, "ngram-mod", (0,))) for rep in reps
            for k in range(3)]  # fmt: skip
    undecided = ConditionSummary(condition="ngram-mod", method="ngram-mod", stratum="all", status="ok", n_requests=3,
                                 n_ok=3, decision="undecided", decision_budget="7m")  # fmt: skip
    info = RunInfo(run_id="r", pair_id=3, status="incomplete", method="draft-simple", target_sha256="a" * 64,
                   started_at=t)  # fmt: skip
    manifest = RunManifest.model_construct(settings=BenchSettings(budget_s=180), continued=[])
    thin = undecided.model_copy(update={"stratum": "chat", "decision_budget": "90m"})  # a stratum asks for more
    run = BenchRun(info=info, manifest=manifest, conditions=[base, mod, draft], requests=rows,
                   summaries=[undecided, thin])  # fmt: skip
    end = ending(run)
    assert end is not None
    assert end.text == (
        "The --budget of 3m ended before every condition was decided. Measured: none (baseline) 6 requests in 2 "
        "rounds, ngram-mod 3 requests in 1 round. Not reached: draft-simple. Undecided: ngram-mod. To measure on:"
    )
    assert end.command == ["specreg", "bench", "continue", "r", "--budget", "7m"]  # the budget still needed


def test_a_log_hears_from_a_long_command_while_nothing_else_is_said(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a terminal the progress view writes a line whenever nothing was said for
    HEARTBEAT_S (here shortened), and stops when the command ends."""
    from specreg.commands.views import progress

    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.15)
    with progress.ProgressView():
        time.sleep(0.8)
    time.sleep(0.6)  # after the view: no more lines
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln]
    assert 2 <= len(lines) <= 8 and all(ln.startswith("still working, ") for ln in lines), lines


def test_a_probe_paused_for_a_wait_counts_only_the_slots_own_time() -> None:
    """The load of a slot that waited between its requests leaves the wait out (real /proc
    readings): this process burns a core while counted, sleeps while paused; `recent` reads the
    time since the last look without ending the slot."""

    def burn(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    probe = server_load.LoadProbe(list, 0, [0]).start()
    burn(0.4)
    recent = probe.recent()
    assert 0.35 <= recent.wall_s < 1.0 and recent.ours_cores > 0.05, recent  # a shared machine: its share
    probe.pause()
    time.sleep(1.0)  # waiting: not the slot's
    probe.resume()
    burn(0.4)
    load = probe.stop()
    assert 0.75 <= load.wall_s < 1.5, load  # both burns, not the second between them
    assert load.ours_cores > 0.05, load
