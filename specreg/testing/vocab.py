"""A small byte-level vocabulary (SPM or BPE style) for the tiny test models."""

from __future__ import annotations

from dataclasses import dataclass

import gguf

from specreg.testing.modelspec import ModelSpec

_T = gguf.TokenType

# Word pieces in a fixed order so every model built from the same spec has the same ids.
_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "her",
    "she",
    "there",
    "been",
    "one",
    "all",
    "we",
    "their",
    "has",
    "would",
    "when",
    "if",
    "so",
    "what",
    "no",
    "def",
    "return",
    "class",
    "import",
    "self",
    "print",
    "json",
    "code",
    "edit",
    "file",
    "line",
    "value",
    "name",
    "data",
    "list",
    "key",
    "true",
    "false",
    "null",
    "none",
    "int",
    "str",
    "for",
    "while",
    "else",
    "elif",
    "try",
    "except",
    "raise",
    "with",
    "yield",
    "lambda",
    "async",
    "await",
    "model",
    "draft",
    "target",
    "token",
    "speed",
    "test",
    "run",
    "bench",
    "llama",
    "server",
    "speculative",
    "decode",
    "accept",
    "reject",
    "hello",
    "world",
    "please",
    "answer",
    "question",
    "reason",
    "step",
    "first",
    "then",
    "next",
    "finally",
    "because",
    "therefore",
    "summary",
    "document",
    "long",
    "input",
    "output",
    "format",
    "schema",
    "object",
    "array",
    "string",
    "number",
    "boolean",
    "field",
    "user",
    "assistant",
    "system",
    "chat",
    "message",
    "reply",
    "think",
    "solve",
    "count",
    "add",
    "sub",
    "mul",
    "div",
    "result",
    "ok",
    "error",
]


@dataclass(frozen=True)
class Vocab:
    texts: list[str]
    scores: list[float]
    types: list[int]
    merges: list[str]


def _spm_base() -> tuple[list[str], list[int]]:
    texts = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [_T.UNKNOWN, _T.CONTROL, _T.CONTROL] + [_T.BYTE] * 256
    return texts, [int(t) for t in types]


def _bpe_base() -> tuple[list[str], list[int]]:
    # GPT-2 style byte-to-unicode alphabet: every byte is one printable character.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + n)
            n += 1
    texts = ["<unk>", "<s>", "</s>"] + [mapping[b] for b in range(256)]
    types = [_T.CONTROL, _T.CONTROL, _T.CONTROL] + [_T.NORMAL] * 256
    return texts, [int(t) for t in types]


def build_vocab(spec: ModelSpec) -> Vocab:
    """The token list for `spec`: specials, 256 bytes, word pieces, then extras and padding."""
    bpe = spec.vocab_type == "gpt2"
    texts, types = _bpe_base() if bpe else _spm_base()
    space = "\u0120" if bpe else "\u2581"
    words = [space + w for w in dict.fromkeys(_WORDS)][: spec.n_words]
    texts += words
    types += [int(_T.NORMAL)] * len(words)
    texts += [f"<extra_{i}>" for i in range(spec.extra_tokens)]
    types += [int(_T.USER_DEFINED)] * spec.extra_tokens
    texts += [f"[PAD{i}]" for i in range(spec.pad_tokens)]
    types += [int(_T.UNUSED)] * spec.pad_tokens
    for idx, text in spec.token_edits:
        texts[idx] = text
    for idx, typ in spec.token_type_edits:
        types[idx] = typ
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i + 1) for i in range(len(texts) - 259)]
    merges: list[str] = []
    if bpe:
        merges = [f"{w[0]} {w[1:]}" for w in words if len(w) > 1]
        for idx, merge in spec.merge_edits:
            merges[idx] = merge
    return Vocab(texts=texts, scores=scores, types=types, merges=merges)
