"""Long-running fuzzing of the GGUF reader (run as `cd tests && python -m fuzz.fuzz_reader`)."""
