"""The malformed-GGUF corpus generator (make_corpus.py), shared by reader tests and the fuzzer."""
