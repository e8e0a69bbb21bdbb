"""After deploy: `specreg watch` holds a running llama-server to the evidence that admitted it.

scrape (its `/metrics`, `/props`, `/slots`, bounded) -> identify (what it runs: through its process
when it listens here, else `/props`) -> audited (the audited deploy of that pair and stratum, and
what the bench measured for it) -> drift (live against audited, an anytime-valid test over
windows) -> watcher (the windows and their states) -> windows (the registry's `watch_windows`) and
exporter (Prometheus gauges). docs/watch.md is the user's page.
"""
