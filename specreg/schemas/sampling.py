"""The sampler a request is made with: one vocabulary for bench flags, records, policy and deploy.

Speed-ups are only comparable at the same sampler (temperature and top-p move the acceptance
rate), so the sampler is part of every condition's identity, every request's record and the
policy's evidence filter. Greedy (temperature 0) is the default everywhere, as before.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# llama.cpp's --spec-draft-sampling: the draft's argmax (the target samples and matches), or a
# sampled draft the target verifies by rejection sampling (same output distribution, other RNG use)
DraftSampling = Literal["greedy", "probabilistic"]
MAX_TEMPERATURE = 5.0  # llama.cpp accepts any float; beyond this no deployment samples


class Sampler(BaseModel):
    """temperature, top_p, top_k, min_p as a request sends them; None: the server's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(default=0.0, ge=0.0, le=MAX_TEMPERATURE)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)

    @property
    def greedy(self) -> bool:
        """Temperature 0: the output is a function of the prompt (what exact equivalence needs)."""
        return self.temperature == 0.0

    @property
    def key(self) -> tuple[float, float | None, int | None, float | None]:
        """What makes two samplers the same evidence: at temperature 0 only that (the argmax is
        the argmax whatever top-p, top-k or min-p keep), else every field."""
        if self.greedy:
            return (0.0, None, None, None)
        return (self.temperature, self.top_p, self.top_k, self.min_p)

    @property
    def label(self) -> str:
        """`T0`, `T0.7`, `T0.7 p0.9 k40 m0.05`: how tables and messages name it."""
        parts = [f"T{self.temperature:g}"]
        if self.top_p is not None:
            parts.append(f"p{self.top_p:g}")
        if self.top_k is not None:
            parts.append(f"k{self.top_k}")
        if self.min_p is not None:
            parts.append(f"m{self.min_p:g}")
        return " ".join(parts)

    def request_fields(self) -> dict[str, float | int]:
        """The fields of a llama.cpp request body (unset ones left to the server)."""
        out: dict[str, float | int] = {"temperature": self.temperature}
        for key in ("top_p", "top_k", "min_p"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    def bench_flags(self) -> str:
        """The `bench admitted` flags that measure at this sampler (hints name them)."""
        out = f"--temperature {self.temperature:g}"
        if self.top_p is not None:
            out += f" --top-p {self.top_p:g}"
        if self.top_k is not None:
            out += f" --top-k {self.top_k}"
        if self.min_p is not None:
            out += f" --min-p {self.min_p:g}"
        return out


GREEDY = Sampler()


def repetition_seed(seed: int, repeat: int) -> int:
    """The sampling seed of repetition `repeat`: fixed and recorded, so a sampled run can be made
    again, and different per repetition, so the repetitions are independent draws of the sampler
    (the distribution check needs draws; greedy output ignores the seed). Within 32 bits, as
    llama.cpp's seed is a uint32 (and 0xFFFFFFFF means "random")."""
    return (seed + repeat) % 0xFFFFFFFF
