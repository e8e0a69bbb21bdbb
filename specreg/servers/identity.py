"""Which llama.cpp build a server is, and so which rule set judges the pairs it runs.

A pair is judged by the rules of the server that will run it: the bundled server's build (the
installed xllamacpp release's last number), or the build a `--server` binary's `--version`
reports, or the nearest shipped rule set with a warning; `--runtime` overrides. Light on
purpose: `check pair` without a server imports nothing heavier than the rule sets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specreg.validators.ruleset import RuleSet

BUNDLED_PACKAGE = "xllamacpp"
_LLAMA_VERSION = re.compile(r"\bversion:\s*(\d+)\b")  # llama-server --version: "version: 11434 (abc1234)"
_XLLAMACPP = re.compile(r"\bxllamacpp\s+\d+\.\d+\.(\d+)\b")  # the bundled server: "xllamacpp 2026.10.11549"


def build_of(version_text: str | None) -> int | None:
    """The llama.cpp build a `--version` text (or a run's runtime identity) names; None: it names none.

    llama.cpp prints `version: N (commit)`; a build from a tarball without git says `version: 0`,
    and the bundled server then names its xllamacpp release, whose last number is the build."""
    if not version_text:
        return None
    m = _LLAMA_VERSION.search(version_text)
    if m and int(m.group(1)) > 0:
        return int(m.group(1))
    m = _XLLAMACPP.search(version_text)
    return int(m.group(1)) if m else None


_COMMIT = re.compile(r"\bversion:\s*\d+\s*\(([0-9a-f]{6,40})\)")


@lru_cache(maxsize=64)  # an audit names the same few runtimes in thousands of evidence gates
def runtime_text(identity: str | None) -> str:
    """A run's runtime identity (`benchmark.digest.runtime_identity`: kind + `--version` text) as
    people read it: 'bundled xllamacpp 2026.10.11549 (llama.cpp build 11549)', 'external
    llama.cpp build 11434 (abc1234)'. The raw text says `version: 0 (unknown)` for the bundled
    server (its wheel has no git) and spans lines; this names the build it actually is."""
    if not identity:
        return "unknown runtime"
    words = identity.split(None, 1)
    kind = words[0] if words and words[0] in ("bundled", "external") else ""
    build = build_of(identity)
    xl = re.search(r"\bxllamacpp\s+(\d+\.\d+\.\d+)\b", identity)
    commit = _COMMIT.search(identity)
    parts = [kind] if kind else []
    if xl:
        parts.append(f"xllamacpp {xl.group(1)}")
    if build is not None:
        b = f"llama.cpp build {build}" + (f", {commit.group(1)}" if commit and commit.group(1) != "unknown" else "")
        parts.append(f"({b})" if xl else b.replace(", ", " (", 1) + (")" if commit else ""))
    if len(parts) <= (1 if kind else 0):  # nothing recognised: the first line as it was written
        rest = (words[1] if kind and len(words) > 1 else identity).strip().splitlines()
        parts.append(rest[0].strip() if rest else "version unknown")
    return " ".join(parts)


def bundled_version() -> str | None:
    """The installed xllamacpp release, from package metadata (importing it would load llama.cpp)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(BUNDLED_PACKAGE)
    except PackageNotFoundError:
        return None


@dataclass(frozen=True)
class ChosenRules:
    """The rule set for a runtime, what chose it, and the warning when it is not that build's own."""

    rules: RuleSet
    why: str  # "bundled server xllamacpp 2026.10.11549 (build 11549)", "--runtime", ...
    warning: str | None = None

    def line(self) -> str:
        """`rules: llama.cpp-b11549/r1 (bundled server ...)`, as commands print it."""
        return f"{self.rules.id} ({self.why})"


def for_runtime_text(version_text: str | None, who: str) -> ChosenRules:
    """The rule set for a server whose `--version` printed `version_text` (`who` names it)."""
    from specreg.validators.ruleset import for_build

    build = build_of(version_text)
    rules, warning = for_build(build)
    return ChosenRules(rules, f"{who}, build {build}" if build is not None else f"{who}, build unknown", warning)


def choose_rules(runtime: str | None = None, server: str | None = None, timeout_s: float = 30.0) -> ChosenRules:
    """`--runtime` when given; else the build of `server` (a llama-server path, asked `--version`);
    else the bundled server's."""
    from specreg.validators.ruleset import load_rule_set

    if runtime is not None:
        return ChosenRules(load_rule_set(runtime), "--runtime")
    if server is not None:
        from specreg.servers.launcher import external_command
        from specreg.servers.runtime import version_text

        cmd = external_command(server)
        return for_runtime_text(version_text(cmd, timeout_s), f"--server {cmd.path}")
    release = bundled_version()
    who = f"bundled server xllamacpp {release}" if release else "bundled server (xllamacpp not installed)"
    return for_runtime_text(f"xllamacpp {release}" if release else None, who)


def needs_other_rules(verdict_rule_set: str, needed: RuleSet) -> bool:
    """A verdict judged under another build's rules than `needed` (a stale revision is not this:
    the rule set's own staleness check re-judges it)."""
    return verdict_rule_set.rsplit("/r", 1)[0] != needed.name


def recheck_hint(needed: RuleSet) -> str:
    """The command that re-judges the registry's pairs under `needed`."""
    return f"specreg pairs --recheck --runtime {needed.name}"
