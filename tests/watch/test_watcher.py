"""`specreg watch`: real bundled servers started with exactly the command `specreg deploy` printed.

Audited traffic holds (and the Prometheus endpoint says so, read by prometheus-client's parser);
the same server restarted with a draft the audit never saw is named field by field, and with
the near-miss draft llama.cpp refuses it is `not speculating`, each within two windows; an
n-gram method deployed for the repetitive stratum drifts on chat-like traffic; a server without
--metrics is `unknown` with the fix; `--once` exits 0, 1 or 2. Windows are short (about a
second): the numbers, not the clock, are under test.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from _audit_world import specreg
from _cli_helpers import SPECREG
from _watch_world import WatchWorld, server, shuffled_letters, traffic

from specreg.audit.policy import load_policy
from specreg.registry.store import Registry
from specreg.servers.launcher import free_ports
from specreg.watch.watcher import Watcher, exit_code

NO_METRICS = "/metrics: HTTP 501: the server was started without --metrics"
REP = ("--stratum", "repetitive")  # the demo's draft is right on the alphabet, wrong on chat: deployed there


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _watcher(world: WatchWorld, db: Path, url: str, **kw: object) -> tuple[Watcher, Registry]:
    reg = Registry(db, show_progress=False)
    pol, source = load_policy(world.policy)
    return Watcher(url, reg, pol, source, timeout_s=10, **kw), reg  # type: ignore[arg-type]


def _windows_until(watcher: Watcher, done: object, *, limit: int, pause: float = 0.8) -> list:  # type: ignore[type-arg]
    """Windows every `pause` seconds until `done(window)` or `limit` windows."""
    out = []
    for _ in range(limit):
        time.sleep(pause)
        w = watcher.window()
        out.append(w)
        if done(w):  # type: ignore[operator]
            break
    return out


def _gauges(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10, trust_env=False).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_audited_traffic_holds_and_is_kept_beside_the_bench_evidence(watch_world: WatchWorld, tmp_path: Path) -> None:
    db = watch_world.copy(tmp_path / "r.db")
    port, listen = next(free_ports()), next(free_ports())
    argv = watch_world.deploy_argv(db, "draft-simple", port, *REP)
    url = f"http://127.0.0.1:{port}"
    cmd = [*SPECREG, "--db", str(db), "watch", url, *REP, "--policy", str(watch_world.policy), "--windows", "3"]
    cmd += ["--interval", "1.5s", "--json", "--listen", f"127.0.0.1:{listen}"]
    with server(argv), traffic(port, watch_world.repetitive) as done:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        gauges = _gauges(listen)  # the endpoint, scraped and parsed while the watch runs
        rest = [json.loads(line) for line in proc.stdout]
        code = proc.wait(60)
        assert proc.stderr is not None
        assert code == exit_code(_window(rest[-1])), proc.stderr.read()
        # and `--once` from cron: continues the drift test kept in the registry
        pol = str(watch_world.policy)
        once, out, err = specreg("watch", url, *REP, "--once", "--interval", "2s", "--policy", pol, db=db)
        assert done[0] >= 3
    windows = [first, *rest]
    assert len(windows) == 3
    states = [w["state"] for w in windows]
    assert "drifted" not in states and "not speculating" not in states, windows
    assert states.count("holds") >= 2, [(w["state"], w["reason"]) for w in windows]
    for w in windows:
        assert w["mismatches"] == [] and w["pair_id"] == watch_world.pairs["draft-simple"]
        assert w["server"]["via"] == "process" and w["server"]["target_sha256"] == _sha(watch_world.target)
        assert w["server"]["draft_sha256"] == _sha(watch_world.draft)
    held = [w for w in windows if w["state"] == "holds"]
    audited = held[0]["audited"]["acceptance"]
    assert 0 < audited <= 1 and all(abs(w["acceptance"] - audited) < 0.25 for w in held), held
    assert held[-1]["audited"]["run_id"] == watch_world.run_id and held[-1]["tested"] >= 2
    key = (("pair", str(watch_world.pairs["draft-simple"])), ("stratum", "repetitive"), ("url", url))
    assert gauges[("specreg_watch_state", tuple(sorted((*key, ("state", first["state"])))))] == 1.0
    assert gauges[("specreg_watch_audited_acceptance", key)] == pytest.approx(audited)
    assert gauges[("specreg_watch_mismatch", key)] == 0.0
    info = [labels for (name, labels), _ in gauges.items() if name == "specreg_watch_server_info"]
    assert dict(info[0])["draft_sha256"] == _sha(watch_world.draft) and dict(info[0])["method"] == "draft-simple"
    assert once == 0, out + err
    assert "the drift test continues from 3 windows kept earlier" in out and " holds: acceptance " in out
    # every window kept; audit, its reports and runs show put production beside the bench
    with Registry(db, show_progress=False) as reg:
        assert reg.conn.execute("SELECT count(*) FROM watch_windows").fetchone()[0] == 4
    pair = str(watch_world.pairs["draft-simple"])
    pol = str(watch_world.policy)
    code, out, _ = specreg("audit", "--pair", pair, "--policy", pol, "--report", str(tmp_path / "a.md"), db=db)
    assert f"production: pair {pair} (stratum repetitive) at {url}: deployed" in " ".join(out.split()), out
    assert "audited: holds" in " ".join(out.split())
    assert "## In production (specreg watch)" in (tmp_path / "a.md").read_text()
    code, out, _ = specreg("audit", "--pair", pair, "--policy", pol, "--json", db=db)
    prod = json.loads(out)["production"]
    assert prod[0]["state"] == "holds" and prod[0]["windows"] == 4 and prod[0]["audited_acceptance"] == audited
    code, out, _ = specreg("runs", "show", watch_world.run_id, db=db)
    assert code == 0 and "production: pair" in out


def _window(data: dict) -> object:  # type: ignore[type-arg]
    from specreg.schemas.watch import WatchWindow

    return WatchWindow.model_validate(data)


def test_a_restarted_server_with_another_draft_is_named_a_refused_one_not_speculating(
    watch_world: WatchWorld, tmp_path: Path
) -> None:
    db = watch_world.copy(tmp_path / "r.db")
    port = next(free_ports())
    argv = watch_world.deploy_argv(db, "draft-simple", port, *REP)
    md = argv.index("-md") + 1
    other = [*argv[:md], str(watch_world.other), *argv[md + 1 :]]
    near = [*argv[:md], str(watch_world.near_miss), *argv[md + 1 :]]
    watcher, reg = _watcher(watch_world, db, f"http://127.0.0.1:{port}", stratum="repetitive")
    try:
        with traffic(port, watch_world.repetitive):
            with server(argv):
                assert watcher.first() is None
                audited = _windows_until(watcher, lambda w: w.state != "unknown", limit=6)
                assert audited[-1].state == "holds" and audited[-1].mismatches == []
            with server(other):
                seen = _windows_until(watcher, lambda w: w.mismatches, limit=2)
            with server(near):
                refused = _windows_until(watcher, lambda w: w.state == "not speculating", limit=2)
                pol = str(watch_world.policy)
                once = specreg("watch", watcher.url, *REP, "--once", "--interval", "0.5s", "--policy", pol, db=db)
    finally:
        watcher.close()
        reg.close()
    named = seen[-1]
    assert [m.field for m in named.mismatches] == ["draft sha256"], named.mismatches
    assert named.mismatches[0].live == _sha(watch_world.other)[:12]
    assert named.mismatches[0].audited == _sha(watch_world.draft)[:12]
    assert any(w.restarted for w in seen), [w.restarted for w in seen]
    w = refused[-1]
    assert w.state == "not speculating" and "/slots: none of the 1 slots can speculate" in (w.reason or ""), w
    assert [m.field for m in w.mismatches] == ["draft sha256"] and w.server and w.server.speculative_slots == 0
    code, out, err = once
    assert code == 1, out + err
    assert "NOT SPECULATING" in out and "this is not the audited server:" in out and "draft sha256" in out


def test_ngram_deployed_for_repetitive_drifts_on_chat_like_traffic(watch_world: WatchWorld, tmp_path: Path) -> None:
    db = watch_world.copy(tmp_path / "r.db")
    port = next(free_ports())
    argv = watch_world.deploy_argv(db, "ngram-simple", port, "--stratum", "repetitive")
    assert "-md" not in argv and argv[argv.index("--spec-type") + 1] == "ngram-simple"
    watcher, reg = _watcher(watch_world, db, f"http://127.0.0.1:{port}", stratum="repetitive")
    try:
        with server(argv), traffic(port, shuffled_letters(8)):
            assert watcher.first() is None
            windows = _windows_until(watcher, lambda w: w.state == "drifted", limit=40, pause=0.6)
    finally:
        watcher.close()
        reg.close()
    assert watcher.pair_id == watch_world.pairs["ngram-simple"]  # found from its files and method
    last = windows[-1]
    assert last.state == "drifted", [(w.state, w.acceptance, w.reason) for w in windows]
    assert last.audited is not None and last.audited.stratum == "repetitive" and last.audited.acceptance == 1.0
    assert last.acceptance is not None and last.acceptance < 0.5
    assert last.decided_after is not None and last.decided_after <= 20
    assert "acceptance at most" in (last.reason or "") and f"after {last.decided_after} windows" in (last.reason or "")
    assert all(w.state in ("holds", "unknown") for w in windows[:-1])  # no page before it is decided
    assert last.acceptance_ratio_ci is not None and last.acceptance_ratio_ci[1] < 0.9


def test_no_metrics_is_unknown_with_the_fix_and_unreachable_exits_2(watch_world: WatchWorld, tmp_path: Path) -> None:
    db = watch_world.copy(tmp_path / "r.db")
    port = next(free_ports())
    argv = [a for a in watch_world.deploy_argv(db, "draft-simple", port, *REP) if a != "--metrics"]
    pol = str(watch_world.policy)
    with server(argv):
        code, out, err = specreg("watch", f"http://127.0.0.1:{port}", *REP, "--once", "--policy", pol, db=db)
    assert code == 2, out + err
    assert f"unknown: {NO_METRICS}" in " ".join(out.split())
    assert "fix: start the server with --metrics" in out
    assert "identified through its process" in out  # what it runs is still named
    code, out, err = specreg("watch", f"http://127.0.0.1:{next(free_ports())}", "--once", "--policy", pol, db=db)
    assert code == 2 and "unknown: /metrics: ConnectError" in out and "fix: is the server running" in out, out + err
    with Registry(db, show_progress=False) as reg:  # the matched server's window: its state, no numbers
        rows = reg.conn.execute("SELECT pair_id, state, reason, generated, counters_json FROM watch_windows")
        assert [tuple(r) for r in rows] == [(watch_world.pairs["draft-simple"], "unknown", NO_METRICS, None, None)]
