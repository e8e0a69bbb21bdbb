"""What a benchmark will measure: its conditions and their schedule, which pairs can run,
the draft-length tuning, and the `--budget` scheduler with the projection it plans by.

It reads what was stored (store/) and never starts a server: the runner (run/) asks it what to
measure next and measures it.
"""
