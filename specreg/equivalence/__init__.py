"""Output equivalence beyond the comparison: why a greedy output differs from the baseline's."""
