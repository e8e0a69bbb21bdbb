"""Performance scripts: each prints ratios against a named reference measured in the same run."""
