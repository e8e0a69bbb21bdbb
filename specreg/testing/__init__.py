"""Tiny GGUF model factory for tests, the demo and benchmarks."""

from specreg.testing.factory import ModelSpec, write_model

__all__ = ["ModelSpec", "write_model"]
