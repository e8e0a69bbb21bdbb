"""draft-simple: llama.cpp's runtime vocab rule, exactly, plus the advisories beyond it.

Errors mirror `common_speculative_are_compatible` (common/speculative.cpp) on effective values:
vocab type equal; add_bos equal and, when set, bos equal; the same for eos; token counts within
SPEC_VOCAB_MAX_SIZE_DIFFERENCE; token texts equal (as C strings) from
SPEC_VOCAB_CHECK_START_TOKEN_ID up to the smaller count. Everything else here is a warning or
information: it does not stop llama.cpp from drafting, but it is worth knowing.
"""

from __future__ import annotations

import re

from specreg.schemas.checks import CheckResult
from specreg.text import plural
from specreg.validators.effective import c_text
from specreg.validators.ruleset import RuleSet
from specreg.validators.side import Side, clip, first_diffs, result


def _token_evidence(t: Side, d: Side, ids: list[int]) -> list[dict[str, object]]:
    tt, dt = t.texts(), d.texts()
    return [{"id": i, "target": clip(tt[i]), "draft": clip(dt[i])} for i in ids]


def _texts_differ(t: Side, d: Side, start: int, stop: int, rules: RuleSet) -> tuple[list[int], int]:
    """Ids in [start, stop) whose texts differ as llama.cpp's strcmp sees them."""
    if start >= stop:
        return [], 0
    if t.summary.tokenizer.tokens_sha256 is not None and (
        t.summary.tokenizer.tokens_sha256 == d.summary.tokenizer.tokens_sha256
    ):
        return [], 0  # identical raw arrays: no decoding needed
    tt, dt = t.texts(), d.texts()
    raw = [i for i, x, y in zip(range(start, stop), tt[start:stop], dt[start:stop], strict=False) if x != y]
    # raw texts that differ can still be equal C strings only when empty or holding a NUL
    real = [
        i
        for i in raw
        if (tt[i] and dt[i] and "\0" not in tt[i] and "\0" not in dt[i])
        or c_text(tt[i], i, rules) != c_text(dt[i], i, rules)
    ]
    return real[: rules.advisory.evidence_max_items], len(real)


def check_loadable(side: Side) -> CheckResult:
    """Both tokenizers must be ones llama.cpp can load (`vocab.model`)."""
    v = side.vocab
    if v.problem:
        return result("vocab.model", "error", f"{side.role} tokenizer: {v.problem}", **{side.role: v.as_evidence()})
    return result(
        "vocab.model",
        "pass",
        f"{side.role} tokenizer {v.model!r} ({v.vocab_type}) loads",
        **{side.role: v.as_evidence()},
    )


def runtime_rule(t: Side, d: Side, rules: RuleSet) -> list[CheckResult]:
    """The five conditions of common_speculative_are_compatible, each as its own check."""
    tv, dv = t.vocab, d.vocab
    out: list[CheckResult] = []
    both = {"target": tv.vocab_type, "draft": dv.vocab_type}
    if tv.vocab_type != dv.vocab_type:
        out.append(
            result(
                "vocab.type",
                "error",
                f"vocab types differ: target {tv.vocab_type}, draft {dv.vocab_type}",
                **both,
                target_model=tv.model,
                draft_model=dv.model,
            )
        )
    else:
        out.append(result("vocab.type", "pass", f"both vocabs are {tv.vocab_type}", **both))

    for tok in ("bos", "eos"):
        t_add, d_add = getattr(tv, f"add_{tok}"), getattr(dv, f"add_{tok}")
        t_id, d_id = getattr(tv, tok), getattr(dv, tok)
        ev = {"target": {f"add_{tok}": t_add, tok: t_id}, "draft": {f"add_{tok}": d_add, tok: d_id}}
        if t_add != d_add:
            said = {True: "yes", False: "no", None: "unset"}
            text = f"add_{tok} differs: target {said[t_add]}, draft {said[d_add]}"
            out.append(result(f"vocab.{tok}", "error", text, **ev))
        elif t_add and t_id != d_id:
            out.append(
                result(
                    f"vocab.{tok}",
                    "error",
                    f"{tok} ids differ while add_{tok} is set: target {t_id}, draft {d_id}",
                    **ev,
                )
            )
        else:
            how = f"both add {tok} {t_id}" if t_add else f"neither adds {tok}"
            out.append(result(f"vocab.{tok}", "pass", how, **ev))

    limit = rules.draft_simple.max_size_difference
    diff = abs(tv.n_tokens - dv.n_tokens)
    ev_n = {"target": tv.n_tokens, "draft": dv.n_tokens, "difference": diff, "max_difference": limit}
    if diff > limit:
        out.append(
            result(
                "vocab.n_tokens",
                "error",
                f"token counts differ by {diff} (> {limit}): target {tv.n_tokens}, draft {dv.n_tokens}",
                **ev_n,
            )
        )
    else:
        out.append(
            result(
                "vocab.n_tokens",
                "pass",
                f"token counts within {limit}: target {tv.n_tokens}, draft {dv.n_tokens}",
                **ev_n,
            )
        )

    start = rules.draft_simple.check_start_token_id
    stop = min(tv.n_tokens, dv.n_tokens)
    ids, count = _texts_differ(t, d, start, stop, rules)
    ev_t = {"compared": [start, stop], "n_differ": count}
    if count:
        first = _token_evidence(t, d, ids)
        f0 = first[0]
        out.append(
            result(
                "vocab.tokens",
                "error",
                f"{plural(count, 'token text')} differ{'s' if count == 1 else ''} from id {start} on; "
                f"first: id {f0['id']} "
                f"target {clip(str(f0['target']), 40)!r}, draft {clip(str(f0['draft']), 40)!r}",
                **ev_t,
                first=first,
            )
        )
    else:
        out.append(result("vocab.tokens", "pass", f"token texts equal for ids {start}..{max(stop - 1, start)}", **ev_t))
    return out


