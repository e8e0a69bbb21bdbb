"""The GGUF metadata reader: format constants, bounded walk, typed getters, summary (no tensor data)."""
