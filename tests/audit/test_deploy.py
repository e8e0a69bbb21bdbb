"""`specreg deploy`: the audited condition as a real llama-server command, its SHA-256 check, its rollback.

The argv must mean to llama-server what the benchmark measured: it is read back through the
bundled server's parser (which starts llama.cpp from it) and checked against the flag list of
llama.cpp b11434's own `llama-server --help` (tests/data, extracted by tools/extract_server_flags.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from _audit_world import AuditWorld, specreg
from _cli_helpers import run_specreg

from specreg.audit.deploy import recorded_flags, server_argv, wrap_command
from specreg.errors import SpecregError
from specreg.registry.store import Registry
from specreg.servers.bundled_server import build_params, build_parser
from specreg.servers.launcher import free_ports
from specreg.testing import realvocab

FLAGS_FILE = Path(__file__).parents[1] / "data" / "llama-server-b11434-flags.json"
LLAMA_SERVER: dict[str, Any] = json.loads(FLAGS_FILE.read_text())
WRAPPER = "specreg.servers.bundled_server"


def _deploy(world: AuditWorld, tmp_path: Path, *args: str, **policy: dict[str, object]) -> tuple[int, dict, str]:
    pol = world.policy_file(tmp_path, **policy)
    code, out, err = specreg("deploy", *args, "--policy", str(pol), "--json", db=world.db)
    return code, (json.loads(out) if out.strip() else {}), err


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def real_llama_server_parse(argv: list[str]) -> dict[str, str | None]:
    """Walk an argv as llama-server b11434 would: every flag known and not removed, values where required."""
    flags, removed = LLAMA_SERVER["flags"], set(LLAMA_SERVER["removed"])
    seen: dict[str, str | None] = {}
    i = 1
    while i < len(argv):
        flag = argv[i]
        assert flag in flags, f"llama-server b11434 has no flag {flag}"
        assert flag not in removed, f"{flag} was removed from llama-server"
        if flags[flag] == "required":
            assert i + 1 < len(argv), f"{flag} needs a value"
            seen[flag] = argv[i + 1]
            i += 2
        else:
            seen[flag] = None
            i += 1
    if "--spec-type" in seen:
        assert set(str(seen["--spec-type"]).split(",")) <= set(LLAMA_SERVER["spec_types"])
    return seen


def test_deploy_prints_the_measured_condition_as_a_llama_server_command(
    audit_world: AuditWorld, tmp_path: Path
) -> None:
    pair = audit_world.pairs["draft-simple"]
    code, plan, err = _deploy(audit_world, tmp_path, str(pair))
    assert code == 0, (plan, err)
    assert {"argv", "rollback_argv", "sha256", "speedup", "speedup_ci95", "run_id"} <= set(plan)
    argv, rollback = plan["argv"], plan["rollback_argv"]
    assert plan["deployable"] and plan["run_id"] == audit_world.run_id and plan["failed_gates"] == []
    assert argv[0] == rollback[0] == "llama-server"
    assert not any(WRAPPER in a or a == "--port" or a == "--host" for a in argv + rollback)
    assert argv[argv.index("-m") + 1] == rollback[rollback.index("-m") + 1] == str(audit_world.target)
    assert argv[argv.index("-md") + 1] == str(audit_world.draft) and "-md" not in rollback
    assert argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert rollback[rollback.index("--spec-type") + 1] == "none"
    assert argv[argv.index("--temp") + 1] == "0" and argv[argv.index("--seed") + 1] == "42"  # sampled as measured
    assert plan["sha256"] == {
        str(audit_world.target): _sha(audit_world.target),
        str(audit_world.draft): _sha(audit_world.draft),
    }
    assert isinstance(plan["speedup"], float) and plan["speedup"] > 0
    assert plan["speedup_ci95"] is None or len(plan["speedup_ci95"]) == 2
    check = subprocess.run(["bash", "-c", plan["verify"]], capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == 2, check.stdout + check.stderr


def test_argv_round_trips_through_the_bundled_parser_to_what_was_measured(
    audit_world: AuditWorld, tmp_path: Path
) -> None:
    from specreg.benchmark.store.runstore import RunStore

    with Registry(audit_world.db, show_progress=False) as reg:
        run = RunStore(reg).load(audit_world.run_id)
    for method in ("draft-simple", "ngram-simple"):
        code, plan, _ = _deploy(audit_world, tmp_path, str(audit_world.pairs[method]))
        assert code == 0
        measured = next(c for c in run.conditions if c.spec.name == method)
        assert WRAPPER in measured.argv  # what the benchmark ran: specreg's wrapper on a loopback port
        ours, deployed = build_parser(), vars(build_parser().parse_args(plan["argv"][1:]))
        recorded = vars(ours.parse_args(recorded_flags(measured.argv)))
        # and the measuring machine's threads: production's host chooses its own (issue 32)
        benchmark_only = {"host", "port", "temp", "top_k", "top_p", "verbosity", "threads", "threads_batch"}
        assert deployed["threads"] is None and deployed["threads_batch"] is None
        # the serving limits the memory prediction assumed: pinned at the build's defaults when unset
        assert (deployed["cache_ram"], deployed["ctx_checkpoints"]) == (8192, 32)
        assert (recorded["cache_ram"], recorded["ctx_checkpoints"]) == (None, None)
        assert (deployed["threads_http"], recorded["threads_http"]) == (deployed["parallel"] + 4, None)
        benchmark_only |= {"cache_ram", "ctx_checkpoints", "threads_http"}
        assert {k: v for k, v in deployed.items() if k not in benchmark_only} == {
            k: v for k, v in recorded.items() if k not in benchmark_only
        }
        assert deployed["temp"] == 0.0
        build_params(build_parser().parse_args(plan["argv"][1:]))  # llama.cpp's params accept every value


def test_argv_uses_only_flags_the_real_llama_server_accepts(audit_world: AuditWorld, tmp_path: Path) -> None:
    for method in ("draft-simple", "ngram-simple"):
        code, plan, _ = _deploy(audit_world, tmp_path, str(audit_world.pairs[method]), "--port", "8080")
        assert code == 0
        seen = real_llama_server_parse(plan["argv"])
        real_llama_server_parse(plan["rollback_argv"])
        assert seen["--port"] == "8080" and plan["rollback_argv"][-2:] == ["--port", "8080"]
        if method == "ngram-simple":  # the run's n-gram options are part of the measured condition
            assert seen["--spec-ngram-simple-size-n"] == "1" and "-md" not in seen
    # and the flag list itself: a removed flag or an unknown one is caught
    with pytest.raises(AssertionError, match="removed"):
        real_llama_server_parse(["llama-server", "--draft-max", "4"])
    with pytest.raises(AssertionError, match="no flag"):
        real_llama_server_parse(["llama-server", "--draft-speedup", "2"])


def test_the_printed_command_starts_a_server(audit_world: AuditWorld, tmp_path: Path) -> None:
    """With --server pointing at a llama-server-compatible binary, the command as printed serves."""
    binary = Path(sys.executable).parent / "specreg-llama-server"
    port = next(free_ports())
    code, plan, _ = _deploy(
        audit_world, tmp_path, str(audit_world.pairs["draft-simple"]), "--server", str(binary), "--port", str(port)
    )
    assert code == 0 and plan["argv"][0] == str(binary)
    proc = subprocess.Popen(plan["argv"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("the deployed command did not become healthy")
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "llamacpp:" in metrics  # --metrics as measured
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(20)


def test_refuses_with_exit_1_and_the_failing_gates(audit_world: AuditWorld, tmp_path: Path) -> None:
    code, plan, _ = _deploy(audit_world, tmp_path, str(audit_world.pairs["draft-simple"]), speed={"min_speedup": 50})
    assert code == 1 and plan["deployable"] is False and plan["argv"] is None and plan["verify"] is None
    assert [g["gate"] for g in plan["failed_gates"]] == ["speed"]
    assert plan["rollback_argv"][0] == "llama-server"  # the way back is still given
    code, plan, _ = _deploy(audit_world, tmp_path, str(audit_world.pairs["near-miss"]))
    assert code == 1 and "verdict" in [g["gate"] for g in plan["failed_gates"]]
    # the human form names each failing gate
    pol = audit_world.policy_file(tmp_path, speed={"min_speedup": 50})
    code, out, _ = specreg("deploy", str(audit_world.pairs["draft-simple"]), "--policy", str(pol), db=audit_world.db)
    assert code == 1 and "not deployable" in out and "\n  speed: " in out and "< 50" in out


def test_stratum_and_concurrency_select_or_refuse(audit_world: AuditWorld, tmp_path: Path) -> None:
    pair = str(audit_world.pairs["draft-simple"])
    code, plan, _ = _deploy(audit_world, tmp_path, pair, "--stratum", "repetitive")
    assert code == 0 and plan["stratum"] == "repetitive" and plan["speedup"] is not None
    code, plan, _ = _deploy(audit_world, tmp_path, pair, "--concurrency", "4")
    assert code == 1 and "concurrency 4 was not measured" in plan["failed_gates"][-1]["message"]
    pol = audit_world.policy_file(tmp_path)
    code, _, err = specreg("deploy", pair, "--stratum", "poetry", "--policy", str(pol), db=audit_world.db)
    assert code == 2 and "stratum 'poetry' was not measured" in err and "hint: measured: chat, repetitive" in err
    code, _, err = specreg("deploy", "999", db=audit_world.db)
    assert code == 2 and err.startswith("error:") and "Traceback" not in err


def test_human_output_fits_80_columns_and_pastes_back_to_the_same_argv(audit_world: AuditWorld, tmp_path: Path) -> None:
    pol = audit_world.policy_file(tmp_path)
    pair = str(audit_world.pairs["draft-simple"])
    env = {**os.environ, "SPECREG_DB": str(audit_world.db), "COLUMNS": "80"}
    proc = run_specreg(["deploy", pair, "--policy", str(pol)], env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    _, plan, _ = _deploy(audit_world, tmp_path, pair)
    hashes = set(plan["sha256"].values())
    for line in out.splitlines():
        assert line == line.rstrip(), line
        if len(line) > 80:  # only where one word cannot be cut: a file path, or a full SHA-256 with its path
            longest = max(line.split(), key=len)
            assert len(line) - len(longest) < 80 - 10 or any(h in line for h in hashes), line
    block = out.split("2. start the server:\n", 1)[1].split("\n\n", 1)[0]
    assert shlex.split(block.replace("\\\n", " ")) == plan["argv"]
    verify = out.split("SHA-256 pinned by the registry):\n", 1)[1].split("\n\n", 1)[0]
    check = subprocess.run(["bash", "-c", verify], capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == 2, check.stdout + check.stderr


def test_report_shows_the_same_command(audit_world: AuditWorld, tmp_path: Path) -> None:
    pol = audit_world.policy_file(tmp_path)
    pair = str(audit_world.pairs["draft-simple"])
    code, _, err = specreg(
        "audit", "--pair", pair, "--policy", str(pol), "--report", str(tmp_path / "a.md"), db=audit_world.db
    )
    assert code == 0, err
    text = (tmp_path / "a.md").read_text()
    _, plan, _ = _deploy(audit_world, tmp_path, pair)
    assert shlex.join(plan["argv"]) in text and shlex.join(plan["rollback_argv"]) in text
    assert plan["verify"] in text and WRAPPER not in text


def test_unit_argv_building() -> None:
    external = ["/opt/llama/bin/llama-server", "-m", "/m/t.gguf", "--spec-type", "none", "-c", "512", "-np", "2",
                "-ngl", "-1", "--seed", "7", "--metrics", "--host", "127.0.0.1", "--port", "41234"]  # fmt: skip
    argv = server_argv(external, program="/opt/llama/bin/llama-server")
    assert argv == ["/opt/llama/bin/llama-server", "-m", "/m/t.gguf", "--spec-type", "none", "-c", "512", "-np", "2",
                    "--ctx-checkpoints", "32", "--cache-ram", "8192", "--threads-http", "6",
                    "-ngl", "-1", "--seed", "7", "--temp", "0", "--metrics"]  # fmt: skip
    # what the memory prediction assumed is pinned: llama.cpp's defaults, or what the run recorded
    pinned = server_argv([*external, "--cache-ram", "512", "--ctx-checkpoints", "4", "--swa-full"])
    assert pinned[pinned.index("--cache-ram") + 1] == "512" and pinned[pinned.index("--ctx-checkpoints") + 1] == "4"
    assert "--swa-full" in pinned
    # the bench host's threads (`--pin` on 2 cores: -t 1 -tb 1) are not the production host's
    threaded = server_argv([*external, "-t", "1", "-tb", "1"])
    assert not {"-t", "-tb", "--threads", "--threads-batch"} & set(threaded), threaded
    with pytest.raises(SpecregError, match="unknown flags --spec-synth-rates"):
        server_argv([*external, "--spec-synth-rates", "1"])
    lines = wrap_command(argv, 40)
    assert all(line.endswith(" \\") for line in lines[:-1]) and "-ngl -1" in " ".join(lines)
    assert shlex.split(" ".join(line.removesuffix(" \\") for line in lines)) == argv


def test_server_flag_list_matches_llama_cpp_source() -> None:
    """The checked-in flag list is what the b11434 server README says (re-extracted from the cached sdist)."""
    sdist = realvocab.cache_root() / realvocab.SDIST
    if not sdist.is_file():
        pytest.skip(f"llama.cpp sdist not in the cache ({sdist})")
    from tools.extract_server_flags import extract

    assert extract(sdist) == LLAMA_SERVER
    from specreg.servers.bundled_server import SPEC_TYPES

    assert list(SPEC_TYPES) == LLAMA_SERVER["spec_types"]


@pytest.fixture(scope="module")
def swept(sweep_world: SimpleNamespace, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """The session's one sweep (tests/_audit_world.py): draft-simple at draft lengths 2 and 4, each
    at concurrency 1 and 2 (a baseline per level); its ngram-mod pair failed and is never chosen."""
    d = tmp_path_factory.mktemp("deploy-sweep")
    policy = d / "policy.toml"
    policy.write_text(
        "[evidence]\nmin_repetitions = 2\n"
        "[speed]\nmin_speedup = 0.0\np95_tolerance_pct = 10000\n[memory]\nmax_extra_ram_pct = 50\n"
        "[licence]\nunknown = 'pass'\nrequire_revision = false\n"
    )
    yield SimpleNamespace(db=sweep_world.db, pid=sweep_world.pid, policy=policy)


def _swept(s: SimpleNamespace, *args: str) -> tuple[int, dict]:
    code, out, err = specreg("deploy", str(s.pid), "--policy", str(s.policy), "--json", *args, db=s.db)
    assert code in (0, 1), err
    return code, json.loads(out)


def test_a_sweep_deploys_the_audited_draft_length_at_each_concurrency(swept: SimpleNamespace) -> None:
    code, out, _ = specreg("audit", "--pair", str(swept.pid), "--policy", str(swept.policy), "--json", db=swept.db)
    report = json.loads(out)
    (pa,) = report["pairs"]
    code, plan = _swept(swept)
    assert code == 0 and plan["concurrency"] == pa["concurrency"] == 1
    argv = plan["argv"]
    assert argv[argv.index("--spec-draft-n-max") + 1] == str(pa["draft_n_max"]) == str(plan["draft_n_max"])
    assert argv[argv.index("-np") + 1] == "1" and plan["speedup_ci95"] == pa["speedup_ci95"]
    code, plan2 = _swept(swept, "--concurrency", "2")
    assert code == 0 and plan2["argv"][plan2["argv"].index("-np") + 1] == "2"
    assert plan2["rollback_argv"][plan2["rollback_argv"].index("-np") + 1] == "2"
    best2 = max(
        (o for o in pa["conditions"] if o["concurrency"] == 2 and not o["failed"]),
        key=lambda o: (o["speedup"], o["speedup_ci95"][0]),
    )
    assert plan2["condition"] == best2["condition"] and plan2["draft_n_max"] == best2["draft_n_max"]
    for d in report["decisions"]:  # per stratum: the draft length the audit's decision names
        if d["pair_id"] == swept.pid:
            code, p = _swept(swept, "--stratum", d["stratum"], "--concurrency", str(d["concurrency"]))
            assert code == 0 and p["condition"] == d["condition"] and p["draft_n_max"] == d["draft_n_max"]
            assert p["speedup"] == d["speedup"]
    real_llama_server_parse(plan2["argv"])


def test_a_better_pair_for_the_stratum_is_named(audit_world: AuditWorld, tmp_path: Path) -> None:
    """deploy audits the target's other admitted pairs too, so the per-stratum decision can point elsewhere."""
    pol = audit_world.policy_file(tmp_path)
    _, out, _ = specreg("audit", "--policy", str(pol), "--json", db=audit_world.db)
    decisions = [d for d in json.loads(out)["decisions"] if d["pair_id"] is not None]
    assert decisions
    mine = (audit_world.pairs["draft-simple"], audit_world.pairs["ngram-simple"])
    for d in decisions:
        for pid in mine:
            _, plan, _ = _deploy(audit_world, tmp_path, str(pid), "--stratum", d["stratum"])
            named = any(f"(pair {d['pair_id']})" in n for n in plan["notes"])
            assert named == (d["pair_id"] != pid), (d, pid, plan["notes"])


