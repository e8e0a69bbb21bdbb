"""`check_pair`: every rule for one (target, draft, method), as a list of CheckResults.

A pair is admitted iff no check has severity error; `strict` turns warnings into errors.
A rejected pair is a verdict, never an exception: only inconsistent input (a draft for a
self-speculative method, none for a draft method) raises.
"""

from __future__ import annotations

from dataclasses import replace

from specreg.errors import UsageError
from specreg.gguf.reader import GGUFFile
from specreg.gguf.summary import summarize
from specreg.schemas.checks import CheckResult, PairVerdict
from specreg.schemas.methods import DRAFT_METHODS, SELF_METHODS, Method
from specreg.validators import checks_common as common
from specreg.validators import checks_simple as simple
from specreg.validators.checks_structure import check_structure
from specreg.validators.checks_template import check_template
from specreg.validators.ruleset import RuleSet
from specreg.validators.side import Side
from specreg.validators.template_scan import ScanCache


def detect_method(draft: GGUFFile | None, rule_set: RuleSet) -> Method:
    """`--method auto`: llama.cpp's own choice from the draft's architecture and tensors."""
    if draft is None:
        raise UsageError(
            "--method auto needs a DRAFT to choose from",
            hint="pass --method draft-mtp or an n-gram method (e.g. ngram-simple) to check the target alone",
        )
    arch = summarize(draft, shared=True).architecture
    if arch == rule_set.eagle3.architecture:
        return Method.DRAFT_EAGLE3
    if arch == rule_set.dflash.architecture:
        return Method.DRAFT_DSPARK if draft.tensor(rule_set.dflash.dspark_tensor) is not None else Method.DRAFT_DFLASH
    return Method.DRAFT_SIMPLE


def check_pair(
    target: GGUFFile,
    draft: GGUFFile | None,
    method: str,
    *,
    rule_set: RuleSet,
    strict: bool = False,
    scans: ScanCache | None = None,
) -> list[CheckResult]:
    """All checks for `method` (docs/check.md, "Check codes", explains every code).

    Args:
        target: the target's opened file.
        draft: the draft's opened file; None for the methods that speculate with the target
            alone (MTP, the n-gram methods).
        method: a `Method` value; `auto` is resolved before (`detect_method`).
        rule_set: the llama.cpp facts and specreg's thresholds to judge by.
        strict: turn every warning into an error.
        scans: chat template scans seen before, by the template's SHA-256 (the registry's).

    Raises:
        UsageError: when the method is unknown, or needs a draft that is missing, or takes
            none and one was given.
    """
    if method in DRAFT_METHODS and draft is None:
        raise UsageError(f"{method} needs a DRAFT model")
    if method in SELF_METHODS and draft is not None:
        raise UsageError(
            f"{method} speculates with the target alone: do not pass a DRAFT",
            hint="drop the DRAFT argument, or choose a draft method",
        )
    if method not in DRAFT_METHODS and method not in SELF_METHODS:
        raise UsageError(f"unknown method {method!r}; choose one of {', '.join(Method)}")

    t = Side.of("target", target, rule_set)
    d = None if draft is None else Side.of("draft", draft, rule_set)
    # each method's own checks are imported where it is judged: a pair is judged for one method
    if method == Method.DRAFT_MTP:
        from specreg.validators.checks_mtp import check_mtp

        checks = check_mtp(t, rule_set)
    elif method in SELF_METHODS:
        from specreg.validators.checks_mtp import usable_target

        checks = usable_target(t)
    else:
        assert d is not None
        checks = [simple.check_loadable(t), simple.check_loadable(d)]
        if method == Method.DRAFT_SIMPLE:
            checks += simple.runtime_rule(t, d, rule_set)
            checks += simple.advisories(t, d, rule_set)
        elif method == Method.DRAFT_EAGLE3:
            from specreg.validators.checks_eagle3 import check_eagle3

            checks += check_eagle3(t, d, rule_set)
        else:
            from specreg.validators.checks_dflash import check_dflash

            checks += check_dflash(t, d, rule_set, dspark=method == Method.DRAFT_DSPARK)
        checks += [
            common.vocab_only(t),
            common.vocab_only(d),
            common.draft_size(t, d, rule_set),
            common.context_length(t, d),
            common.arch_family(t, d),
        ]
        same = common.draft_identical(t, d)
        checks += [same] if same else []
    for side in (t, d) if d is not None else (t,):  # what makes llama.cpp fail at load, per file
        checks += check_structure(side, rule_set)
    checks += check_template(t, rule_set, scans)  # llama-server renders the target's template, never the draft's
    checks += [c for c in (common.special_ids(t), common.special_ids(d) if d else None) if c is not None]
    if strict:
        checks = [replace(c, severity="error") if c.severity == "warn" else c for c in checks]
    return checks


def verdict(
    checks: list[CheckResult],
    *,
    method: str,
    target_sha256: str,
    draft_sha256: str | None,
    rule_set: RuleSet,
    strict: bool,
) -> PairVerdict:
    """The stored outcome: admitted iff no check is an error."""
    return PairVerdict(
        admitted=not any(c.severity == "error" for c in checks),
        method=Method(method),
        target_sha256=target_sha256,
        draft_sha256=draft_sha256,
        rule_set=rule_set.id,
        strict=strict,
        checks=checks,
    )


__all__ = ["check_pair", "detect_method", "verdict"]
