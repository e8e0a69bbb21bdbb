"""The adoption gate: policy, gates, per-stratum decisions and the audit run over registry and run store."""
