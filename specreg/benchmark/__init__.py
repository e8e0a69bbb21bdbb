"""Benchmarking admitted pairs on real llama.cpp servers, in four parts by job.

workloads/ (what is asked) lies beneath; store/ (what is kept, and what is derived from it
alone) below plan/ (what will be measured) below run/ (measuring): run imports plan and store,
plan imports store, store imports neither (tests/project/test_import_graph.py holds the stack).
"""
