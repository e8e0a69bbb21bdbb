"""Checks every draft method shares: is a speed-up possible, can the files be benchmarked.

None of these stop llama.cpp; they say whether deploying the pair can pay off (a draft as big
as its target cannot make it faster) or whether a benchmark can be run at all.
"""

from __future__ import annotations

from specreg.schemas.checks import CheckResult
from specreg.validators.ruleset import RuleSet
from specreg.validators.side import Side, result


def vocab_only(side: Side) -> CheckResult:
    """A file without tensors can be checked but not served (`file.vocab_only`)."""
    if side.summary.vocab_only:
        return result(
            "file.vocab_only",
            "warn",
            f"{side.role} has no tensors (vocab-only): it can be checked but not benchmarked",
            role=side.role,
            n_tensors=0,
        )
    return result(
        "file.vocab_only",
        "pass",
        f"{side.role} has {side.summary.n_tensors} tensors",
        role=side.role,
        n_tensors=side.summary.n_tensors,
    )


def special_ids(side: Side) -> CheckResult | None:
    """Special token ids past the vocabulary (`vocab.special_ids`): llama.cpp only warns
    ("bad special token ... using default id") and loads the file, so this is a warning, and
    every other check already compares the id llama.cpp uses instead."""
    ignored = side.vocab.ignored_ids
    if not ignored:
        return None
    used = ", ".join(
        f"{kind} {value} (uses {'its default ' + str(instead) if instead is not None else 'none'})"
        for kind, value, instead in ignored
    )
    return result(
        "vocab.special_ids",
        "warn",
        f"{side.role} names special tokens past its {side.vocab.n_tokens} tokens, which llama.cpp ignores: {used}",
        role=side.role,
        n_tokens=side.vocab.n_tokens,
        ignored=[{"kind": k, "id": v, "used": u} for k, v, u in ignored],
    )


def draft_size(t: Side, d: Side, rules: RuleSet) -> CheckResult:
    """Warn when the draft is not clearly smaller than the target (`draft.size`)."""
    ratio_limit = rules.advisory.draft_size_warn_ratio
    tp, dp = t.summary.parameter_count, d.summary.parameter_count
    if tp and dp:
        basis, tv, dv = "parameters", tp, dp
    else:
        basis, tv, dv = "file bytes", t.summary.file_size, d.summary.file_size
    ev = {"basis": basis, "target": tv, "draft": dv, "warn_ratio": ratio_limit}
    if t.summary.vocab_only or d.summary.vocab_only:
        return result("draft.size", "info", "a vocab-only file: sizes cannot be compared", **ev)
    ratio = dv / tv if tv else float("inf")
    ev["ratio"] = round(ratio, 4)
    if dv >= tv:
        return result(
            "draft.size",
            "warn",
            f"draft is not smaller than the target ({basis}: {dv} vs {tv}): no speed-up possible",
            **ev,
        )
    if ratio >= ratio_limit:
        return result(
            "draft.size", "warn", f"draft is {ratio:.0%} of the target's {basis}: little or no speed-up to expect", **ev
        )
    return result("draft.size", "pass", f"draft is {ratio:.1%} of the target's {basis}", **ev)


def context_length(t: Side, d: Side) -> CheckResult:
    """A draft trained on a shorter context drafts badly past it (`draft.context_length`)."""
    tc, dc = t.summary.context_length, d.summary.context_length
    ev = {"target": tc, "draft": dc}
    if tc is None or dc is None:
        return result("draft.context_length", "info", "context length missing in one file", **ev)
    if dc < tc:
        return result("draft.context_length", "warn", f"draft context {dc} is shorter than the target's {tc}", **ev)
    return result("draft.context_length", "pass", f"draft context {dc} covers the target's {tc}", **ev)


def arch_family(t: Side, d: Side) -> CheckResult:
    """Different architectures often mean different training data (`arch.family`, information)."""
    ta, da = t.summary.architecture, d.summary.architecture
    if ta != da:
        return result("arch.family", "info", f"architectures differ: target {ta}, draft {da}", target=ta, draft=da)
    return result("arch.family", "pass", f"both {ta}", target=ta, draft=da)


def _ids(*values: object) -> set[str]:
    """Comparable identities: lower-case alphanumerics of a name, a URL and the URL's last segment."""
    out: set[str] = set()
    for v in values:
        if not v:
            continue
        text = str(v).rstrip("/")
        for part in (text, text.rsplit("/", 1)[-1]):
            norm = "".join(ch for ch in part.lower() if ch.isalnum())
            if norm:
                out.add(norm)
    return out


def base_model(code: str, t: Side, d: Side) -> CheckResult:
    """A target-trained draft whose general.base_model.* names another model (warning)."""
    bases = d.summary.provenance.base_models
    if not bases:
        return result(code, "info", "draft names no base model (general.base_model.*)")
    ts = t.summary
    target_ids = _ids(ts.name, ts.provenance.repo_url, *ts.provenance.source.values())
    named = [{k: b.get(k) for k in ("name", "organization", "repo_url") if b.get(k) is not None} for b in bases]
    for b in bases:
        if _ids(b.get("name"), b.get("repo_url")) & target_ids:
            return result(code, "pass", "the draft's base model is the target", base_models=named, target_name=ts.name)
    first = named[0].get("name") or named[0].get("repo_url")
    return result(
        code,
        "warn",
        f"draft was made for {first!r}, not visibly for the target {ts.name!r}",
        base_models=named,
        target_name=ts.name,
    )
