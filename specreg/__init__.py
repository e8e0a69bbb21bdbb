"""specreg: admit, benchmark and audit speculative-decoding setups for llama.cpp."""

__version__ = "0.1.0"
