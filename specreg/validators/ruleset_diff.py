"""What changed between two rule sets, in words, and which files each change can concern.

`specreg rules diff` prints the changes; `specreg pairs --recheck` uses their facets to tell,
from a pair's stored summaries alone, whether a change can touch its verdict at all: a change
keyed by an architecture, a tokenizer model or a pre-tokenizer concerns only the files that
have it; every other change (a threshold, the end-of-turn texts, ...) concerns every pair.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specreg.schemas.record import to_python
from specreg.validators.ruleset import RuleSet

# facts that are not llama.cpp's (the file's identity): never a change of rules
_IDENTITY = ("name", "revision", "runtime", "build", "source", "description")
# entry tables keyed by one name, what the name is, and the facet it is keyed by
_TABLES: dict[str, tuple[str, str]] = {
    "tokenizer_models": ("tokenizer model", "tokenizer"),
    "bpe_pre_tokenizers": ("pre-tokenizer", "pre"),
    "structure/block_tensors": ("tensors every block needs, architecture", "arch"),
    "structure/block_tensors_dense": ("tensors every dense block needs, architecture", "arch"),
    "memory/swa_patterns": ("sliding-window layer pattern, architecture", "arch"),
    "vocab_type_ids": ("vocab type id", "vtype"),
}
# lists of architecture names: membership is the fact
_ARCH_LISTS = {
    "mtp/architectures": "architectures with an MTP graph",
    "structure/token_embd_required": "architectures that need token_embd.weight",
    "structure/token_embd_vocab": "architectures whose token_embd.weight is sized by the vocabulary",
    "structure/output_vocab": "architectures whose output.weight is sized by the vocabulary",
    "dflash/final_layer_archs": "DFlash targets that expose their final layer",
}


@dataclass(frozen=True)
class RuleChange:
    """One difference: where (`path`), in words, and the facet of the files it concerns."""

    path: str
    text: str
    facet: str  # "tokenizer", "pre", "vtype", "arch" or "all"
    key: str | None = None  # the tokenizer model, pre-tokenizer, vocab type or architecture (facet != "all")


def _short(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(g, list) for g in value):
        return ", ".join(" or ".join(map(str, g)) for g in value)  # tensor groups: one alternative of each
    if isinstance(value, dict):
        return ", ".join(f"{k} {_short(v)}" for k, v in value.items() if v not in (None, False, [], {}))
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    if isinstance(value, str):
        return value if " " in value else json.dumps(value, ensure_ascii=False)  # words as they are
    return str(value).lower()


def _swa(rule: Any) -> str:
    n, dense_first = rule
    if n < 0:
        return "the per-layer pattern must be in the file"
    return f"every {n}th layer dense" + (" (the first dense)" if dense_first else "") if n else "no sliding window"


def _entry_change(old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)]
        return "; ".join(f"{k} {_short(old.get(k))} -> {_short(new.get(k))}" for k in keys)
    return f"{_short(old)} -> {_short(new)}"


def _walk(a: Any, b: Any, path: str, out: list[RuleChange]) -> None:
    if a == b:
        return
    if path in _TABLES and isinstance(a, dict) and isinstance(b, dict):
        what, facet = _TABLES[path]
        if path == "memory/swa_patterns":
            a, b = {x: _swa(v) for x, v in a.items()}, {x: _swa(v) for x, v in b.items()}
        for k in dict.fromkeys([*a, *b]):
            key = None if facet == "all" else k
            if k not in a:
                out.append(RuleChange(path, f"{what} {k!r} added: {_short(b[k])}", facet, key))
            elif k not in b:
                out.append(RuleChange(path, f"{what} {k!r} removed (was {_short(a[k])})", facet, key))
            elif a[k] != b[k]:
                out.append(RuleChange(path, f"{what} {k!r} changed: {_entry_change(a[k], b[k])}", facet, key))
        return
    if path in _ARCH_LISTS and isinstance(a, list) and isinstance(b, list):
        for arch in sorted(set(b) - set(a)):
            out.append(RuleChange(path, f"{_ARCH_LISTS[path]}: {arch!r} added", "arch", arch))
        for arch in sorted(set(a) - set(b)):
            out.append(RuleChange(path, f"{_ARCH_LISTS[path]}: {arch!r} removed", "arch", arch))
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in dict.fromkeys([*a, *b]):
            if k in _IDENTITY and not path:
                continue
            sub = f"{path}/{k}" if path else k  # "/": a path, never read as a check code
            if k not in a:
                out.append(RuleChange(sub, f"{sub} added: {_short(b[k])}", "all"))
            elif k not in b:
                out.append(RuleChange(sub, f"{sub} removed (was {_short(a[k])})", "all"))
            else:
                _walk(a[k], b[k], sub, out)
        return
    if isinstance(a, list) and isinstance(b, list) and all(isinstance(x, str) for x in a + b):
        added = [x for x in b if x not in a]
        removed = [x for x in a if x not in b]
        parts = ([f"added {_short(added)}"] if added else []) + ([f"removed {_short(removed)}"] if removed else [])
        out.append(RuleChange(path, f"{path}: {'; '.join(parts) or 'reordered'}", "all"))
        return
    out.append(RuleChange(path, f"{path} {_short(a)} -> {_short(b)}", "all"))


def diff_rule_sets(a: RuleSet, b: RuleSet) -> list[RuleChange]:
    """Every difference in llama.cpp facts and specreg's thresholds from `a` to `b`."""
    out: list[RuleChange] = []
    _walk(to_python(a), to_python(b), "", out)
    return out


def file_keys(
    architecture: str | None, model: str | None, pre: str | None, *rule_sets: RuleSet
) -> set[tuple[str, str]]:
    """The (facet, key)s a file's summary has: its architecture, tokenizer model (and the vocab
    type each rule set gives it) and the pre-tokenizer llama.cpp would use (stated, forced by the
    model, or the default one)."""
    keys: set[tuple[str, str]] = set()
    if architecture:
        keys.add(("arch", architecture))
    if model:
        keys.add(("tokenizer", model))
        for rs in rule_sets:
            known = rs.tokenizer_models.get(model)
            if known is not None:
                keys.add(("vtype", known.type))
                if known.force_pre:
                    keys.add(("pre", known.force_pre))
    keys.add(("pre", pre or "default"))
    return keys


def concerning(changes: list[RuleChange], keys: set[tuple[str, str]]) -> list[RuleChange]:
    """The changes that can touch a verdict on files with these keys."""
    return [c for c in changes if c.facet == "all" or (c.facet, c.key or "") in keys]
