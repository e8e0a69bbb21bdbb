"""Self-speculation: draft-mtp (the model's own next-token heads) and the n-gram methods.

MTP mirrors llama.cpp: the heads are the last `{arch}.nextn_predict_layers` blocks
(blk.N.nextn.*, with the tensors every MTP loader requires), and only the architectures whose
model class builds an MTP graph can run them (rule set: mtp.architectures). N-gram methods
need no second model: a loadable tokenizer and real tensors are enough.
"""

from __future__ import annotations

from specreg.schemas.checks import CheckResult
from specreg.validators.ruleset import RuleSet
from specreg.validators.side import Side, result


def usable_target(t: Side) -> list[CheckResult]:
    """The target alone must load and serve (`target.tokenizer`, `target.tensors`)."""
    out: list[CheckResult] = []
    v = t.vocab
    if v.problem or v.n_tokens == 0:
        out.append(
            result(
                "target.tokenizer", "error", f"target tokenizer unusable: {v.problem or 'no tokens'}", **v.as_evidence()
            )
        )
    else:
        out.append(
            result(
                "target.tokenizer",
                "pass",
                f"tokenizer {v.model!r} ({v.vocab_type}, {v.n_tokens} tokens) loads",
                **v.as_evidence(),
            )
        )
    if t.summary.vocab_only:
        out.append(
            result("target.tensors", "error", "target is vocab-only (no tensors): it cannot be served", n_tensors=0)
        )
    else:
        out.append(
            result("target.tensors", "pass", f"target has {t.summary.n_tensors} tensors", n_tensors=t.summary.n_tensors)
        )
    return out


def check_mtp(t: Side, rules: RuleSet) -> list[CheckResult]:
    arch = t.summary.architecture
    archs = rules.mtp.architectures
    out = usable_target(t)
    if arch in archs:
        out.append(result("mtp.architecture", "pass", f"llama.cpp implements MTP for {arch!r}", architecture=arch))
    else:
        out.append(
            result(
                "mtp.architecture",
                "error",
                f"llama.cpp has no MTP graph for {arch!r}",
                architecture=arch,
                supported=archs,
            )
        )

    n_next = t.summary.speculative.nextn_predict_layers or 0
    blocks = t.summary.block_count or 0
    key = f"{arch}.nextn_predict_layers"
    if n_next <= 0:
        out.append(
            result(
                "mtp.nextn_layers",
                "error",
                f"{key} is missing or 0: the model has no MTP heads",
                nextn_predict_layers=n_next,
            )
        )
        return out
    if n_next > blocks:
        out.append(
            result(
                "mtp.nextn_layers",
                "error",
                f"{key}={n_next} exceeds block_count {blocks}: llama.cpp refuses to load it",
                nextn_predict_layers=n_next,
                block_count=blocks,
            )
        )
        return out
    out.append(
        result(
            "mtp.nextn_layers",
            "pass",
            f"{n_next} MTP layer(s): blocks {blocks - n_next}..{blocks - 1}",
            nextn_predict_layers=n_next,
            block_count=blocks,
        )
    )

    # counts come from the file: bound them by what it can hold before building any list
    need = n_next * len(rules.mtp.required_tensors)
    if need > t.summary.n_tensors:
        out.append(
            result(
                "mtp.tensors",
                "error",
                f"{n_next} MTP layer(s) need {need} tensors, but the file holds only {t.summary.n_tensors}",
                required=need,
                n_tensors=t.summary.n_tensors,
            )
        )
        return out
    wanted = [tmpl.format(il=il) for il in range(blocks - n_next, blocks) for tmpl in rules.mtp.required_tensors]
    missing = [name for name in wanted if t.tensor(name) is None]
    if missing:
        out.append(
            result(
                "mtp.tensors",
                "error",
                f"{len(missing)} required MTP tensors missing, first {missing[0]!r}",
                missing=missing[: rules.advisory.evidence_max_items],
                n_missing=len(missing),
                required=len(wanted),
            )
        )
    else:
        out.append(
            result("mtp.tensors", "pass", f"all {len(wanted)} required MTP tensors present", required=len(wanted))
        )
    return out