def test_recorded_commands_are_parsed_once_per_shape_never_differently() -> None:
    """A fleet's commands differ in their model paths only: one parse for all of them, and the
    argv each gets is the one a parse of its own command gives (paths, repeated flags, odd values)."""
    from specreg.audit import deploy

    def plain(cmd: list[str]) -> list[str]:
        ns = deploy._parser().parse_known_args(cmd[1:])[0]
        return [ns.model, ns.draft, ns.spec_type]

    tail = ["--spec-type", "draft-simple", "-c", "4096", "-np", "1", "--temp", "0"]
    cmds = [["llama-server", "-m", f"/m/t{i}.gguf", "-md", f"/m/d{i}.gguf", *tail] for i in range(50)]
    cmds += [
        ["llama-server", "-m", "/a.gguf", "-m", "/b.gguf", *tail],  # the last -m wins, as in argparse
        ["llama-server", "--model", "/x y.gguf", "--model-draft", "/d.gguf", *tail],
        ["llama-server", "-m", "/t.gguf", "--spec-draft-model", "/d2.gguf", *tail],
    ]
    deploy._parse_once.cache_clear()
    for cmd in cmds:
        argv = deploy.server_argv(cmd)
        ns = deploy._parse(deploy.recorded_flags(cmd))
        assert [ns.model, ns.draft, ns.spec_type] == plain(cmd)
        assert argv[argv.index("-m") + 1] == plain(cmd)[0]
    assert deploy._parse_once.cache_info().currsize <= 6  # not one per pair


