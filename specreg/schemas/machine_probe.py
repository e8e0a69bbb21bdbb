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
