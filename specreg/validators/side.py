"""One file of a pair as the checks see it: summary, effective vocab, lazily decoded arrays.

Token texts and types are decoded only when a fingerprint comparison says they differ; the
summary is built once per file (the reader copies it on every call).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import compress
from typing import Any

from specreg.gguf.reader import GGUFFile
from specreg.gguf.summary import summarize
from specreg.schemas.checks import CheckResult, Severity
from specreg.schemas.gguf import GGUFSummary, TensorInfo
from specreg.validators.effective import EffectiveVocab, effective_vocab
from specreg.validators.ruleset import RuleSet


@dataclass
class Side:
    """The target or the draft of a pair."""

    role: str
    file: GGUFFile
    summary: GGUFSummary
    vocab: EffectiveVocab
    _texts: list[str] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, role: str, file: GGUFFile, rules: RuleSet) -> Side:
        shared = summarize(file, shared=True)  # a shallow copy: a Side only reads, but fills sha256
        summary = replace(shared, sha256=shared.sha256 or file.sha256)
        return cls(role, file, summary, effective_vocab(summary, rules))

    @property
    def name(self) -> str:
        return self.summary.name or self.summary.path

    @property
    def n_layer(self) -> int | None:
        """llama.cpp's n_layer: block_count minus the MTP (next-n) blocks."""
        blocks = self.summary.block_count
        if blocks is None:
            return None
        return blocks - (self.summary.speculative.nextn_predict_layers or 0)

    def texts(self) -> list[str]:
        if self._texts is None:
            self._texts = self.file.token_texts()
        return self._texts

    def ids_of(self, wanted: list[str]) -> list[int]:
        """Ids whose text is one of `wanted`: llama.cpp's fallback for eot/eom ids missing in the file.

        llama.cpp keeps the first match its hash map yields, so with several candidates the
        choice is not defined; callers compare the whole sorted candidate list.
        """
        wanted_set = frozenset(wanted)
        texts = self.texts()  # one C-level pass: map + compress, no per-token Python frame
        return list(compress(range(len(texts)), map(wanted_set.__contains__, texts)))

    def types(self) -> list[int]:
        return self.file.token_types()

    def tensor(self, name: str) -> TensorInfo | None:
        return self.file.tensor(name)


def result(code: str, severity: Severity, message: str, **evidence: Any) -> CheckResult:
    """One check outcome; evidence values must be JSON-serialisable. Messages quote file text: capped."""
    return CheckResult(code=code, severity=severity, message=clip(message, 500), evidence=evidence)


def clip(text: str, limit: int = 200) -> str:
    """Untrusted text (a token can be megabytes) cut for evidence and messages."""
    return text if len(text) <= limit else text[:limit] + f"...(+{len(text) - limit} chars)"


def first_diffs(a: Sequence[Any], b: Sequence[Any], start: int, stop: int, limit: int) -> tuple[list[int], int]:
    """The first `limit` indices in [start, stop) where a and b differ, and how many differ."""
    first: list[int] = []
    count = 0
    for i in range(start, stop):
        if a[i] != b[i]:
            count += 1
            if len(first) < limit:
                first.append(i)
    return first, count
