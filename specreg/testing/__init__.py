"""Tiny GGUF model factory for tests, the demo and benchmarks."""

from specreg.testing.factory import write_model
from specreg.testing.modelspec import ModelSpec

__all__ = ["ModelSpec", "write_model"]
