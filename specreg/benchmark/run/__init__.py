"""Measuring: the runner, one slot of a condition on a fresh llama.cpp server, the client and the
reading of its replies, warm-up, the run's manifest and `--probe`.

The top of benchmark/: it follows the plan (plan/), writes through the store (store/) and asks
equivalence/ to complete token ids and explain mismatches.
"""
