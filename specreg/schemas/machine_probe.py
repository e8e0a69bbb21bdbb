"""What one model costs on one machine: llama.cpp's own timings from a short server start.

A prediction of speculative decoding needs prices the GGUF header cannot give: how long the
target takes for one decode, how long for a batch of k+1 tokens (a verify step), and how long
the draft takes for one decode. They decide the sign of the speed-up (on a CPU a batch of six
tokens costs several decodes; on a GPU about one) and they are the machine's, the build's and
the flags', not the file's. So a probe is keyed by the file's SHA-256, the hardware class, the
runtime (the bundled xllamacpp release, or an external binary's SHA-256) and the speed flags
(threads, GPU layers). Every round is kept as it was measured (a decode and each batch size),
so the prices and their spread can be taken again from what was measured.
"""

from __future__ import annotations

from pydantic import Field

from specreg.schemas.base import BaseModel


class ProbeRound(BaseModel):
    """One round of a probe: one prompt batch of each size, each followed by one decode step."""

    decode_ms: float  # the round's fastest decode step (predicted_ms / (predicted_n - 1))
    batch_ms: dict[int, float]  # a prompt batch of n tokens (prompt_n) -> its prompt_ms


class MachineProbe(BaseModel):
    """One model's decode and batch costs on one machine, build and set of flags."""

    sha256: str
    name: str | None = None  # the file's name when it was probed (for people; the key is the hash)
    hardware: str  # servers.hardware.hardware_class of the machine
    runtime: str  # "bundled xllamacpp 2026.10.11549" / "external <binary SHA-256>"
    flags: list[str] = Field(default_factory=list)  # -t/-tb, -ngl as the servers that use it get them
    rounds: list[ProbeRound]
    # the output matrix's share of the matrix weights (header): a prompt batch computes logits for
    # its last token only, a verify step for every token it checks, so each of those costs this more
    output_share: float | None = None
    seconds: float  # the probe's wall time: the server's start and every request
    cpu_seconds: float | None = None  # the server's CPU time over the same (the cost whatever the load)
    load: float | None = None  # the machine's 1-minute load average when it started
    probed_at: str

    def decode_ms(self) -> list[float]:
        """Each round's decode time per token."""
        return [r.decode_ms for r in self.rounds]


class PairProbeRequest(BaseModel):
    """One probe prompt, generated to the same length by the target alone and by the pair."""

    prompt: str  # the probe prompt's id (benchmark/run/pair_probe.py)
    tokens: int  # generated tokens (the same for both: greedy, end of text ignored)
    base_ms: float  # the target alone: llama.cpp's predicted_ms (the decode phase)
    spec_ms: float  # the same with the draft at draft length k
    base_prompt_ms: float = 0.0  # the target alone: prompt_ms (the prompt phase)
    spec_prompt_ms: float = 0.0  # with the draft (the draft's own prompt work shows in its decode)
    drafted: int
    accepted: int
    steps: int | None = None  # target steps that carried a draft (/metrics); None: not exposed

    @property
    def speedup(self) -> float:
        """The decode phase's speed-up."""
        return self.base_ms / self.spec_ms

    @property
    def end_to_end(self) -> float:
        """The request's, prompt phase included (as `bench` times a request)."""
        return (self.base_prompt_ms + self.base_ms) / (self.spec_prompt_ms + self.spec_ms)


class PairProbe(BaseModel):
    """A target and draft run together on a few short prompts on one machine: the acceptance
    this draft gets and what speculation at one draft length does to the decode time."""

    target_sha256: str
    draft_sha256: str
    name: str | None = None  # the draft's file name when it was probed (for people)
    method: str
    draft_length: int  # --spec-draft-n-max of the pair's server
    hardware: str
    runtime: str
    flags: list[str] = Field(default_factory=list)
    requests: list[PairProbeRequest]
    seconds: float  # both servers' starts and every request
    load: float | None = None
    probed_at: str

    def counts(self) -> tuple[int, int, int | None]:
        """(drafted, accepted, steps) over every prompt (steps None when a request had none)."""
        steps = [r.steps for r in self.requests]
        total = sum(s for s in steps if s is not None) if all(s is not None for s in steps) else None
        return sum(r.drafted for r in self.requests), sum(r.accepted for r in self.requests), total
