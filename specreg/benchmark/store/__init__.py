"""What a benchmark keeps, and everything derived from that alone.

The run store (it owns every bench_* table), the run index the audit and `runs` read, digests,
and the summaries drawn from stored rows with what they need: the statistics, step costs,
contended rounds set aside, the sampled-stage checks. An import derives a bundle's summaries
again with this code, so nothing here may depend on how a run was planned or measured: it
imports nothing of plan/ or run/.
"""
