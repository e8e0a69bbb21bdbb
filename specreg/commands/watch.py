"""`specreg watch URL`: hold a running llama-server to the audit that admitted it (specreg/watch/)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specreg.commands.options import JsonOpt, db_path
from specreg.errors import EXIT_UNDECIDED, UsageError

if TYPE_CHECKING:
    from specreg.schemas.watch import ServerSeen, WatchWindow
    from specreg.watch.exporter import Exporter
    from specreg.watch.watcher import Watcher

MAX_WINDOWS = 10**9


def watch_cmd(
    url: Annotated[str, typer.Argument(metavar="URL", help="The server, e.g. http://127.0.0.1:8080.")],
    pair: Annotated[
        int | None,
        typer.Option("--pair", metavar="N", help="The pair it serves (default: found from its model files)."),
    ] = None,
    stratum: Annotated[
        str | None,
        typer.Option("--stratum", metavar="S", help="The stratum it was deployed for (default: the whole workload)."),
    ] = None,
    interval: Annotated[
        str, typer.Option("--interval", metavar="DURATION", help="Time between scrapes: one window.")
    ] = "15s",
    once: Annotated[
        bool, typer.Option("--once", help="One window, then exit 0 holds, 1 alert, 2 undecided (cron, CI).")
    ] = False,
    windows: Annotated[
        int | None, typer.Option("--windows", metavar="N", help="Stop after N windows; exit as --once.")
    ] = None,
    json_out: JsonOpt = False,
    listen: Annotated[
        str | None,
        typer.Option("--listen", metavar="HOST:PORT", help="Serve Prometheus gauges there (e.g. 127.0.0.1:9464)."),
    ] = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", metavar="FILE", help="Policy TOML file (default: safe built-ins).")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS", help="Per request to the server.")] = 5.0,
) -> None:
    """Watch a deployed llama-server: is it the audited one, and does the evidence still hold?

    Each window compares the server's live acceptance and decode rate (from its /metrics
    counters) with what the audit measured for the deployed condition: holds, drifted (an
    anytime-valid test over windows), not speculating, or unknown (with the fix). Every
    window is kept in the registry against the pair. With --once: exit 0 holds, 1 drifted, not
    speculating or not the audited server, 2 undecided.
    """
    from specreg.units import parse_duration

    try:
        interval_s = parse_duration(interval)
    except ValueError as exc:
        raise UsageError(f"--interval {exc}") from None
    if once and windows is not None:
        raise UsageError("give --once or --windows N, not both")
    if windows is not None and not 1 <= windows <= MAX_WINDOWS:
        raise UsageError("--windows must be at least 1")
    if not 0 < timeout <= 600:
        raise UsageError("--timeout: give seconds above 0, at most 600")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"{url[:100]!r}: expected an http:// or https:// URL, e.g. http://127.0.0.1:8080")
    from specreg.audit.policy import load_policy
    from specreg.registry.store import Registry
    from specreg.watch.exporter import Exporter, parse_listen
    from specreg.watch.watcher import Watcher, exit_code, run_windows

    address = parse_listen(listen) if listen is not None else None
    pol, source = load_policy(policy)
    exporter = Exporter() if address else None
    with Registry(db_path(), create=False, show_progress=False) as reg:
        watcher = Watcher(url, reg, pol, source, pair_id=pair, stratum=stratum, timeout_s=timeout)
        view = _View(watcher, json_out, exporter)
        try:
            if exporter is not None and address is not None:
                exporter.serve(*address)
            last = run_windows(watcher, interval_s, 1 if once else windows, view.show)
        except KeyboardInterrupt:
            last = view.last
        finally:
            watcher.close()
            if exporter is not None:
                exporter.close()
    raise typer.Exit(exit_code(last) if last is not None else EXIT_UNDECIDED)


class _View:
    """Prints each window (a line, or a JSON line) and, when the server is new, what it is."""

    def __init__(self, watcher: Watcher, json_out: bool, exporter: Exporter | None) -> None:
        self.watcher, self.json_out, self.exporter = watcher, json_out, exporter
        self.key: str | None = None
        self.last: WatchWindow | None = None

    def show(self, w: WatchWindow) -> None:
        self.last = w
        if self.exporter is not None:
            self.exporter.update(w)
        if self.json_out:
            import sys

            sys.stdout.write(w.model_dump_json() + "\n")
            sys.stdout.flush()
            return
        if self.watcher.key != self.key and self.watcher.seen is not None:
            self.key = self.watcher.key
            _header(self.watcher, self.watcher.seen, w)
        _line(w)


def _header(watcher: Watcher, seen: ServerSeen, w: WatchWindow) -> None:
    """Which server this is, how it was identified, the audited deploy it is held to, and how
    it differs from it."""
    from specreg.commands.output import say

    how = f"through its process (pid {seen.pid})" if seen.via == "process" else "through /props"
    say(f"{seen.url}: identified {how}", prefix="watching ")
    files = [f"target {seen.target_path or '?'} ({_sha(seen.target_sha256)})"]
    if seen.draft_path:
        files.append(f"draft {seen.draft_path} ({_sha(seen.draft_sha256)})")
    if seen.build is not None:
        files.append(f"build {seen.build} ({seen.build_text})")
    if seen.spec_type:
        files.append(f"--spec-type {seen.spec_type}")
    if seen.slots is not None:
        spec = f", {seen.speculative_slots} can speculate" if seen.speculative_slots is not None else ""
        files.append(f"{seen.slots} slots{spec}")
    say("; ".join(files), prefix="  ", indent=4)
    a = watcher.audited
    if a is not None and a.evidence is not None and a.plan is not None:
        e = a.evidence
        nums = [f"acceptance {_num(e.acceptance)}", f"decode {_num(e.decode_tps, 1)} tok/s"]
        if e.mean_accepted_length is not None:
            nums.append(f"mean accepted length {e.mean_accepted_length:.2f}")
        where = f"stratum {a.stratum}" if a.stratum else "whole workload"
        say(
            f"pair {a.pair_id} {a.method}, {where}: run {e.run_id} {e.condition}: " + ", ".join(nums),
            prefix="  audited: ",
            indent=4,
        )
        if e.note:
            say(e.note, prefix="  note: ", indent=4)
        if watcher.resumed:
            say(f"the drift test continues from {watcher.resumed} windows kept earlier", prefix="  ", indent=4)
    elif watcher.no_audit is not None:
        reason, fix = watcher.no_audit
        say(reason, prefix="  audited: ", indent=4)
        if fix:
            say(fix, prefix="  fix: ", indent=4)
    for note in seen.notes:
        say(note, prefix="  note: ", indent=4)
    if w.mismatches:
        say("this is not the audited server:", prefix="  ", marks=[], style="red", indent=4)
    for m in w.mismatches:
        say(f"audited {m.audited or '-'}, live {m.live or '-'}", prefix=f"    {m.field}: ", indent=6)


def _sha(sha: str | None) -> str:
    return sha[:12] if sha else "sha256 unknown"


def _num(value: float | None, places: int = 2) -> str:
    return "-" if value is None else f"{value:.{places}f}"


_STYLE = {"holds": "green", "drifted": "red", "not speculating": "red", "unknown": "yellow"}


def _line(w: WatchWindow) -> None:
    """One window: the state and the live numbers beside the audited ones."""
    from specreg.commands.output import say

    state = w.state.upper() if w.state in ("drifted", "not speculating") else w.state
    head = f"{w.ended_at.astimezone().strftime('%H:%M:%S')} {state}"
    parts: list[str] = []
    a = w.audited
    if w.generated:
        if w.acceptance is not None:
            parts.append(f"acceptance {w.acceptance:.2f}" + (f" vs {a.acceptance:.2f}" if a and a.acceptance else ""))
        elif w.drafted == 0:
            parts.append("nothing drafted")
        if w.decode_tps is not None:
            vs = f" vs {a.decode_tps:.1f}" if a and a.decode_tps and a.compare_decode else ""
            parts.append(f"decode {w.decode_tps:.1f}{vs} tok/s")
        if w.mean_accepted_length is not None:
            parts.append(f"mean length {w.mean_accepted_length:.2f}")
        parts.append(f"{w.generated} tokens")
    if w.tested:
        parts.append(f"window {w.tested} of the test")
    if w.mismatches:
        parts.append(f"NOT THE AUDITED SERVER ({', '.join(m.field for m in w.mismatches)})")
    if w.state != "holds" and w.reason:
        parts.append(w.reason)
    say("; ".join(parts) or (w.reason or ""), prefix=head + ": ", marks=[(state, _STYLE[w.state])], indent=4)
    if w.fix:
        say(w.fix, prefix="  fix: ", indent=4)