def padding(t: Side, d: Side, rules: RuleSet) -> CheckResult | None:
    """Name a size difference made only of padding tokens (Qwen 151,936 vs 152,064)."""
    nt, nd = t.vocab.n_tokens, d.vocab.n_tokens
    if nt == nd:
        return None
    bigger = t if nt > nd else d
    lo, hi = min(nt, nd), max(nt, nd)
    texts = bigger.texts()
    types = bigger.types() or [None] * hi  # type: ignore[list-item]
    pattern = re.compile("|".join(f"(?:{p})" for p in rules.advisory.pad_token_patterns), re.I)
    pad_types = set(rules.advisory.pad_token_types)
    real = [i for i in range(lo, hi) if types[i] not in pad_types and not pattern.search(texts[i])]
    ev = {
        "larger": bigger.role,
        "extra": hi - lo,
        "extra_ids": [lo, hi - 1],
        "sample": [
            {"id": i, "text": clip(texts[i])} for i in range(lo, min(hi, lo + rules.advisory.evidence_max_items))
        ],
    }
    if not real:
        return result("vocab.padding", "info", f"the {hi - lo} extra {bigger.role} tokens are padding only", **ev)
    first = [{"id": i, "text": clip(texts[i])} for i in real[: rules.advisory.evidence_max_items]]
    return result(
        "vocab.padding",
        "warn",
        f"{len(real)} of the {hi - lo} extra {bigger.role} tokens are real tokens, not padding",
        **ev,
        real=first,
    )


def advisories(t: Side, d: Side, rules: RuleSet) -> list[CheckResult]:
    """Tokenizer differences llama.cpp does not check (warnings / information)."""
    tv, dv = t.vocab, d.vocab
    ts, ds = t.summary.tokenizer, d.summary.tokenizer
    lim = rules.advisory.evidence_max_items
    start = min(rules.draft_simple.check_start_token_id, tv.n_tokens, dv.n_tokens)
    out: list[CheckResult] = []

    ids, count = _texts_differ(t, d, 0, start, rules)
    if count:
        out.append(
            result(
                "vocab.tokens_head",
                "warn",
                f"{count} of the first {start} token texts differ{'s' if count == 1 else ''} "
                "(llama.cpp does not compare them)",
                n_differ=count,
                first=_token_evidence(t, d, ids),
            )
        )
    else:
        out.append(result("vocab.tokens_head", "pass", f"token texts 0..{start - 1} equal"))

    out.append(_token_types(t, d, lim))

    if tv.pre != dv.pre:
        out.append(
            result(
                "vocab.pre",
                "warn",
                f"pre-tokenizers differ: target {tv.pre!r}, draft {dv.pre!r} (the same text may split differently)",
                target=tv.pre,
                draft=dv.pre,
            )
        )
    else:
        same = (
            f"same pre-tokenizer {tv.pre!r}"
            if tv.pre is not None
            else "neither sets a pre-tokenizer (tokenizer.ggml.pre)"
        )
        out.append(result("vocab.pre", "pass", same, target=tv.pre, draft=dv.pre))

    if ts.merges_sha256 != ds.merges_sha256:
        out.append(
            result(
                "vocab.merges",
                "warn",
                f"BPE merges differ: target {ts.n_merges}, draft {ds.n_merges}",
                target={"n": ts.n_merges, "sha256": ts.merges_sha256},
                draft={"n": ds.n_merges, "sha256": ds.merges_sha256},
            )
        )
    else:
        out.append(result("vocab.merges", "pass", f"same merges ({ts.n_merges})"))

    out.append(_eog(t, d, rules))
    out.append(_template(t, d))
    pad = padding(t, d, rules)
    if pad is not None:
        out.append(pad)
    out.append(extra_ids(t, d))
    return out


