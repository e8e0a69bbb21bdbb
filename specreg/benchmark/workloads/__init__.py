"""What a benchmark asks: workloads.

The built-in strata (the JSONL data beside this file), a user's JSONL file or a standard set,
strictly validated and pinned by content hash, sampled with the run's seed, with the `expect`
checks a prompt may carry. It imports nothing else of benchmark/: every other part reads it.
"""
