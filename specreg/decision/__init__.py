"""Deciding a speed-up: the anytime-valid sequence (sequential) and the plan of a --budget (budget).

Pure arithmetic on paired timings, below the benchmark that measures them.
"""