def test_deploy_pins_the_caps_check_pair_found_for_the_configuration(audit_world: AuditWorld, tmp_path: Path) -> None:
    """Issue 47: `check pair --budget` records the largest --cache-ram / --ctx-checkpoints that fit
    a configuration (never the pair's verdict); `deploy` lowers the measured command to them, says
    so, and leaves the rollback (another configuration: the target alone) as measured."""
    db = audit_world.copy(tmp_path / "r.db")
    pol = str(audit_world.policy_file(tmp_path))
    check = ["check", "pair", str(audit_world.target), str(audit_world.draft), "-m", "draft-simple"]
    code, out, err = specreg(*check, "-c", "512", "--budget", "200MiB", "--json", db=db)
    fit = json.loads(out)["fit"]
    assert code == 0 and fit["fits"] and fit["lowered"] and 0 < fit["cache_ram_mib"] < 200, (out, err)
    code, out, _ = specreg("deploy", str(audit_world.pairs["draft-simple"]), "--policy", pol, "--json", db=db)
    plan = json.loads(out)
    assert code == 0 and plan["argv"][plan["argv"].index("--cache-ram") + 1] == str(fit["cache_ram_mib"])
    assert plan["rollback_argv"][plan["rollback_argv"].index("--cache-ram") + 1] == "8192"
    assert any(f"--cache-ram {fit['cache_ram_mib']}: the largest that fit 200 MiB" in n for n in plan["notes"])
    # another configuration's fit is not this one's: -c 1024 was not measured, nothing changes
    specreg(*check, "-c", "1024", "--budget", "100MiB", db=db)
    code, out, _ = specreg("deploy", str(audit_world.pairs["ngram-simple"]), "--policy", pol, "--json", db=db)
    assert json.loads(out)["argv"][json.loads(out)["argv"].index("--cache-ram") + 1] == "8192"
    # nothing fits: the command is printed as measured, with the note
    specreg(*check, "-c", "512", "--budget", "10MiB", db=db)
    code, out, _ = specreg("deploy", str(audit_world.pairs["draft-simple"]), "--policy", pol, "--json", db=db)
    plan = json.loads(out)
    assert plan["argv"][plan["argv"].index("--cache-ram") + 1] == "8192"
    assert any("does not fit 10.0 MiB" in n for n in plan["notes"]), plan["notes"]


