"""The pre-upgrade check: every registered verdict judged again under another rule set, read-only.

`specreg pairs --recheck --runtime B` asks which standing verdicts a server of build B would
change. Most pairs need no model bytes for the answer: the differences between the verdict's
rule set and B (validators/ruleset_diff.py) are keyed by architecture, tokenizer model or
pre-tokenizer, and the registry's stored summaries say which of those a pair's files have; a
pair none of the changes concerns keeps its verdict as it is. Only a pair a change does concern
is opened again (open_artifact: SHA-256 checked) and judged with B's rules. Nothing is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specreg.errors import SpecregError
from specreg.schemas.checks import CheckResult
from specreg.schemas.registry import ArtifactRecord, PairRecord
from specreg.validators.ruleset import RuleSet, current_rule_set_id, is_stale, load_rule_set
from specreg.validators.ruleset_diff import RuleChange, concerning, diff_rule_sets, file_keys

if TYPE_CHECKING:
    from specreg.registry.store import Registry

_SEVERITY = {"pass": 0, "info": 1, "warn": 2, "error": 3}
# recorded by `check pair` beside the pair checks (memory estimate, runtime probe): kept as recorded
_KEPT = ("memory.", "probe.")


@dataclass(frozen=True)
class CheckChange:
    """One check whose worst severity differs under the new rules."""

    code: str
    old: str | None  # None: the check did not run before
    new: str | None  # None: it no longer runs
    message: str


@dataclass
class Rejudged:
    """One pair's verdict under the new rules, and what changed it."""

    pair: PairRecord
    admitted: bool | None  # None: it could not be judged again (`problem` says why)
    how: str  # "already judged under it", "no change concerns its files", "re-read"
    checks: list[CheckChange] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)  # the rule changes that concern its files
    problem: str | None = None

    @property
    def changed(self) -> bool:
        return self.admitted is not None and self.admitted != self.pair.admitted

    @property
    def newly_rejected(self) -> bool:
        return self.pair.admitted and self.admitted is False


@dataclass
class RecheckReport:
    rules: RuleSet
    pairs: list[Rejudged]

    @property
    def changed(self) -> list[Rejudged]:
        return [r for r in self.pairs if r.changed or r.problem is not None]

    @property
    def read(self) -> int:
        return sum(1 for r in self.pairs if r.how == "re-read")


def _worst(checks: list[CheckResult]) -> dict[str, CheckResult]:
    out: dict[str, CheckResult] = {}
    for c in checks:
        if c.code not in out or _SEVERITY[c.severity] > _SEVERITY[out[c.code].severity]:
            out[c.code] = c
    return out


def check_changes(old: list[CheckResult], new: list[CheckResult]) -> list[CheckChange]:
    """Per check code, the worst severity before and after, where they differ."""
    a, b = _worst(old), _worst(new)
    out = []
    for code in dict.fromkeys([*a, *b]):
        before, after = a.get(code), b.get(code)
        was = before.severity if before is not None else None
        now = after.severity if after is not None else None
        if was != now:
            shown = after or before
            assert shown is not None
            out.append(CheckChange(code, was, now, shown.message))
    return out


def _keys(rec: ArtifactRecord | None, *rule_sets: RuleSet) -> set[tuple[str, str]] | None:
    s = rec.summary if rec is not None else None
    if s is None:
        return None
    return file_keys(s.architecture, s.tokenizer.model, s.tokenizer.pre, *rule_sets)


def _rejudge(reg: Registry, pair: PairRecord, rules: RuleSet) -> tuple[bool, list[CheckChange]]:
    """Open both files again (their SHA-256 checked) and judge them with `rules`."""
    from specreg.sources.checking import open_artifact
    from specreg.validators.pair import check_pair

    _, t_file = open_artifact(reg, pair.target_sha256)
    d_file = open_artifact(reg, pair.draft_sha256)[1] if pair.draft_sha256 else None
    stored = pair.checks or reg.get_pair(pair.id).checks
    new = check_pair(t_file, d_file, pair.method, rule_set=rules, strict=pair.strict, scans=reg.template_scans)
    new += [c for c in stored if c.code.startswith(_KEPT)]
    return not any(c.severity == "error" for c in new), check_changes(stored, new)


def recheck_pairs(reg: Registry, rules: RuleSet) -> RecheckReport:
    """Every registered pair's standing verdict judged under `rules` (nothing is recorded)."""
    pairs = reg.pairs(with_checks=False)
    shas = {p.target_sha256 for p in pairs} | {p.draft_sha256 for p in pairs if p.draft_sha256}
    recs = reg.get_artifacts(shas, with_summary=True)
    diffs: dict[str, list[RuleChange] | str] = {}
    out: list[Rejudged] = []
    for pair in pairs:
        if pair.rule_set == rules.id:
            out.append(Rejudged(pair, pair.admitted, "already judged under it"))
            continue
        if pair.rule_set not in diffs and is_stale(pair.rule_set):
            now = current_rule_set_id(pair.rule_set)
            diffs[pair.rule_set] = f"its rule set {pair.rule_set} is not current ({now or 'unknown here'})"
        if pair.rule_set not in diffs:
            try:
                diffs[pair.rule_set] = diff_rule_sets(load_rule_set(pair.rule_set.rsplit("/r", 1)[0]), rules)
            except SpecregError as exc:  # cannot happen for a current id; kept for a damaged rules folder
                diffs[pair.rule_set] = f"its rule set {pair.rule_set} cannot be read ({exc.message})"
        changes = diffs[pair.rule_set]
        causes: list[str]
        if isinstance(changes, str):
            causes = [changes]
        else:
            old = load_rule_set(pair.rule_set.rsplit("/r", 1)[0])
            keys = [_keys(recs.get(sha), old, rules) for sha in (pair.target_sha256, pair.draft_sha256) if sha]
            if any(k is None for k in keys):
                causes = [c.text for c in changes] or ["no stored summary to tell"]
            else:
                causes = [c.text for c in concerning(changes, set().union(*(k for k in keys if k is not None)))]
            # a stale revision of the same rule set with no change in facts: its verdict stands
            if not causes:
                out.append(Rejudged(pair, pair.admitted, "no change concerns its files"))
                continue
        try:
            admitted, checks = _rejudge(reg, pair, rules)
        except SpecregError as exc:
            out.append(Rejudged(pair, None, "re-read", causes=causes, problem=exc.message))
            continue
        out.append(Rejudged(pair, admitted, "re-read", checks, causes))
    return RecheckReport(rules, out)
