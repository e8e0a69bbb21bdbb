"""Signatures, below both the audit and the bundles: keys and DSSE envelopes, who signed what (the
attestation tables), which keys a policy trusts, and OpenSSF model signatures on GGUF files."""