def test_the_audit_names_each_pairs_rollback_as_deploy_prints_it(
    audit_world: AuditWorld, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: one owner for the rollback command. `deploy` prints the rollback the audit chose
    for the pair; and where pairs of one target were measured in different runs (another -c),
    the audit names each baseline with the pairs it is the rollback of, instead of the first
    pair's for all (deploy said -c 4096 where the audit said -c 512)."""
    import re

    from _audit_world import LENIENT

    from specreg.audit.deploy import plan_deploy
    from specreg.audit.run import run_audit
    from specreg.commands.views.audit import print_audit

    ids = [audit_world.pairs[k] for k in ("draft-simple", "ngram-simple", "ngram-mod")]
    with Registry(audit_world.db, show_progress=False) as reg:
        report = run_audit(reg, LENIENT, "lenient.toml", pair_ids=ids)
    for p in report.pairs:
        assert p.rollback_command and plan_deploy(report, p.pair_id).rollback_argv == p.rollback_command
    first, other, *rest = report.pairs
    assert first.rollback_command is not None and other.rollback_command is not None
    moved = list(other.rollback_command)
    moved[moved.index("-c") + 1] = "1024"
    fake = report.model_copy(update={"pairs": [first, dataclasses.replace(other, rollback_command=moved), *rest]})
    monkeypatch.setenv("COLUMNS", "200")
    print_audit(fake)
    out = capsys.readouterr().out
    blocks = re.findall(r"^rollback \((.*?)\):\n((?:  .*\n)+)", out, re.M)
    named = {name.split("; ")[-1]: shlex.split(text.replace("\\\n", " ")) for name, text in blocks}
    together = ", ".join(str(p.pair_id) for p in (first, *rest))
    assert named == {f"pair {other.pair_id}": moved, f"pairs {together}": first.rollback_command}, out
    print_audit(report)  # one baseline for the target: one rollback, named by the target alone
    assert re.findall(r"^rollback \((.*?)\):", capsys.readouterr().out, re.M) == ["audit-target"]