def extra_ids(t: Side, d: Side) -> CheckResult:
    """Ids only one side has: llama.cpp admits up to 128 of them, then aborts if one shows up.

    Observed on xllamacpp 2026.10.11549 (tiny models): a draft proposing an id the target lacks,
    or a prompt/output token id the draft lacks, aborts the server in common_batch
    ("get_sub_batch: failed to add token"). Real drafts rarely propose padding, but prompts and
    outputs do contain real extra tokens (phi-3's <|end|> beyond llama-spm's vocabulary).
    """
    nt, nd = t.vocab.n_tokens, d.vocab.n_tokens
    ev = {"target": nt, "draft": nd}
    if nd > nt:
        return result(
            "vocab.extra_ids",
            "warn",
            f"draft has {nd - nt} token ids the target lacks ({nt}..{nd - 1}): "
            "if the draft proposes one, the server aborts",
            **ev,
        )
    if nt > nd:
        return result(
            "vocab.extra_ids",
            "warn",
            f"target has {nt - nd} token ids the draft lacks ({nd}..{nt - 1}): "
            "a prompt or output containing one aborts the server",
            **ev,
        )
    return result("vocab.extra_ids", "pass", "both vocabularies have the same ids", **ev)


def _token_types(t: Side, d: Side, lim: int) -> CheckResult:
    """Token types over the common ids (fingerprints first, decoded only when they differ)."""
    ts, ds = t.summary.tokenizer, d.summary.tokenizer
    if ts.token_types_sha256 is None or ds.token_types_sha256 is None:
        if ts.token_types_sha256 == ds.token_types_sha256:
            return result("vocab.token_types", "pass", "neither file has token types")
        return result(
            "vocab.token_types",
            "info",
            "token types present in only one file",
            target=ts.token_types_sha256 is not None,
            draft=ds.token_types_sha256 is not None,
        )
    if ts.token_types_sha256 != ds.token_types_sha256:
        tt, dt = t.types(), d.types()
        ids, count = first_diffs(tt, dt, 0, min(len(tt), len(dt)), lim)
        if count:
            return result(
                "vocab.token_types",
                "warn",
                f"{count} token types differ",
                n_differ=count,
                first=[{"id": i, "target": tt[i], "draft": dt[i]} for i in ids],
            )
    return result("vocab.token_types", "pass", "token types equal")


def _eog(t: Side, d: Side, rules: RuleSet) -> CheckResult:
    """End-of-generation tokens the runtime rule does not compare (eos when not added, eot, eom)."""
    tv, dv = t.vocab, d.vocab
    diffs: dict[str, object] = {}
    if not (tv.add_eos and dv.add_eos) and tv.eos != dv.eos:
        diffs["eos"] = {"target": tv.eos, "draft": dv.eos}
    same_texts = t.summary.tokenizer.tokens_sha256 == d.summary.tokenizer.tokens_sha256
    for kind, texts in (("eot", rules.eot_texts), ("eom", rules.eom_texts)):
        a, b = getattr(tv, kind), getattr(dv, kind)
        if a is None and b is None and same_texts:
            continue  # same token texts: llama.cpp's detection by text finds the same ids
        ta = [a] if a is not None else t.ids_of(texts)
        tb = [b] if b is not None else d.ids_of(texts)
        if ta != tb:
            diffs[kind] = {"target": ta, "draft": tb}
    if diffs:
        return result("vocab.eog", "warn", "end-of-generation tokens differ: " + ", ".join(diffs), **diffs)
    return result("vocab.eog", "pass", "end-of-generation tokens agree")


def _template(t: Side, d: Side) -> CheckResult:
    """Chat templates compared by SHA-256 only (never rendered)."""
    a, b = t.summary.tokenizer.chat_template_sha256, d.summary.tokenizer.chat_template_sha256
    ev = {"target_sha256": a, "draft_sha256": b}
    if a == b:
        return result("vocab.chat_template", "pass", "same chat template" if a else "neither has a chat template", **ev)
    if a is None or b is None:
        has = "draft" if a is None else "target"
        return result(
            "vocab.chat_template",
            "info",
            f"only the {has} has a chat template (the server formats with the target's)",
            **ev,
        )
    return result("vocab.chat_template", "warn", "chat templates differ (SHA-256)", **ev)


def tokenizer_identity(code: str, t: Side, d: Side, rules: RuleSet) -> CheckResult:
    """A target-trained draft (EAGLE-3, DFlash) must carry exactly the target's tokenizer."""
    tv, dv = t.vocab, d.vocab
    problems: list[str] = []
    ev: dict[str, object] = {"target": tv.as_evidence(), "draft": dv.as_evidence()}
    if tv.vocab_type != dv.vocab_type:
        problems.append(f"vocab type {tv.vocab_type} vs {dv.vocab_type}")
    if tv.n_tokens != dv.n_tokens:
        problems.append(f"{tv.n_tokens} vs {dv.n_tokens} tokens")
    for key in ("add_bos", "bos", "add_eos", "eos"):
        if getattr(tv, key) != getattr(dv, key):
            problems.append(f"{key} {getattr(tv, key)} vs {getattr(dv, key)}")
    ids, count = _texts_differ(t, d, 0, min(tv.n_tokens, dv.n_tokens), rules)
    if count:
        problems.append(f"{plural(count, 'token text')} differ{'s' if count == 1 else ''}")
        ev["n_differ"] = count
        ev["first"] = _token_evidence(t, d, ids)
    if problems:
        return result(code, "error", "draft tokenizer is not the target's: " + "; ".join(problems), **ev)
    return result(code, "pass", "draft carries the target's tokenizer", **ev)
