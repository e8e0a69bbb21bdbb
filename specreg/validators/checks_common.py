"""Checks every draft method shares: is a speed-up possible, can the files be benchmarked.

None of these stop llama.cpp; they say whether deploying the pair can pay off (a draft as big
as its target cannot make it faster) or whether a benchmark can be run at all.
"""

from __future__ import annotations

import os
from math import prod

from specreg.schemas.checks import CheckResult
from specreg.schemas.gguf import TensorInfo
from specreg.units import ratio_text, size_text
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


# Tensors a decode step reads one row of (a lookup), as long as a separate output matrix exists:
# with tied embeddings (no output.weight) the token embedding is also the output projection.
_LOOKUP_TENSORS = ("token_embd.weight", "per_layer_token_embd.weight")
_OUTPUT_TENSOR = "output.weight"
_SWAP_RATIO = 2.0  # a draft this many times the target's bytes is almost certainly the target


def decode_bytes(tensors: list[TensorInfo]) -> int:
    """Weight bytes one decode step streams: every tensor by its stored type's size, lookups one row.

    What a draft costs per token is the memory it reads (and the compute on it), so a Q4_1 file
    of a model costs about a seventh of its F32 file although both have the same parameters.
    """
    tied = not any(t.name == _OUTPUT_TENSOR for t in tensors)
    total = 0
    for t in tensors:
        if t.name in _LOOKUP_TENSORS and not (tied and t.name == "token_embd.weight"):
            rows = max(1, prod(t.shape[1:]))
            total += t.n_bytes // rows
        else:
            total += t.n_bytes
    return total


def precision(side: Side) -> str:
    """The file's precision in llama.cpp's words (Q4_1, F16, ...): its file type, else its biggest tensor type."""
    name = side.summary.file_type_name
    if name and not name.startswith(("UNKNOWN", "GUESSED")):
        return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    by_type: dict[str, int] = {}
    for t in side.file.tensors:
        by_type[t.type_name] = by_type.get(t.type_name, 0) + t.n_bytes
    return max(by_type, key=by_type.__getitem__) if by_type else "unknown"


def same_model_shape(t: Side, d: Side) -> bool:
    """Same architecture, tokenizer and tensor names/shapes: the draft is another precision of the target."""
    ts, ds = t.summary, d.summary
    if ts.architecture != ds.architecture or ts.tokenizer.tokens_sha256 != ds.tokenizer.tokens_sha256:
        return False
    return [(x.name, x.shape) for x in t.file.tensors] == [(x.name, x.shape) for x in d.file.tensors]


def identical(t: Side, d: Side) -> bool:
    """The draft is the target's bytes: the same SHA-256 where known, else the same file on disk."""
    ts, ds = t.summary.sha256, d.summary.sha256
    if ts and ds:
        return ts == ds
    try:
        return os.path.samefile(t.summary.path, d.summary.path)
    except OSError:
        return False


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
    """Warn when the draft does not read clearly fewer weight bytes per token than the target (`draft.size`)."""
    ratio_limit = rules.advisory.draft_size_warn_ratio
    if t.summary.vocab_only or d.summary.vocab_only:
        return result("draft.size", "info", "a vocab-only file: sizes cannot be compared", warn_ratio=ratio_limit)
    tv, dv = decode_bytes(t.file.tensors), decode_bytes(d.file.tensors)
    same_shape = same_model_shape(t, d)
    quantized = same_shape and dv < tv
    ev: dict[str, object] = {
        "basis": "weight bytes per decode step",
        "target": tv,
        "draft": dv,
        "target_precision": precision(t),
        "draft_precision": precision(d),
        "target_parameters": t.summary.parameter_count,
        "draft_parameters": d.summary.parameter_count,
        "same_model_shape": same_shape,
        "warn_ratio": ratio_limit,
    }
    ratio = dv / tv if tv else float("inf")
    ev["ratio"] = round(ratio, 4) if tv else None
    per_token = f"{size_text(dv)} vs {size_text(tv)} per token"
    if dv >= tv:
        if ratio >= _SWAP_RATIO:
            msg = (
                f"draft reads {ratio_text(ratio)} the target's weight bytes ({per_token}): "
                "did you swap target and draft?"
            )
        else:
            msg = f"draft is not smaller than the target ({per_token}): no speed-up possible"
        return result("draft.size", "warn", msg, **ev)
    what = (
        f"a {ev['draft_precision']} draft of the same model as the {ev['target_precision']} target"
        if quantized
        else "draft"
    )
    if ratio >= ratio_limit:
        extra = (
            ": little speed-up unless almost every token is accepted"
            if quantized
            else ": little or no speed-up to expect"
        )
        return result(
            "draft.size", "warn", f"{what} reads {ratio:.0%} of the target's weight bytes ({per_token}){extra}", **ev
        )
    return result("draft.size", "pass", f"{what} reads {ratio:.1%} of the target's weight bytes ({per_token})", **ev)


def draft_identical(t: Side, d: Side) -> CheckResult | None:
    """Information when the draft is the target's own bytes (`draft.identical`); None otherwise."""
    if not identical(t, d):
        return None
    sha = t.summary.sha256 or d.summary.sha256
    how = f"same SHA-256 {sha[:12]}" if sha else "the same file"
    return result(
        "draft.identical", "info", f"draft and target are byte-identical ({how}): was another file meant?",
        sha256=sha, target=t.summary.path, draft=d.summary.path,
    )  # fmt: skip


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
