"""The watch itself: a baseline scrape, then one window per interval, each judged and kept.

A window is judged in this order, the first that applies deciding its state:
`unknown` when the server did not answer as llama-server with its metrics, or there is no
audited deploy to hold it to; `not speculating` when the audited method speculates but the
server cannot (`/slots`: no slot can, the draft was refused at load; or its argv says
`--spec-type none`); `unknown` on a restart (a counter went backwards, or another process or
other files answer: a new baseline, never a negative rate), on a window no request finished
in, or when the build counts no drafts; `not speculating` after `[watch] not_speculating_tokens`
generated tokens without a draft; else `drifted` once the drift test has decided, `holds`
until then. The identity is read every window, so a swapped draft is named in the first
window the new process answers in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from specreg.errors import EXIT_ADMITTED, EXIT_REJECTED, EXIT_UNDECIDED
from specreg.schemas.methods import BASELINE
from specreg.schemas.watch import ALERT_STATES, WatchWindow
from specreg.watch import windows as kept
from specreg.watch.audited import AuditedDeploy, audited_deploy, find_pair, mismatches
from specreg.watch.drift import DriftTest
from specreg.watch.identify import UNSET, FileHashes, identify, identity_key, is_loopback
from specreg.watch.scrape import MAX_REPLY_BYTES, Counters, Scrape, scrape

if TYPE_CHECKING:
    from specreg.registry.store import Registry
    from specreg.schemas.audit import Policy
    from specreg.schemas.watch import ServerSeen
    from specreg.validators.ruleset import ServerRules

NO_PAIR_FIX = "pass --pair N (specreg pairs lists them), and --stratum S when it was deployed for one"


def exit_code(w: WatchWindow) -> int:
    """`watch --once`: 0 holds, 1 drifted / not speculating / not the audited server, 2 undecided."""
    if w.mismatches or w.state in ALERT_STATES:
        return EXIT_REJECTED
    return EXIT_ADMITTED if w.state == "holds" else EXIT_UNDECIDED


def _rules(build: int | None) -> ServerRules:
    from specreg.validators.ruleset import for_build

    return for_build(build)[0].server


class Watcher:
    """One watched server: its baseline, identity, audited deploy and drift test."""

    def __init__(
        self,
        url: str,
        reg: Registry,
        policy: Policy,
        policy_source: str,
        *,
        pair_id: int | None = None,
        stratum: str | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        import httpx

        from specreg.benchmark.run.client import LlamaClient

        self.url = url.rstrip("/")
        self.local = is_loopback(httpx.URL(self.url).host)  # the server's hardware is this machine's
        self.reg, self.policy, self.policy_source = reg, policy, policy_source
        self.given_pair, self.stratum = pair_id, stratum
        self.client = LlamaClient(self.url, timeout_s=timeout_s, max_connections=2, max_response_bytes=MAX_REPLY_BYTES)
        self.rules = _rules(None)
        self._rules_build: int | None = None
        self.hashes = FileHashes(reg)
        self.prev: Scrape | None = None  # the last scrape with counters: the next window's start
        self.seen: ServerSeen | None = None
        self.key: str | None = None
        self.pair_id: int | None = None
        self.audited: AuditedDeploy | None = None
        self.no_audit: tuple[str, str | None] | None = None
        self._audits: dict[tuple[object, ...], AuditedDeploy] = {}
        self.test = DriftTest(policy.watch)
        self.undrafted = 0  # generated tokens since the last window that drafted
        self.index = 0
        self.resumed = 0  # windows of an earlier watch the test continues from
        self._kept_server: str | None = None  # the identity whose description the registry has from this watch

    def close(self) -> None:
        self.client.close()

    def _scrape(self) -> Scrape:
        return scrape(self.client, self.rules.metrics, self.rules.slot_speculative)

    # -- identity and the audited deploy ---------------------------------------------------------

    def _match(self) -> None:
        """The pair the server is held to (--pair, else the one its files and method name, else
        the one it was held to before it changed) and that pair's audited deploy; `no_audit`
        says why there is none."""
        seen = self.seen
        assert seen is not None
        self.audited, self.no_audit = None, None
        pair_id = self.given_pair
        if pair_id is None:
            pair_id, why = find_pair(self.reg, seen)
            pair_id = pair_id or self.pair_id  # a swapped file is held to what was deployed
            if pair_id is None:
                self.no_audit = (f"no audit to compare with: {why}", NO_PAIR_FIX)
                return
        conc = int(seen.flags["parallel"]) if seen.flags.get("parallel", "").isdigit() else None
        ngl = seen.flags.get("ngl")
        key = (pair_id, self.stratum, conc, self.local, ngl, seen.threads)
        if key not in self._audits:
            self._audits[key] = audited_deploy(
                self.reg,
                pair_id,
                self.stratum,
                self.policy,
                self.policy_source,
                concurrency=conc,
                local=self.local,
                local_ngl=None if ngl in (None, UNSET) else ngl,
                threads=seen.threads,
            )
        self.audited = a = self._audits[key]
        self.pair_id = a.pair_id
        if a.problem is not None:
            self.no_audit = (f"no audit to compare with: {a.problem}", a.fix)

    def _identify(self, s: Scrape) -> str | None:
        """Read what the server runs; a new identity is matched again and starts a new test.
        Returns what changed (None: the same server, or the first look)."""
        seen = identify(self.url, s, self.reg, self.hashes)
        key = identity_key(seen)
        old, self.seen = self.seen, seen
        if seen.build != self._rules_build:
            self.rules, self._rules_build = _rules(seen.build), seen.build
        if key == self.key:
            return None
        self.key = key
        self._match()
        self._new_test(s)
        if old is None:
            return None
        return _changed(old, seen)

    def _new_test(self, s: Scrape) -> None:
        """A fresh drift test, continued from the windows an earlier watch kept for this very
        server (same identity, counters not gone back since)."""
        self.test, self.undrafted, self.resumed = DriftTest(self.policy.watch), 0, 0
        if self.pair_id is None or self.key is None or self.audited is None or s.counters is None:
            return
        history, last = kept.resume(self.reg, self.pair_id, self.stratum, self.url, self.key)
        if not history or last is None:
            return
        try:
            then = Counters(**{**last, "per_position": tuple(last.get("per_position") or ())})
        except TypeError:
            return
        if s.counters.went_back(then) is not None:
            return  # restarted since: the old windows are another server's
        for w in history:
            self._feed(w)
        self.resumed = len(history)

    # -- windows -----------------------------------------------------------------------------------

    def first(self) -> WatchWindow | None:
        """The baseline scrape; a window (`unknown`) only when the server cannot be judged at all."""
        s = self._scrape()
        if s.problem is None or s.props is not None or s.slots is not None:
            self._identify(s)
        if s.counters is not None:
            self.prev = s
        if s.problem is None and self.no_audit is None:
            return None
        w = self._window(s)
        w.reason, w.fix = (s.problem.message, s.problem.hint) if s.problem else self.no_audit or (None, None)
        self._keep(w, None)
        return w

    def _keep(self, w: WatchWindow, counters: dict[str, object] | None) -> None:
        key = self.key or "0" * 64
        kept.record(self.reg, w, key, counters, with_server=key != self._kept_server)
        if w.pair_id is not None:
            self._kept_server = key

    def _window(self, now: Scrape) -> WatchWindow:
        prev = self.prev
        w = WatchWindow(
            index=self.index,
            url=self.url,
            started_at=prev.wall if prev else now.wall,
            ended_at=now.wall,
            seconds=now.at - prev.at if prev else 0.0,
            state="unknown",
            stratum=self.stratum,
            server=self.seen,
            pair_id=self.pair_id,
        )
        a = self.audited
        if a is not None:
            w.method = a.method
            w.audited = a.evidence
            if self.seen is not None:
                w.mismatches = mismatches(self.seen, a)
        return w

    def window(self) -> WatchWindow:
        """Scrape now and judge the window since the last scrape; kept in the registry when the
        server is matched to a pair."""
        now = self._scrape()
        self.index += 1
        answered = now.problem is None or now.props is not None or now.slots is not None
        changed = self._identify(now) if answered else None
        w = self._window(now)
        if now.problem is not None:
            w.reason, w.fix = now.problem.message, now.problem.hint
            self._keep(w, None)
            return w
        assert now.counters is not None
        prev = self.prev
        went_back = now.counters.went_back(prev.counters) if prev and prev.counters else None
        w.restarted = changed or went_back
        if went_back is not None and changed is None:
            self._new_test(now)  # the same identity, restarted: its counters start again, so does the test
        if prev is not None and prev.counters is not None and w.restarted is None:
            _deltas(w, prev.counters, now.counters)
        self.prev = now
        self._judge(w, first=prev is None)
        self._keep(w, now.counters.as_dict())
        return w

    def _judge(self, w: WatchWindow, *, first: bool) -> None:
        a, seen = self.audited, self.seen
        if self.no_audit is not None or a is None:
            w.reason, w.fix = self.no_audit or ("no audit to compare with", NO_PAIR_FIX)
            return
        if a.speculative and seen is not None and seen.speculative_slots == 0:
            w.state = "not speculating"
            w.reason = f"/slots: none of the {seen.slots} slots can speculate (a draft refused at load, or none given)"
        elif a.speculative and seen is not None and seen.spec_type == BASELINE:
            w.state, w.reason = "not speculating", "the server runs --spec-type none"
        elif w.restarted is not None:
            w.reason = f"the server restarted ({w.restarted}): a new baseline"
        elif first:
            w.reason = "the first scrape: counters are compared from here on"
        elif not w.generated:
            w.reason, w.fix = "no request finished in this window", "send it traffic, or give a longer --interval"
        elif w.drafted is None:
            w.reason = "this server's /metrics counts no drafted tokens"
            w.fix = "a llama.cpp build whose /metrics has the spec_decode counters"
        else:
            self._feed(w)
            if w.drafted == 0:
                self.undrafted += w.generated
            else:
                self.undrafted = 0
            limit = self.policy.watch.not_speculating_tokens
            if self.undrafted >= limit:
                w.state = "not speculating"
                w.reason = f"no draft over {self.undrafted} generated tokens (at least {limit}: [watch] policy)"
            elif self.test.drifted:
                w.state = "drifted"
                w.reason = f"{self.test.why}: decided after {self.test.decided_after} windows"
            else:
                w.state = "holds"
        w.tested, w.decided_after = self.test.windows, self.test.decided_after
        w.acceptance_ratio_ci, w.decode_ratio_ci = self.test.intervals()

    def _feed(self, w: WatchWindow) -> None:
        """One window with traffic into the drift test."""
        a = w.audited
        if a is None or not w.generated:
            return
        acc = (w.acceptance, a.acceptance) if w.acceptance is not None and a.acceptance else None
        dec = None
        if a.compare_decode and w.decode_tps is not None and a.decode_tps:
            dec = (w.decode_tps, a.decode_tps)
        self.test.add(acc, dec)


def _deltas(w: WatchWindow, before: Counters, after: Counters) -> None:
    """The window's numbers from two checked snapshots, neither gone back."""
    w.generated = after.generated - before.generated
    w.generating_s = after.generating_s - before.generating_s
    if w.generating_s > 0:
        w.decode_tps = w.generated / w.generating_s
    if after.drafted is not None and before.drafted is not None:
        w.drafted = after.drafted - before.drafted
        w.accepted = (after.accepted or 0) - (before.accepted or 0)
        w.drafts = (after.drafts or 0) - (before.drafts or 0)
        w.acceptance = w.accepted / w.drafted if w.drafted else None
        w.mean_accepted_length = 1 + w.accepted / w.drafts if w.drafts else None
        if w.drafts:
            old = before.per_position
            w.per_position = [
                (n - (old[i] if i < len(old) else 0)) / w.drafts for i, n in enumerate(after.per_position)
            ]


def _changed(old: ServerSeen, new: ServerSeen) -> str:
    """What tells two identities apart, in words."""
    if old.pid != new.pid:
        return f"process {old.pid} is now {new.pid}"
    for field in ("target_sha256", "draft_sha256", "build", "spec_type"):
        if getattr(old, field) != getattr(new, field):
            return f"{field.replace('_', ' ')} {getattr(old, field)} is now {getattr(new, field)}"
    return "the server's flags changed"


def run_windows(
    watcher: Watcher, interval_s: float, windows: int | None, show: Callable[[WatchWindow], None]
) -> WatchWindow | None:
    """Windows every `interval_s` until `windows` were made (None: until interrupted), each
    shown as it ends; returns the last one."""
    last = watcher.first()
    if last is not None:
        show(last)
        if windows == 1 and watcher.prev is None:
            return last  # --once with nothing to measure from: no need to wait
    made = 0
    next_at = time.monotonic() + interval_s
    while windows is None or made < windows:
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at = max(next_at + interval_s, time.monotonic())  # a slow scrape does not pile windows up
        last = watcher.window()
        show(last)
        made += 1
    return last
